"""`layout-solver calibrate vulkan`: measure a device's Vulkan cost profile.

What the solver trades against each other is (a) a transition, one clone
dispatch from one representation to another, and (b) running an op in one
representation rather than another. Both are measured here on the present
device, on real programs lowered by ExecuTorch and run by its Vulkan runtime:

* op modes: for each op class (`rules.OP_CLASSES`) and each representation the
  registry lets it take, a chain of N identical ops with every tensor pinned to
  that representation; the slope between two chain lengths is the time of one
  op, so the program's fixed costs cancel;
* transitions: a chain of unary ops pinned alternately to A and B (one clone
  per link), against the same chains pinned all-A and all-B.

Each (class, representation) and (A, B) pair is fitted over several sizes as
overhead + rate per MiB (non-negative least squares) and written in the
`cost_models.vulkan.VulkanProfile` format with the device name and the command.
"""

from __future__ import annotations

import itertools
import logging
import subprocess
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

import numpy as np
import torch
from scipy.optimize import nnls
from torch import nn
from torch.nn import functional as F

from cost_models import vulkan as vk_cost
from layout_solver.problem import ProblemError
from layout_solver.report import collecting_reports
from layout_solver.vulkan import hooks, passes
from layout_solver.vulkan.runtime import execute, locate_runtime

FLOAT_LABELS = [f"{s}:TENSOR_{p}_PACKED" for s in ("TEXTURE_3D", "BUFFER") for p in ("WIDTH", "HEIGHT", "CHANNELS")]


class _Chain(nn.Module):
    def __init__(self, step: Callable, n: int, weight: torch.Tensor | None = None):
        super().__init__()
        self.step, self.n = step, n
        self.weight = nn.Parameter(weight) if weight is not None else None
        self.bias = nn.Parameter(torch.zeros(weight.shape[0])) if weight is not None else None

    def forward(self, x):
        for _ in range(self.n):
            x = self.step(self, x)
        return x


# Shapes: ordinary tensors, and [1, C, 1, 1] ones whose textures are one texel wide and C (or C/4) deep,
# which separates a dispatch's per-slice cost from its per-byte cost.
SQUARE_4D = [(1, 8, 32, 32), (1, 32, 64, 64), (1, 64, 96, 96)]
DEEP_4D = [(1, 256, 1, 1), (1, 1024, 1, 1)]
# Token tensors: one sequence, several (heads / windows / batch: texture depth), and plain matrices.
TOKENS_3D = [(1, 64, 64), (1, 196, 192), (1, 256, 384)]
BATCHED_3D = [(8, 16, 32), (4, 49, 96), (16, 64, 64)]
MATRICES = [(64, 128), (196, 256)]


@dataclass(frozen=True)
class ProbeSpec:
    """How to measure one op class: `step` is one link of the chain (`per_link` ops of the class), run on
    `shapes[:sizes]` and every `extra` shape; with a `baseline` link, the class's time is the difference
    between the two chains (for ops that cannot follow themselves: two views in a row fuse into one)."""

    step: Callable
    per_link: int
    shapes: list[tuple[int, ...]]
    extra: list[tuple[int, ...]]
    baseline: Callable | None = None
    contraction: bool = False  # priced per MFLOP too: each output element sums over the input's last dim


def _swap_view(m, x):
    # A reshape that is not the identity and not undone by the next link's (C and H trade places).
    return torch.sigmoid(x.reshape(x.shape[0], x.shape[2], x.shape[1], *x.shape[3:]))


PROBES: dict[str, ProbeSpec] = {
    "unary": ProbeSpec(lambda m, x: torch.sigmoid(x), 1, SQUARE_4D, DEEP_4D + BATCHED_3D + MATRICES),
    "binary": ProbeSpec(lambda m, x: x + x, 1, SQUARE_4D, DEEP_4D + BATCHED_3D + MATRICES),
    "permute": ProbeSpec(lambda m, x: x.transpose(-1, -2), 1, SQUARE_4D, DEEP_4D + BATCHED_3D),
    "view": ProbeSpec(_swap_view, 1, SQUARE_4D, BATCHED_3D, baseline=lambda m, x: torch.sigmoid(x)),
    "softmax": ProbeSpec(lambda m, x: torch.softmax(x, -1), 1, TOKENS_3D, BATCHED_3D),
    "layer_norm": ProbeSpec(lambda m, x: F.layer_norm(x, x.shape[-1:], m.weight, m.bias), 1, TOKENS_3D, BATCHED_3D),
    "linear": ProbeSpec(lambda m, x: F.linear(x, m.weight), 1, TOKENS_3D, BATCHED_3D + MATRICES, contraction=True),
    "matmul": ProbeSpec(
        lambda m, x: torch.bmm(x, x),
        1,
        [(4, 64, 64), (6, 128, 128), (8, 196, 196)],
        [(16, 16, 16), (12, 49, 49), (1, 256, 256)],
        contraction=True,
    ),
}


