"""`layout-solver calibrate vulkan`: measure a device's Vulkan cost profile.

What the solver trades against each other is (a) a transition, one clone
dispatch from one representation to another, and (b) running an op in one
representation rather than another. Both are measured here on the present
device, on real programs lowered by ExecuTorch and run by its Vulkan runtime,
one shader dispatch at a time: the runtime times every dispatch with a Vulkan
query pool and reports it in ETDump (`runtime.profile`), so nothing has to be
inferred from whole-program times:

* op modes: for each op class (`rules.OP_CLASSES`) and each representation the
  registry lets it take, a chain of ops with every tensor pinned to that
  representation; each op's time is the sum of its own dispatches (the
  runtime's staging copies are not the op's);
* transitions: a chain of unary ops pinned alternately to A and B, whose
  clones (one per link, both ways) are timed one by one.

Each sample is described by what the dispatch wrote (bytes, texture slices),
read from the runtime's own record of the tensor. Each (class, representation)
and (A, B) pair is fitted over several sizes as overhead + rate per MiB + rate
per slice (non-negative least squares) and written in the
`cost_models.vulkan.VulkanProfile` format with the device name and the command.
"""

from __future__ import annotations

import itertools
import logging
import statistics
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from multiprocessing import get_context

import torch
from torch import nn
from torch.nn import functional as F

from cost_models import vulkan as vk_cost
from layout_solver.core.problem import ProblemError
from layout_solver.lowering.pass_report import collecting_reports
from layout_solver.targets.vulkan.runtime import locate_runtime, profile
from layout_solver.vulkan import hooks, passes

FLOAT_LABELS = [f"{s}:TENSOR_{p}_PACKED" for s in ("TEXTURE_3D", "BUFFER") for p in ("WIDTH", "HEIGHT", "CHANNELS")]


class _Chain(nn.Module):
    """`n` links of `step(self, x)`; a link with weights reads its own (`self.weight` is link `self.link`'s),
    because a real model's layers do not share them: a weight read again is warm in a CPU device's caches."""

    def __init__(self, step: Callable, n: int, weight: Callable[[], torch.Tensor] | None = None):
        super().__init__()
        self.step, self.n, self.link = step, n, 0
        made = [weight() for _ in range(n)] if weight is not None else []
        self.weights = nn.ParameterList(made)
        self.biases = nn.ParameterList(torch.zeros(w.shape[0]) for w in made)
        # the way back for a widening weight (orthonormal columns: W.T W = I keeps values bounded)
        self.backs = nn.ParameterList(w.T.contiguous() for w in made if w.ndim == 2)

    @property
    def weight(self):
        return self.weights[self.link]

    @property
    def bias(self):
        return self.biases[self.link]

    @property
    def back(self):
        return self.backs[self.link]

    def forward(self, x):
        for k in range(self.n):
            self.link = k
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
    """How to measure one op class: `step` is one link of the chain, run on `shapes[:sizes]` and every
    `extra` shape; `operators` are the runtime's names of the ops whose dispatches are the class's."""

    step: Callable
    shapes: list[tuple[int, ...]]
    extra: list[tuple[int, ...]]
    operators: tuple[str, ...]
    contraction: bool = False  # priced per MFLOP too: each output element sums over the input's last dim


def _swap_view(m, x):
    # A reshape that is not the identity and not undone by the next link's (C and H trade places).
    return torch.sigmoid(x.reshape(x.shape[0], x.shape[2], x.shape[1], *x.shape[3:]))


def _select_then_restore(m, x):
    # select_copy drops the leading dim; unsqueeze gives it back so the chain can go on.
    return torch.sigmoid(x.select(0, 0)).unsqueeze(0)


