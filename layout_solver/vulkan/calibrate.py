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
import statistics
import subprocess
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from scipy.optimize import nnls
from torch import nn
from torch.nn import functional as F

from cost_models import vulkan as vk_cost
from layout_solver.problem import ProblemError
from layout_solver.vulkan import passes
from layout_solver.vulkan.runtime import execute, locate_runtime

FLOAT_LABELS = [f"{s}:TENSOR_{p}_PACKED" for s in ("TEXTURE_3D", "BUFFER") for p in ("WIDTH", "HEIGHT", "CHANNELS")]


class _Chain(nn.Module):
    def __init__(self, step: Callable, n: int, weight: torch.Tensor | None = None):
        super().__init__()
        self.step, self.n = step, n
        self.weight = nn.Parameter(weight) if weight is not None else None

    def forward(self, x):
        for _ in range(self.n):
            x = self.step(self, x)
        return x


# op class -> (one link of the chain, ops of that class per link, shapes to measure)
SQUARE_4D = [(1, 8, 32, 32), (1, 32, 64, 64), (1, 64, 96, 96)]
TOKENS_3D = [(1, 64, 64), (1, 196, 192), (1, 256, 384)]
PROBES: dict[str, tuple[Callable, int, list[tuple[int, ...]]]] = {
    "unary": (lambda m, x: torch.sigmoid(x), 1, SQUARE_4D),
    "binary": (lambda m, x: x + x, 1, SQUARE_4D),
    "permute": (lambda m, x: x.permute(0, 1, 3, 2), 1, SQUARE_4D),
    "view": (lambda m, x: x.reshape(x.shape[0], x.shape[1] * 2, x.shape[2] // 2, -1).reshape(x.shape), 2, SQUARE_4D),
    "softmax": (lambda m, x: torch.softmax(x, -1), 1, TOKENS_3D),
    "layer_norm": (lambda m, x: F.layer_norm(x, x.shape[-1:]), 1, TOKENS_3D),
    "linear": (lambda m, x: F.linear(x, m.weight), 1, TOKENS_3D),
    "matmul": (lambda m, x: torch.bmm(x, x), 1, [(4, 64, 64), (6, 128, 128), (8, 196, 196)]),
}


def _pinned_pass(label_of: Callable[[int], str]):
    """A solver pass whose k-th produced value (graph order) must be stored in label_of(k)."""

    class Pinned(passes.SolverTagMemoryMetaPass):
        def constrain(self, vproblem) -> None:
            problem = vproblem.problem
            nodes = list(vproblem.value_node.values())
            position = {node: i for i, node in enumerate(nodes[0].graph.nodes)} if nodes else {}
            ranked = sorted(vproblem.value_node, key=lambda vid: position[vproblem.value_node[vid]])
            rank = {vid: k for k, vid in enumerate(ranked)}
            pinned = {v.id: label_of(rank[v.id]) for v in problem.values}
            for value in problem.values:
                if pinned[value.id] not in value.domain:
                    raise ProblemError(f"{value.id} cannot take {pinned[value.id]}", values=[value.id])
                if value.kind == "input":
                    value.fixed = pinned[value.id]
            for op in problem.ops:
                keep = [m for m in op.modes if all(pinned[r] == lab for r, lab in zip(op.results, m.results))]
                if not keep:
                    raise ProblemError(f"{op.id} has no mode with its results in {[pinned[r] for r in op.results]}",
                                       ops=[op.id])
                op.modes = keep

    return Pinned


def lower_pinned(module: nn.Module, inputs: tuple, label_of: Callable[[int], str]) -> tuple[bytes, int] | None:
    """The program with every value pinned, and its transition count; None if the registry forbids the pins."""
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.exir import to_edge_transform_and_lower

    exported = torch.export.export(module, inputs)
    with warnings.catch_warnings(record=True) as caught, passes.collect_reports() as reports, \
            passes._substituted_pass(_pinned_pass(label_of)):
        warnings.simplefilter("always")
        program = to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()]).to_executorch()
    if any(r.kind != "solver" for r in reports) or len(reports) != 1:
        return None  # a pin the registry refused: the pass fell back to stock
    del caught
    return program.buffer, len(reports[0].transitions)


@dataclass
class Probe:
    kind: str  # "op" or "transition"
    key: str  # op class, or "SRC->DST"
    shape: tuple[int, ...]
    programs: dict[str, str]  # role -> program name in the batch
    per_link: int  # ops (or transitions) per chain link


def _chain(op: str, shape: tuple[int, ...], n: int) -> tuple[nn.Module, tuple]:
    step, _, _ = PROBES[op]
    weight = torch.linalg.qr(torch.randn(shape[-1], shape[-1]))[0] if op == "linear" else None
    # Orthogonal matrices keep chained products bounded (no inf/NaN in the timed kernels).
    x = torch.linalg.qr(torch.randn(shape))[0] if op == "matmul" else torch.rand(shape)
    return _Chain(step, n, weight).eval(), (x,)


