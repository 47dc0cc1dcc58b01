"""The probe programs `layout-solver calibrate vulkan` measures, and how: each op class's chain (`PROBES`) lowered
by ExecuTorch with every tensor pinned to one representation (`lower_pinned`), run on the device by its Vulkan
runtime, every shader dispatch timed by the runtime's query pool (ETDump), and each dispatch read as a sample
described by what it wrote (`read_probe`). `calibrate` plans and fits them; `rescale` re-times a few."""

from __future__ import annotations

import logging
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
from layout_solver.targets.vulkan.runtime import profile
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
    """The samples one probe's program gives: ((kind, key), point) per op of the probe's class and label or per
    clone (keyed by its direction)."""
    wanted = ("op", probe.key) if probe.kind == "op" else None
    return [(key, point) for key, point in read_program(dispatches) if key == wanted or (not wanted and key[0] != "op")]


def read_program(dispatches: list) -> list[tuple[tuple[str, str], tuple[float, ...]]]:
    """The samples any program's dispatches give, as a probe's would: ((kind, key), point) per op of a class the
    probes measure (its dispatches summed, staging copies left out; keyed by class and output label) and per clone
    between two representations (keyed by its direction)."""
    classes = {name: op for op, spec in PROBES.items() for name in spec.operators}
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
        op = classes.get(operator.rsplit(".", 1)[0])
        if op is not None:
            label = dispatch_label(output)
            contraction = node[0].tensors[0][0][-1] if PROBES[op].contraction else 0
            found.append((("op", f"{op}|{label}"), _point(output, us, label, op, contraction)))
        elif operator == "aten.clone.default":
            src, dst = dispatch_label(node[0].tensors[0]), dispatch_label(output)
            if src != dst:
                # the dispatch runs over the texture side's extents (dst when both are textures)
                texture_side = dst if vk_cost.split_repr(dst)[0] == "TEXTURE_3D" else src
                found.append((("transition", f"{src}->{dst}"), _point(output, us, texture_side)))
    return found


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