PROBES: dict[str, ProbeSpec] = {
    "unary": ProbeSpec(lambda m, x: torch.sigmoid(x), SQUARE_4D, DEEP_4D + BATCHED_3D + MATRICES, ("aten.sigmoid",)),
    "binary": ProbeSpec(lambda m, x: x + x, SQUARE_4D, DEEP_4D + BATCHED_3D + MATRICES, ("aten.add",)),
    "divide": ProbeSpec(lambda m, x: x / x, SQUARE_4D, DEEP_4D + BATCHED_3D + MATRICES, ("aten.div",)),
    "permute": ProbeSpec(lambda m, x: x.transpose(-1, -2), SQUARE_4D, DEEP_4D + BATCHED_3D, ("aten.permute_copy",)),
    "view": ProbeSpec(_swap_view, SQUARE_4D, BATCHED_3D, ("aten.view_copy",)),
    "select": ProbeSpec(
        _select_then_restore,
        [(1, 32, 64, 64), (1, 64, 96, 96)],
        TOKENS_3D + [(1, 4, 49, 96), (1, 1, 3, 49, 64)],
        ("aten.select_copy",),
    ),
    "softmax": ProbeSpec(lambda m, x: torch.softmax(x, -1), TOKENS_3D, BATCHED_3D, ("aten._softmax",)),
    "layer_norm": ProbeSpec(
        lambda m, x: F.layer_norm(x, x.shape[-1:], m.weight, m.bias), TOKENS_3D, BATCHED_3D, ("aten.native_layer_norm",)
    ),
    # Up to 4x the width and back (an MLP's two products, K != N both ways), and one-row inputs (a
    # classifier head, a decode token) whose time is reading the weight.
    "linear": ProbeSpec(
        lambda m, x: F.linear(F.linear(x, m.weight), m.back),
        TOKENS_3D,
        BATCHED_3D + MATRICES + [(1, 1, 256), (1, 512)],
        ("aten.linear",),
        contraction=True,
    ),
    "matmul": ProbeSpec(
        lambda m, x: torch.bmm(x, x),
        [(4, 64, 64), (6, 128, 128), (8, 196, 196)],
        [(16, 16, 16), (12, 49, 49), (1, 256, 256)],
        ("aten.bmm", "aten.mm"),
        contraction=True,
    ),
}
STAGING = "nchw"  # the runtime's copies between its tensors and the caller's (nchw_to_image, buffer_to_nchw, ...)


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


def _chain(op: str, shape: tuple[int, ...], n: int) -> tuple[nn.Module, tuple]:
    spec = PROBES[op]
    weight = None
    if op == "linear":
        weight = lambda: torch.linalg.qr(torch.randn(4 * shape[-1], shape[-1]))[0]  # [4K, K], orthonormal columns
    elif op == "layer_norm":
        weight = lambda: torch.ones(shape[-1])
    # Orthogonal matrices keep chained products bounded (no inf/NaN in the timed kernels).
    x = torch.linalg.qr(torch.randn(shape))[0].contiguous() if op == "matmul" else torch.rand(shape)
    return _Chain(spec.step, n, weight).eval(), (x,)


@dataclass(frozen=True)
class Job:
    """One program to lower: a chain of `n` links of class `op` on `shape`, values pinned to `pattern`
    (cycled in graph order)."""

    name: str
    op: str
    shape: tuple[int, ...]
    n: int
    pattern: tuple[str, ...]


def _lower_job(job: Job) -> tuple[Job, bytes | None, tuple]:
    logging.disable(logging.WARNING)
    module, example = _chain(job.op, job.shape, job.n)
    lowered = lower_pinned(module, example, job.pattern)
    return job, (lowered[0] if lowered else None), example


@dataclass
class Probe:
    """One measurement: the program whose dispatches give it, and what it measures."""

    kind: str  # "op" or "transition"
    key: str  # "class|label", or the two representations "A<->B" (a chain of clones both ways)
    shape: tuple[int, ...]
    program: str


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
    links: int,
    transitions: bool,
    shapes: list[tuple[int, ...]] | None = None,
) -> tuple[list[Job], list[Probe]]:
    """Every program to lower, and the probes that read their dispatches; `shapes` replaces the built-in
    probe shapes (each op class takes those its chain can run on)."""
    jobs: dict[str, Job] = {}
    probes: list[Probe] = []

    def job(op, shape, pattern) -> str:
        name = f"{op}|{'/'.join(pattern)}|{shape}|{links}"
        jobs.setdefault(name, Job(name, op, shape, links, pattern))
        return name

    for op in ops:
        spec = PROBES[op]
        op_shapes = (
            [s for s in shapes if _probe_runs(op, s)] if shapes is not None else spec.shapes[:sizes] + spec.extra
        )
        for shape in op_shapes:
            for label in labels:
                probes.append(Probe("op", f"{op}|{label}", shape, job(op, shape, (label,))))
    if transitions:
        for shape in shapes if shapes is not None else SQUARE_4D[:sizes] + DEEP_4D + BATCHED_3D + MATRICES:
            for a, b in itertools.combinations(labels, 2):
                if vk_cost.split_repr(a)[0] == vk_cost.split_repr(b)[0] == "BUFFER":
                    continue  # the runtime has no buffer-to-buffer layout clone (routed through a texture)
                probes.append(Probe("transition", f"{a}<->{b}", shape, job("unary", shape, (a, b))))
    return list(jobs.values()), probes