def calibrate(runtime=None, ops: list[str] | None = None, labels: list[str] | None = None, sizes: int = 3,
              short: int = 2, long: int = 10, rounds: int = 9, transitions: bool = True,
              log: Callable[[str], None] = print, command: str = "") -> vk_cost.VulkanProfile:
    """Measure op modes and transitions on the present device; returns the fitted profile."""
    logging.getLogger().setLevel(logging.WARNING)
    locate_runtime(runtime)
    ops = ops or list(PROBES)
    labels = labels or FLOAT_LABELS
    programs: dict[str, bytes] = {}
    inputs: dict[str, tuple] = {}
    probes: list[Probe] = []

    clones: dict[str, int] = {}

    def add(name: str, module: nn.Module, example: tuple, label_of) -> bool:
        lowered = lower_pinned(module, example, label_of)
        if lowered is None:
            return False
        programs[name], inputs[name] = lowered[0], example
        clones[name] = lowered[1]
        return True

    start = time.perf_counter()
    for op in ops:
        for shape in PROBES[op][2][:sizes]:
            for label in labels:
                names = {f"n{n}": f"{op}|{label}|{shape}|{n}" for n in (short, long)}
                ok = all(add(names[f"n{n}"], *_chain(op, shape, n), lambda k, lab=label: lab) for n in (short, long))
                if ok:
                    probes.append(Probe("op", f"{op}|{label}", shape, names, PROBES[op][1]))
        log(f"[calibrate] lowered {op} probes ({len(programs)} programs, {time.perf_counter() - start:.0f} s)")
    if transitions:
        for shape in SQUARE_4D[:sizes]:
            for a, b in itertools.combinations(labels, 2):
                if vk_cost.split_repr(a)[0] == vk_cost.split_repr(b)[0] == "BUFFER":
                    continue  # the runtime has no buffer-to-buffer layout clone (routed through a texture)
                name = f"alt|{a}|{b}|{shape}"
                if add(name, *_chain("unary", shape, long), lambda k, a=a, b=b: a if k % 2 == 0 else b) \
                        and clones[name] > 0:
                    uniform = {lab: f"unary|{lab}|{shape}|{long}" for lab in (a, b)}
                    if all(u in programs or add(u, *_chain("unary", shape, long), lambda k, lab=lab: lab)
                           for lab, u in uniform.items()):
                        probes.append(Probe("transition", f"{a}->{b}", shape,
                                            {"alt": name, "a": uniform[a], "b": uniform[b]}, 1))
        log(f"[calibrate] lowered transition probes ({len(programs)} programs, {time.perf_counter() - start:.0f} s)")
    results = execute(programs, inputs, runtime=runtime, warmup=2, rounds=rounds)
    failed = {n: r.error for n, r in results.items() if not r.executed or r.run_ms is None}
    log(f"[calibrate] ran {len(results) - len(failed)} programs on the device, {len(failed)} failed "
        f"({time.perf_counter() - start:.0f} s)")
    ms = {n: r.run_ms for n, r in results.items() if n not in failed}
    points: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for probe in probes:
        if any(p not in ms for p in probe.programs.values()):
            continue
        nbytes = float(np.prod(probe.shape) * 4)
        if probe.kind == "op":
            slope = (ms[probe.programs[f"n{long}"]] - ms[probe.programs[f"n{short}"]]) / (long - short)
            points.setdefault(("op", probe.key), []).append((nbytes, 1000.0 * slope / probe.per_link))
        else:
            # the same unary chain, with a clone per link (half A->B, half B->A); the
            # uniform chains price the unary ops, so the rest is the clones
            extra = ms[probe.programs["alt"]] - (ms[probe.programs["a"]] + ms[probe.programs["b"]]) / 2
            point = (nbytes, 1000.0 * extra / clones[probe.programs["alt"]])
            a, b = probe.key.split("->")
            for key in (f"{a}->{b}", f"{b}->{a}"):
                points.setdefault(("transition", key), []).append(point)
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
        version=2, name="measured", device=device_name(), measured=True,
        command=command,
        description="Measured on this device by layout-solver calibrate vulkan: op modes from chains of pinned ops "
                    "(slope between two chain lengths), transitions from alternating chains; each fitted as "
                    "overhead + rate per MiB over several sizes. Unmeasured pairs use the parametric fallback.",
        parameters=base.parameters, transitions=trans, op_modes=op_modes,
        notes=[f"{len(failed)} probe programs failed on the device"] + [f"{n}: {e}" for n, e in list(failed.items())[:5]],
    )


def _fit(points: list[tuple[float, float]]) -> vk_cost.Linear:
    """Non-negative overhead + rate per MiB through (bytes, microseconds) points."""
    a = np.array([[1.0, b / vk_cost.MIB] for b, _ in points])
    y = np.array([max(t, 0.0) for _, t in points])
    (overhead, rate), _ = nnls(a, y)
    return vk_cost.Linear(overhead_us=round(float(overhead), 3), us_per_mib=round(float(rate), 3), points=len(points))


def device_name() -> str:
    """The Vulkan device's name, as vulkaninfo reports it (or 'unknown')."""
    try:
        out = subprocess.run(["vulkaninfo", "--summary"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    names = [line.split("=", 1)[1].strip() for line in out.splitlines() if line.strip().startswith("deviceName")]
    return names[0] if names else "unknown"


def median_ms(values: list[float]) -> float:
    return statistics.median(values)