def _pinned_pass(pattern: tuple[str, ...]):
    """A solver pass whose k-th value (graph order) must be stored in pattern[k % len(pattern)]."""

    class Pinned(passes.SolverTagMemoryMetaPass):
        def constrain(self, vproblem) -> None:
            problem = vproblem.problem
            nodes = list(vproblem.value_node.values())
            position = {node: i for i, node in enumerate(nodes[0].graph.nodes)} if nodes else {}
            ranked = sorted(vproblem.value_node, key=lambda vid: position[vproblem.value_node[vid]])
            pinned = {vid: pattern[k % len(pattern)] for k, vid in enumerate(ranked)}
            for value in problem.values:
                if pinned[value.id] not in value.domain:
                    raise ProblemError(f"{value.id} cannot take {pinned[value.id]}", values=[value.id])
                if value.kind == "input":
                    value.fixed = pinned[value.id]
            for op in problem.ops:
                keep = [m for m in op.modes if all(pinned[r] == lab for r, lab in zip(op.results, m.results))]
                if not keep:
                    raise ProblemError(
                        f"{op.id} has no mode with its results in {[pinned[r] for r in op.results]}", ops=[op.id]
                    )
                op.modes = keep

    return Pinned


def lower_pinned(module: nn.Module, inputs: tuple, pattern: tuple[str, ...]) -> tuple[bytes, int] | None:
    """The program with its values pinned to `pattern` (cycled in graph order), and its transition count;
    None if the registry forbids the pins."""
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.exir import to_edge_transform_and_lower

    exported = torch.export.export(module, inputs)
    with warnings.catch_warnings(), collecting_reports() as reports, hooks.substituted_pass(_pinned_pass(pattern)):
        warnings.simplefilter("ignore")
        program = to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()]).to_executorch()
    if any(r.kind != "solver" for r in reports) or len(reports) != 1:
        return None  # a pin the registry refused: the pass fell back to stock
    return program.buffer, len(reports[0].transitions)


def _chain(op: str, shape: tuple[int, ...], n: int, baseline: bool = False) -> tuple[nn.Module, tuple]:
    spec = PROBES[op]
    step = spec.baseline if baseline else spec.step
    weight = None
    if op == "linear":
        weight = torch.linalg.qr(torch.randn(shape[-1], shape[-1]))[0]
    elif op == "layer_norm":
        weight = torch.ones(shape[-1])
    # Orthogonal matrices keep chained products bounded (no inf/NaN in the timed kernels).
    x = torch.linalg.qr(torch.randn(shape))[0].contiguous() if op == "matmul" else torch.rand(shape)
    return _Chain(step, n, weight).eval(), (x,)


@dataclass(frozen=True)
class Job:
    """One program to lower: a chain of `n` links of class `op` (or of its baseline) on `shape`, values
    pinned to `pattern`."""

    name: str
    op: str
    shape: tuple[int, ...]
    n: int
    pattern: tuple[str, ...]
    baseline: bool = False


def _lower_job(job: Job) -> tuple[Job, bytes | None, int, tuple]:
    logging.disable(logging.WARNING)
    module, example = _chain(job.op, job.shape, job.n, job.baseline)
    lowered = lower_pinned(module, example, job.pattern)
    return job, (lowered[0] if lowered else None), (lowered[1] if lowered else 0), example


@dataclass
class Probe:
    """One measurement: the programs whose times give it (roles -> program names) and what it measures."""

    kind: str  # "op" or "transition"
    key: str  # "class|label", or "SRC->DST"
    shape: tuple[int, ...]
    label: str  # the representation whose texture extents the dispatch runs over (its slices are counted)
    programs: dict[str, str]  # role -> program name


def _probe_runs(op: str, shape: tuple[int, ...]) -> bool:
    """Whether a chain of `op` can be built on `shape` (bmm(x, x) wants square matrices, and so on)."""
    try:
        module, example = _chain(op, shape, 2)
        with torch.no_grad():
            module(*example)
    except (RuntimeError, IndexError, ValueError):
        return False
    return tuple(example[0].shape) == tuple(shape)  # QR of a non-square matrix would change the shape