_PACKED_NAMES = {0: "TENSOR_WIDTH_PACKED", 1: "TENSOR_HEIGHT_PACKED", 2: "TENSOR_CHANNELS_PACKED"}


def dispatch_label(tensor: tuple) -> str:
    """The representation label of a tensor as the runtime's dispatch record gives it (sizes, storage, dim)."""
    return f"{tensor[1]}:{_PACKED_NAMES[tensor[2]]}"


def _point(tensor: tuple, us: float, label: str, op: str = "", contraction: int = 0) -> tuple[float, ...]:
    """A sample for a dispatch that wrote `tensor` in `label`: bytes, texture slices, microseconds, then the
    rest of `cost_models.vulkan.dispatch_terms` (contraction, row and flat-slice terms) up to its last
    non-zero one."""
    terms = vk_cost.dispatch_terms(op or None, tensor[0], "float32", label, contraction)
    rest = [round(t, 4) for t in terms[2:]]
    while rest and not rest[-1]:
        rest.pop()
    return (*terms[:2], round(us, 2), *rest)


def read_probe(probe: Probe, dispatches: list) -> list[tuple[tuple[str, str], tuple[float, ...]]]:
    """The samples one probe's program gives: ((kind, key), point) per op of the class (its dispatches summed,
    staging copies left out) or per clone (keyed by its direction)."""
    by_node: dict[int, list] = {}
    for d in dispatches:
        if STAGING not in d.kernel:
            by_node.setdefault(d.node, []).append(d)
    found = []
    for node in by_node.values():
        operator, output = node[0].operator, node[0].tensors[-1] if node[0].tensors else None
        if output is None:
            continue
        us = sum(d.us for d in node)
        if probe.kind == "op":
            op, label = probe.key.split("|")
            spec = PROBES[op]
            if operator.rsplit(".", 1)[0] not in spec.operators or dispatch_label(output) != label:
                continue
            contraction = node[0].tensors[0][0][-1] if spec.contraction else 0
            found.append((("op", probe.key), _point(output, us, label, op, contraction)))
        elif operator == "aten.clone.default":
            src, dst = dispatch_label(node[0].tensors[0]), dispatch_label(output)
            if src != dst:
                # the dispatch runs over the texture side's extents (dst when both are textures)
                texture_side = dst if vk_cost.split_repr(dst)[0] == "TEXTURE_3D" else src
                found.append((("transition", f"{src}->{dst}"), _point(output, us, texture_side)))
    return found


def calibrate(
    runtime=None,
    ops: list[str] | None = None,
    labels: list[str] | None = None,
    sizes: int = 3,
    links: int = 4,
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
    measuring everything again. The same run re-times `extend`'s reference probes
    and brings the new points to its scale first (the device's speed moves
    between days by up to 2x on lavapipe: points of two days on one line would
    price the day, not the shape).
    """
    logging.getLogger().setLevel(logging.WARNING)
    locate_runtime(runtime)
    jobs, probes = plan(ops or list(PROBES), labels or FLOAT_LABELS, sizes, links, transitions, shapes)
    measured, lowered, failed = _measure(jobs, runtime, rounds, workers, log)
    points = _read(probes, measured)
    if extend is not None:
        try:
            factors = overall(reference_factors(extend, runtime, links, rounds, workers, log))
        except ProblemError as exc:  # a profile measured at other shapes: no probe to scale by
            log(f"[calibrate] new points kept at today's scale: {exc}")
            factors = {"*": 1.0}
        points = {key: [(*p[:2], round(p[2] / factors["*"], 2), *p[3:]) for p in pts] for key, pts in points.items()}
        return _extended(extend, points, lowered, len(jobs), failed, command, factors)
    op_modes: dict[str, dict[str, vk_cost.Linear]] = {}
    trans: dict[str, vk_cost.Linear] = {}
    for (kind, key), pts in sorted(points.items()):
        fit = vk_cost.fit_samples(pts)
        if kind == "op":
            op, label = key.split("|")
            op_modes.setdefault(op, {})[label] = fit
        else:
            trans[key] = fit
    base = vk_cost.load_profile("mobile-gpu")
    return vk_cost.VulkanProfile(
        version=3,
        name="measured",
        device=device_name(),
        measured=True,
        command=command,
        description="Measured on this device by layout-solver calibrate vulkan: every shader dispatch of chains of "
        "pinned ops (op modes) and of chains alternating between two representations (transitions, one clone "
        "per link) timed by the runtime's query pool; each fitted as overhead + rate per MiB + rate per "
        "texture slice (cost_models.vulkan.texture_slices) over several sizes. Unmeasured pairs use the "
        "parametric fallback.",
        parameters=base.parameters,
        transitions=trans,
        op_modes=op_modes,
        samples={f"{kind}:{key}": pts for (kind, key), pts in sorted(points.items())},
        notes=[
            (
                f"{lowered} of {len(jobs)} probe programs lowered (the rest the registry refuses), "
                f"{len(failed)} failed on the device"
            )
        ]
        + [f"{n}: {e[:300]}" for n, e in failed.items()],
    )


def _measure(
    jobs: list[Job], runtime, rounds: int, workers: int, log: Callable[[str], None], passes: int = 1
) -> tuple[list[dict[str, list]], int, dict[str, str]]:
    """Lower every job and profile the programs on the device `passes` times, each pass over every program
    in turn: (dispatches by program that ran, one dict per pass; programs lowered; programs that failed on the
    device with their errors)."""
    programs: dict[str, bytes] = {}
    inputs: dict[str, tuple] = {}
    start = time.perf_counter()
    # spawn: torch and executorch are not fork-safe once initialised
    with ProcessPoolExecutor(max_workers=workers, mp_context=get_context("spawn")) as pool:
        for k, (job, buffer, example) in enumerate(pool.map(_lower_job, jobs), 1):
            if buffer is not None:
                programs[job.name], inputs[job.name] = buffer, example
            if k % 25 == 0 or k == len(jobs):
                log(
                    f"[calibrate] lowered {k}/{len(jobs)} programs ({len(jobs) - k} to go, "
                    f"{time.perf_counter() - start:.0f} s)"
                )
    runs: list[dict[str, list]] = []
    failed: dict[str, str] = {}
    for _ in range(passes):
        profiled = profile({n: b for n, b in programs.items() if n not in failed}, inputs, runtime=runtime, runs=rounds)
        failed |= {n: r for n, r in profiled.items() if isinstance(r, str)}
        runs.append({n: r for n, r in profiled.items() if not isinstance(r, str)})
    runs = [{n: r for n, r in one.items() if n not in failed} for one in runs]
    log(
        f"[calibrate] profiled {len(programs) - len(failed)} programs on the device"
        f"{f' in {passes} passes' if passes > 1 else ''}, {len(failed)} failed ({time.perf_counter() - start:.0f} s)"
    )
    return runs, len(programs), failed


def _read(probes: list[Probe], passes: list[dict[str, list]]) -> dict[tuple[str, str], list[tuple[float, ...]]]:
    """Each probe's point from its program's dispatches, by (kind, key): one point per probe and key, the
    median of its ops (or clones, all of one shape) over every pass."""
    points: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    for probe in probes:
        same: dict[tuple[str, str], list[tuple[float, ...]]] = {}
        for profiled in passes:
            for key, point in read_probe(probe, profiled.get(probe.program, [])):
                same.setdefault(key, []).append(point)
        for key, pts in same.items():
            middle = sorted(pts, key=lambda p: p[2])[len(pts) // 2]
            points.setdefault(key, []).append(middle)
    return points


# Rescaling: a few probes re-timed on the day stand for the whole profile (a CPU driver's speed moves
# with the machine's load and clocks: lavapipe ran the same programs at 0.44-0.68 of a profile's times
# two days after it was measured, and at 1.9x a day later). Not by one factor: that day a program's
# linears in buffers ran 74 ms against 41 ms in stock's textures (the profile priced them 0.3 ms cheaper;
# the day before, the program ran 0.85x stock), so a class is re-timed in each storage
# it was measured in (width-packed where it was, at the class's smallest probe shape), plus the clone
# between width- and channels-packed textures.
#
# What is applied by default is one factor, the median over every probe ("*"), not each class's own: a
# class's ratio divides by the one sample the profile measured at that point, once, and that sample's moment
# then moves the whole class on every later day (binary ops in width-packed textures read 1.40-1.45 in five
# re-timings over two days, and 0.93 in one between them, while a CRNN's GRU additions ran 0.6x their
# class-rescaled price). Held against one device profile of the 20 zoo and outside models' programs
# (`benchmarks/vulkan/rescale_rules.py`), class factors priced the ops further from their device times than
# the one factor (median |log(price / time)| 0.314 against 0.235, the profile as measured 0.235) and predicted
# the programs' changes no better (median error 40% against 41%). `--by-class` applies the class
# factors.
#
# Each probe is re-timed in several passes over all of them, its time the median over the passes: one pass
# of the 21 reference programs takes about 7 s on lavapipe, and one pass's factor for a group moved by up to
# a factor 1.5 from the next pass's, seconds later (binary ops in textures 2.08, 1.56, 1.44, 1.37; divisions in
# textures 0.86 to 0.51), while a program profiled in one go carries whatever the machine did in its 2 s into
# the factor of every op of its class.
REFERENCE_PASSES = 7
REFERENCE_LAYOUT = "TENSOR_WIDTH_PACKED"
REFERENCE_TRANSITION = ("TEXTURE_3D:TENSOR_WIDTH_PACKED", "TEXTURE_3D:TENSOR_CHANNELS_PACKED")


def reference_plan(base: vk_cost.VulkanProfile, links: int = 4) -> tuple[list[Job], list[Probe]]:
    """The reference probes of a measured profile: the programs to lower and the probes that read them."""
    jobs: list[Job] = []
    probes: list[Probe] = []
    for op in sorted(set(base.op_modes) & set(PROBES)):
        for storage in ("TEXTURE_3D", "BUFFER"):
            labels = [lab for lab in base.op_modes[op] if lab.startswith(storage + ":")]
            if not labels:
                continue
            label = f"{storage}:{REFERENCE_LAYOUT}" if f"{storage}:{REFERENCE_LAYOUT}" in labels else min(labels)
            shape = PROBES[op].shapes[0]
            job = Job(f"{op}|{label}|{shape}|{links}", op, shape, links, (label,))
            jobs.append(job)
            probes.append(Probe("op", f"{op}|{label}", shape, job.name))
    a, b = REFERENCE_TRANSITION
    if f"{a}->{b}" in base.transitions or f"{b}->{a}" in base.transitions:
        shape = SQUARE_4D[0]
        job = Job(f"unary|{a}/{b}|{shape}|{links}", "unary", shape, links, (a, b))
        jobs.append(job)
        probes.append(Probe("transition", f"{a}<->{b}", shape, job.name))
    return jobs, probes


def _group(kind: str, key: str) -> tuple[str, ...]:
    # the factors that may price a sample key, most specific first: class in its storage, class
    if kind != "op":
        return ("transitions",)
    op, _, label = key.partition("|")
    return (f"{op}@{label.partition(':')[0]}", op)


def rescale_factors(
    base: vk_cost.VulkanProfile, points: dict[tuple[str, str], list[tuple[float, ...]]]
) -> dict[str, float]:
    """Today's time over the profile's for each op class in each storage ("linear@BUFFER") and each class
    ("linear"), and for clones ("transitions"), from the reference probes that matched one of the
    profile's samples (the same point but for its time: bytes written, texture slices, MFLOP, operand
    bytes, rows); "*" is the median over all matched probes, for what no probe measured."""
    ratios: dict[str, list[float]] = {}
    for (kind, key), pts in points.items():
        old = base.samples.get(f"{kind}:{key}", [])
        for p in pts:
            same = [o[2] for o in old if (*o[:2], *o[3:]) == (*p[:2], *p[3:]) and o[2] > 0]
            if not same and len(p) > 3:
                # A contraction or row reduction is its work terms (MFLOP, operand bytes, rows): the shipped
                # lavapipe profile recorded a texture's bytes as its padded extents (65536 for a [1, 64, 64]
                # linear output), the runtime now its sizes.
                same = [o[2] for o in old if (o[1], *o[3:]) == (p[1], *p[3:]) and o[2] > 0]
            if same:
                for group in _group(kind, key):
                    ratios.setdefault(group, []).append(p[2] / statistics.median(same))
    if not ratios:
        raise ProblemError(
            "no reference probe matched a sample of the profile (was it measured with the built-in probe shapes?)"
        )
    factors = {group: statistics.median(r) for group, r in ratios.items()}
    factors["*"] = statistics.median(
        x for group, r in ratios.items() if "@" in group or group == "transitions" for x in r
    )
    return factors


def overall(factors: dict[str, float]) -> dict[str, float]:
    """The one factor a rescale applies by default (see the comment on REFERENCE_PASSES)."""
    return {"*": factors["*"]}


def _shown(factors: dict[str, float]) -> str:
    """Rescale factors as notes and logs show them: "group factor, ..." sorted by group."""
    return ", ".join(f"{g} {f:.3f}" for g, f in sorted(factors.items()))


def _factor(factors: dict[str, float], kind: str, key: str) -> float:
    return next((factors[g] for g in _group(kind, key) if g in factors), factors["*"])


def _scaled(fit: vk_cost.Linear, factor: float) -> vk_cost.Linear:
    return fit.model_copy(
        update={
            name: round(getattr(fit, name) * factor, 4)
            for name in (
                "overhead_us",
                "us_per_mib",
                "us_per_slice",
                "us_per_mflop",
                "us_per_operand_mib",
                "us_per_krow",
            )
        }
    )


def rescaled(base: vk_cost.VulkanProfile, factors: dict[str, float], command: str = "") -> vk_cost.VulkanProfile:
    """`base` with every price of an op class multiplied by its factor in the label's storage (else the
    class's; transitions by "transitions"; the rest and the parametric fallback's microsecond parameters by
    "*"), its samples too, so that a later `--extend` fits old and new points on one scale."""
    samples = {
        key: [(*p[:2], round(p[2] * _factor(factors, *key.split(":", 1)), 2), *p[3:]) for p in pts]
        for key, pts in base.samples.items()
    }
    parameters = {
        name: param.model_copy(update={"value": param.value * factors["*"]})
        if name.endswith(("_us", "_per_mib"))
        else param
        for name, param in base.parameters.items()
    }
    shown = _shown(factors)
    return base.model_copy(
        update={
            "op_modes": {
                op: {lab: _scaled(fit, _factor(factors, "op", f"{op}|{lab}")) for lab, fit in table.items()}
                for op, table in base.op_modes.items()
            },
            "transitions": {
                key: _scaled(fit, factors.get("transitions", factors["*"])) for key, fit in base.transitions.items()
            },
            "samples": samples,
            "parameters": parameters,
            "command": f"{base.command}; then {command}" if command else base.command,
            "notes": [
                *base.notes,
                f"rescaled {time.strftime('%Y-%m-%d')} on {device_name()} by reference probes (today / profile): {shown}",
            ],
        }
    )


def rescale(base: vk_cost.VulkanProfile, command: str = "", by_class: bool = False, **timing) -> vk_cost.VulkanProfile:
    """Re-time `base`'s reference probes on the present device (`reference_factors`, which `timing` goes to)
    and return `base` rescaled to today's speed by one factor (choices as the profile's; predictions in
    today's microseconds), or with `by_class` by each class's factor in each storage (choices then see today's
    ratios between classes)."""
    factors = reference_factors(base, **timing)
    return rescaled(base, factors if by_class else overall(factors), command)


def reference_factors(
    base: vk_cost.VulkanProfile,
    runtime=None,
    links: int = 4,
    rounds: int = 9,
    workers: int = 2,
    log: Callable[[str], None] = print,
    passes: int = REFERENCE_PASSES,
) -> dict[str, float]:
    """`rescale_factors` from `base`'s reference probes re-timed on the present device, in `passes` passes
    over all of them."""
    logging.getLogger().setLevel(logging.WARNING)
    locate_runtime(runtime)
    jobs, probes = reference_plan(base, links)
    measured, _, failed = _measure(jobs, runtime, rounds, workers, log, passes=passes)
    if failed:
        log(f"[calibrate] {len(failed)} reference programs failed on the device: {', '.join(failed)}")
    factors = rescale_factors(base, _read(probes, measured))
    log("[calibrate] today / profile: " + _shown(factors))
    return factors


def _extended(
    base: vk_cost.VulkanProfile,
    new: dict[tuple[str, str], list[tuple[float, ...]]],
    lowered: int,
    planned: int,
    failed: dict[str, str],
    command: str,
    factors: dict[str, float],
) -> vk_cost.VulkanProfile:
    """`base` with the `new` points (already at its scale: divided by today's `factors`) added to its samples
    and every touched entry refitted."""
    samples = {key: [tuple(p) for p in pts] for key, pts in base.samples.items()}
    for (kind, key), pts in new.items():
        # A sample's arity says nothing of its age: its trailing zero terms are left off (`_point`).
        samples[f"{kind}:{key}"] = samples.get(f"{kind}:{key}", []) + list(pts)
    op_modes = {op: dict(table) for op, table in base.op_modes.items()}
    trans = dict(base.transitions)
    for kind, key in new:
        fit = vk_cost.fit_samples(samples[f"{kind}:{key}"])
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
                    f"{len(failed)} failed on the device; {len(new)} entries refitted; measured on "
                    f"{time.strftime('%Y-%m-%d')}, brought to this profile's scale by its reference probes (today / "
                    "profile: " + _shown(factors) + ")"
                ),
            ],
        }
    )


def device_name() -> str:
    """The first Vulkan device's name (the one the runtime takes), from the Vulkan loader itself (vulkaninfo is
    in vulkan-tools, which a machine with only the loader and a driver lacks), or 'unknown'."""
    import ctypes
    import ctypes.util

    try:
        vulkan = ctypes.CDLL(ctypes.util.find_library("vulkan") or "libvulkan.so.1")
    except OSError:
        return "unknown"

    class InstanceCreateInfo(ctypes.Structure):  # VkInstanceCreateInfo, no layers or extensions
        _fields_ = [
            ("sType", ctypes.c_int32),
            ("pNext", ctypes.c_void_p),
            ("flags", ctypes.c_uint32),
            ("pApplicationInfo", ctypes.c_void_p),
            ("enabledLayerCount", ctypes.c_uint32),
            ("ppEnabledLayerNames", ctypes.c_void_p),
            ("enabledExtensionCount", ctypes.c_uint32),
            ("ppEnabledExtensionNames", ctypes.c_void_p),
        ]

    instance = ctypes.c_void_p()
    if vulkan.vkCreateInstance(ctypes.byref(InstanceCreateInfo(sType=1)), None, ctypes.byref(instance)) != 0:
        return "unknown"
    try:
        count = ctypes.c_uint32(0)
        vulkan.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        if not count.value:
            return "unknown"
        devices = (ctypes.c_void_p * count.value)()
        vulkan.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), devices)
        # VkPhysicalDeviceProperties: four uint32s and the device type, then char deviceName[256]; the rest
        # (limits, sparse properties) fits in the 4 KiB given
        properties = ctypes.create_string_buffer(4096)
        vulkan.vkGetPhysicalDeviceProperties(ctypes.c_void_p(devices[0]), properties)
        return properties.raw[20:276].split(b"\0", 1)[0].decode(errors="replace") or "unknown"
    finally:
        vulkan.vkDestroyInstance(instance, None)