def plan(
    ops: list[str],
    labels: list[str],
    sizes: int,
    short: int,
    long: int,
    transitions: bool,
    shapes: list[tuple[int, ...]] | None = None,
) -> tuple[list[Job], list[Probe]]:
    """Every program to lower, and the probes that read their times; `shapes` replaces the built-in
    probe shapes (each op class takes those its chain can run on)."""
    jobs: dict[str, Job] = {}
    probes: list[Probe] = []

    def job(op, shape, n, pattern, baseline=False) -> str:
        name = f"{op}{'-baseline' if baseline else ''}|{'/'.join(pattern)}|{shape}|{n}"
        jobs.setdefault(name, Job(name, op, shape, n, pattern, baseline))
        return name

    for op in ops:
        spec = PROBES[op]
        op_shapes = (
            [s for s in shapes if _probe_runs(op, s)] if shapes is not None else spec.shapes[:sizes] + spec.extra
        )
        for shape in op_shapes:
            for label in labels:
                programs = {"short": job(op, shape, short, (label,)), "long": job(op, shape, long, (label,))}
                if spec.baseline is not None:
                    programs |= {
                        "base_short": job(op, shape, short, (label,), True),
                        "base_long": job(op, shape, long, (label,), True),
                    }
                probes.append(Probe("op", f"{op}|{label}", shape, label, programs))
    if transitions:
        for shape in shapes if shapes is not None else SQUARE_4D[:sizes] + DEEP_4D + BATCHED_3D + MATRICES:
            for a, b in itertools.combinations(labels, 2):
                if vk_cost.split_repr(a)[0] == vk_cost.split_repr(b)[0] == "BUFFER":
                    continue  # the runtime has no buffer-to-buffer layout clone (routed through a texture)
                for src, dst in ((a, b), (b, a)):
                    # the dispatch runs over the texture side's extents (dst when both are textures)
                    texture_side = dst if vk_cost.split_repr(dst)[0] == "TEXTURE_3D" else src
                    probes.append(
                        Probe(
                            "transition",
                            f"{src}->{dst}",
                            shape,
                            texture_side,
                            {
                                "alt": job("unary", shape, long, (a, b)),
                                "a": job("unary", shape, long, (a,)),
                                "b": job("unary", shape, long, (b,)),
                            },
                        )
                    )
    return list(jobs.values()), probes


def calibrate(
    runtime=None,
    ops: list[str] | None = None,
    labels: list[str] | None = None,
    sizes: int = 3,
    short: int = 2,
    long: int = 10,
    rounds: int = 9,
    transitions: bool = True,
    workers: int = 2,
    log: Callable[[str], None] = print,
    command: str = "",
    shapes: list[tuple[int, ...]] | None = None,
    extend: vk_cost.VulkanProfile | None = None,
) -> vk_cost.VulkanProfile:
    """Measure op modes and transitions on the present device; returns the fitted profile.

    `shapes` measures at those shapes instead of the built-in ones. With `extend`
    (a measured profile), the new points join that profile's samples and every
    touched (class, label) or transition is refitted over old and new points:
    probing the shapes a model actually has (one-token decode, say) without
    measuring everything again.
    """
    logging.getLogger().setLevel(logging.WARNING)
    locate_runtime(runtime)
    jobs, probes = plan(ops or list(PROBES), labels or FLOAT_LABELS, sizes, short, long, transitions, shapes)
    programs: dict[str, bytes] = {}
    inputs: dict[str, tuple] = {}
    clones: dict[str, int] = {}
    start = time.perf_counter()
    # spawn: torch and executorch are not fork-safe once initialised
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        for k, (job, buffer, n_clones, example) in enumerate(pool.map(_lower_job, jobs), 1):
            if buffer is not None:
                programs[job.name], inputs[job.name], clones[job.name] = buffer, example, n_clones
            if k % 25 == 0 or k == len(jobs):
                log(
                    f"[calibrate] lowered {k}/{len(jobs)} programs ({len(jobs) - k} to go, "
                    f"{time.perf_counter() - start:.0f} s)"
                )
    results = execute(programs, inputs, runtime=runtime, warmup=2, rounds=rounds)
    failed = {n: r.error for n, r in results.items() if not r.executed or r.run_ms is None}
    log(
        f"[calibrate] ran {len(results) - len(failed)} programs on the device, {len(failed)} failed "
        f"({time.perf_counter() - start:.0f} s)"
    )
    ms = {n: r.run_ms for n, r in results.items() if n not in failed}
    points: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    for probe in probes:
        if any(p not in ms for p in probe.programs.values()):
            continue
        nbytes = float(np.prod(probe.shape) * 4)
        slices = float(vk_cost.texture_slices(probe.shape, probe.label))
        work: tuple[float, ...] = ()
        if probe.kind == "op":
            op = probe.key.split("|")[0]
            slope = (ms[probe.programs["long"]] - ms[probe.programs["short"]]) / (long - short)
            if "base_long" in probe.programs:
                slope -= (ms[probe.programs["base_long"]] - ms[probe.programs["base_short"]]) / (long - short)
            point = 1000.0 * slope / PROBES[op].per_link
            if PROBES[op].contraction:
                work = (round(vk_cost.mflop(probe.shape, probe.shape[-1]), 4),)
        else:
            # the same unary chain with a clone per link (half each way); the uniform chains price the unary ops
            if clones.get(probe.programs["alt"], 0) == 0:
                continue
            extra = ms[probe.programs["alt"]] - (ms[probe.programs["a"]] + ms[probe.programs["b"]]) / 2
            point = 1000.0 * extra / clones[probe.programs["alt"]]
        points.setdefault((probe.kind, probe.key), []).append((nbytes, slices, round(point, 2), *work))
    if extend is not None:
        return _extended(extend, points, len(programs), len(jobs), failed, command)
    op_modes: dict[str, dict[str, vk_cost.Linear]] = {}
    trans: dict[str, vk_cost.Linear] = {}
    for (kind, key), pts in sorted(points.items()):
        fit = _fit(pts)
        if kind == "op":
            op, label = key.split("|")
            op_modes.setdefault(op, {})[label] = fit
        else:
            trans[key] = fit
    base = vk_cost.load_profile("mobile-gpu")
    return vk_cost.VulkanProfile(
        version=2,
        name="measured",
        device=device_name(),
        measured=True,
        command=command,
        description="Measured on this device by layout-solver calibrate vulkan: op modes from chains of pinned ops "
        "(slope between two chain lengths), transitions from chains alternating between two "
        "representations; each fitted as overhead + rate per MiB + rate per texture slice "
        "(cost_models.vulkan.texture_slices) over several sizes. Unmeasured pairs use the "
        "parametric fallback.",
        parameters=base.parameters,
        transitions=trans,
        op_modes=op_modes,
        samples={f"{kind}:{key}": pts for (kind, key), pts in sorted(points.items())},
        notes=[
            (
                f"{len(programs)} of {len(jobs)} probe programs lowered (the rest the registry refuses), "
                f"{len(failed)} failed on the device"
            )
        ]
        + [f"{n}: {e[:300]}" for n, e in failed.items()],
    )


def _extended(
    base: vk_cost.VulkanProfile,
    new: dict[tuple[str, str], list[tuple[float, ...]]],
    lowered: int,
    planned: int,
    failed: dict[str, str],
    command: str,
) -> vk_cost.VulkanProfile:
    """`base` with the `new` points added to its samples and every touched entry refitted."""
    samples = {key: [tuple(p) for p in pts] for key, pts in base.samples.items()}
    for (kind, key), pts in new.items():
        samples.setdefault(f"{kind}:{key}", []).extend(pts)
    op_modes = {op: dict(table) for op, table in base.op_modes.items()}
    trans = dict(base.transitions)
    for kind, key in new:
        fit = _fit(samples[f"{kind}:{key}"])
        if kind == "op":
            op, label = key.split("|")
            op_modes.setdefault(op, {})[label] = fit
        else:
            trans[key] = fit
    added = sum(len(p) for p in new.values())
    return base.model_copy(
        update={
            "transitions": trans,
            "op_modes": op_modes,
            "samples": dict(sorted(samples.items())),
            "command": f"{base.command}; then {command}" if command else base.command,
            "notes": [
                *base.notes,
                (
                    f"extended: {added} points from {lowered} of {planned} probe programs, "
                    f"{len(failed)} failed on the device; {len(new)} entries refitted"
                ),
            ],
        }
    )


def _fit(points: list[tuple[float, ...]]) -> vk_cost.Linear:
    """Non-negative overhead + rate per MiB + rate per slice (+ rate per MFLOP) through (bytes, slices,
    microseconds[, MFLOP]) points, least squares on relative error (a probe of 50 us counts as much as one of
    5 ms)."""
    a = np.array([[1.0, p[0] / vk_cost.MIB, p[1], p[3] if len(p) > 3 else 0.0] for p in points])
    y = np.array([max(p[2], 1.0) for p in points])
    (overhead, rate, per_slice, per_mflop), _ = nnls(a / y[:, None], np.ones(len(y)))
    return vk_cost.Linear(
        overhead_us=round(float(overhead), 3),
        us_per_mib=round(float(rate), 3),
        us_per_slice=round(float(per_slice), 4),
        us_per_mflop=round(float(per_mflop), 4),
        points=len(points),
    )


def device_name() -> str:
    """The Vulkan device's name, as vulkaninfo reports it (or 'unknown')."""
    try:
        out = subprocess.run(
            ["vulkaninfo", "--summary"], check=False, capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    names = [line.split("=", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("deviceName")]
    return names[0] if names else "unknown"
