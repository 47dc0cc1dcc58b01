"""The solver's TOSA memory-format stage: assign every tensor a dim order, write back
only the transposes the answer needs.

Runs inside the Arm pass pipeline just before InsertConstShapesPass (see
`solver_layouts()`); the canonical-transpose pass after it gives each
remaining transpose its cheapest form.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from executorch.backends.arm._passes.arm_pass import ArmPass
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import PassResult

from layout_solver.arm.rules import build_problem, compose, inverse, label_order
from layout_solver.joint_lowering import (
    JointReports,
    current_partition,
    joint_preprocess,
    program_links,
    solve_partition,
)
from layout_solver.multimethod import SubproblemCache
from layout_solver.service.client import solve_problem
from layout_solver.solve import gc_paused

_PERMUTE = exir_ops.edge.aten.permute_copy.default


@dataclass
class TosaPassReport:
    objective: float
    bound: float
    gap: float
    solve_seconds: float
    pass_seconds: float
    transposes_written: int
    permutes_removed: int
    pinned_unknown: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    problem_ops: int = 0
    partition: str = field(default_factory=current_partition)  # "method#index" in a multi-method lowering


def _constant_placeholders(program) -> set[str]:
    """Names of placeholders that are parameters, buffers or lifted constants."""
    if program is None:
        return set()
    sig = program.graph_signature
    return set(sig.inputs_to_parameters) | set(sig.inputs_to_buffers) | set(sig.inputs_to_lifted_tensor_constants)


def _fake_empty(like: torch.Tensor, shape) -> torch.Tensor:
    mode = getattr(like, "fake_mode", None)
    with mode if mode is not None else contextlib.nullcontext():
        return torch.empty([int(d) for d in shape], dtype=like.dtype)


def _permuted_list(graph: torch.fx.Graph, arg, order, before: torch.fx.Node, pairs: bool = False):
    """A per-axis list argument in physical order (pairs: two entries per axis, as PAD's lo/hi);
    a CONST_SHAPE node gets a permuted copy."""
    def permute(values):
        if pairs:
            return [v for i in order for v in (values[2 * i], values[2 * i + 1])]
        return [values[i] for i in order]

    if isinstance(arg, torch.fx.Node):
        with graph.inserting_before(before):
            copy = graph.create_node("call_function", arg.target, (permute(arg.args[0]), *arg.args[1:]),
                                     dict(arg.kwargs))
        copy.meta = dict(arg.meta)
        return copy
    return permute(arg)


class SolverLayoutPass(ArmPass):
    _passes_required_after: ClassVar[set] = set()

    def __init__(self, reports: list, time_limit: float = 10.0, service: str | None = None):
        super().__init__()
        self.reports = reports
        self.time_limit = time_limit
        self.service = service

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        with gc_paused():
            start = time.perf_counter()
            program = _current_program.get()
            constants = _constant_placeholders(program)
            arm = build_problem(graph_module, constants=constants)
            t0 = time.perf_counter()
            solution = solve_partition(arm.problem, lambda p: solve_problem(p, self.time_limit, self.service),
                                       lambda: program_links(program, constants & set(arm.value_node)))
            solve_seconds = time.perf_counter() - t0
            written, removed = self._write_back(graph_module, arm, solution)
            graph_module.graph.lint()
            graph_module.recompile()
            self.reports.append(TosaPassReport(solution.objective, solution.bound, solution.gap, solve_seconds,
                                               time.perf_counter() - start, written, removed,
                                               arm.pinned_unknown, list(solution.notes), len(arm.problem.ops)))
        return PassResult(graph_module, True)

    @staticmethod
    def _write_back(graph_module, arm, solution) -> tuple[int, int]:
        graph = graph_module.graph
        order = {vid: label_order(label) for vid, label in solution.labels.items()}
        ops = {op.id: op for op in arm.problem.ops}
        physical: dict[str, torch.fx.Node] = {}
        transitions: dict[tuple[str, tuple[int, ...]], torch.fx.Node] = {}
        removed = []

        def holder(vid: str) -> torch.fx.Node:
            return physical.get(vid, arm.value_node[vid])

        def read_as(vid: str, want: tuple[int, ...], before: torch.fx.Node) -> torch.fx.Node:
            have = order[vid]
            if want == have:
                return holder(vid)
            key = (vid, want)
            if key not in transitions:
                src = holder(vid)
                logical = arm.value_node[vid].meta["val"]
                perm = list(compose(inverse(have), want))
                with graph.inserting_before(before):
                    node = graph.create_node("call_function", _PERMUTE, (src, perm))
                node.meta = {k: v for k, v in src.meta.items() if k not in ("val", "tensor_meta")}
                node.meta["val"] = _fake_empty(logical, [logical.shape[i] for i in want])
                transitions[key] = node
            return transitions[key]

        for node in list(graph.nodes):
            if node.op == "output":
                for arg in node.all_input_nodes:
                    if arg.name in order:
                        want = tuple(range(len(order[arg.name])))
                        node.replace_input_with(arg, read_as(arg.name, want, node))
                continue
            op = ops.get(node.name)
            if op is None:
                continue
            mode = next(m for m in op.modes if m.name == solution.modes[op.id])
            kind = arm.op_kind[op.id]
            if kind == "permute" and mode.name != "identity":
                # Free: the output's physical tensor is the input's, re-labelled.
                src = op.operands[0]
                want = label_order(mode.operands[0])
                physical[node.name] = read_as(src, want, node)
                removed.append(node)
                continue
            for vid, label in dict(zip(op.operands, mode.operands)).items():
                new = read_as(vid, label_order(label), node)
                if new is not arm.value_node[vid]:
                    node.replace_input_with(arm.value_node[vid], new)
            mine = order[node.name]
            if mine != tuple(range(len(mine))):
                val = node.meta["val"]
                if kind == "reduction":
                    dims = node.args[1] if isinstance(node.args[1], (list, tuple)) else [node.args[1]]
                    remapped = [mine.index(d % len(mine)) for d in dims]
                    node.args = (node.args[0], remapped, *node.args[2:])
                elif kind == "reorder" and "PAD" in str(node.target):  # PAD(input, [lo, hi] per axis)
                    node.args = (node.args[0], _permuted_list(graph, node.args[1], mine, node, pairs=True),
                                 *node.args[2:])
                elif kind == "reorder":  # SLICE(input, start, size): per-axis lists follow the order
                    node.args = (node.args[0], *(_permuted_list(graph, a, mine, node) for a in node.args[1:3]),
                                 *node.args[3:])
                elif kind == "view":  # a pure reshape of the physical tensor
                    node.args = (node.args[0], [int(val.shape[i]) for i in mine], *node.args[2:])
                elif kind == "concat":  # cat(tensors, dim)
                    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
                    node.args = (node.args[0], mine.index(dim % len(mine)), *node.args[2:])
                node.meta["val"] = _fake_empty(val, [val.shape[i] for i in mine])
        for node in removed:
            node.replace_all_uses_with(physical[node.name])
            graph.erase_node(node)
        return len(transitions), len(removed)


@contextlib.contextmanager
def solver_layouts(time_limit: float = 10.0, replace_stock: bool = True, service: str | None = None,
                   method_weights: dict[str, float] | None = None, constant_byte_cost: float = 0.0,
                   cache_dir: str | Path | None = None) -> Iterator[JointReports]:
    """Inside this block, Ethos-U lowering lays tensors out with the solver.

    `service`: URL of a `layout-solver serve` instance to solve on (default
    $LAYOUT_SOLVER_SERVICE; unset: in-process); on any failure the problem is
    solved in-process and the report's notes say so.

    The stock permute-propagation heuristics are skipped (replace_stock), the
    solver pass and then the canonical-transpose pass run just before
    InsertConstShapesPass through the public pass-insertion registry;
    everything after (ExirToTosaPass, Vela) is unchanged. All of it is
    restored on every exit. Yields one TosaPassReport per delegate.

    `method_weights` ({"decode": 128, "prefill": 1}) makes a multi-method
    lowering one joint problem over all partitions of all methods (see
    `layout_solver.joint_lowering`): parameters and constants with equal bytes
    are linked (one home order), identical partitions are solved once (with
    `cache_dir`, across runs too); the reports' `.joint` says how it went.
    `constant_byte_cost` prices an extra stored order of a linked constant per
    byte. It defaults to 0 because on Ethos-U it is never paid: each delegate's
    Vela command stream carries its own (re-encoded) weights, so stock already
    stores one copy per delegate and a per-method layout adds none. Set it if
    your deployment shares weights across delegates. Single-method programs
    are lowered exactly as without it.
    """
    from executorch.backends.arm._passes.insert_const_shapes import InsertConstShapesPass
    from executorch.backends.arm.ethosu import EthosUBackend

    from layout_solver.arm.canonical import CanonicalTransposePass
    from layout_solver.arm.measure import inserted_passes

    reports = JointReports()
    with contextlib.ExitStack() as stack:
        if method_weights:
            stack.enter_context(joint_preprocess(
                EthosUBackend, method_weights, lambda p: solve_problem(p, time_limit, service), reports,
                constant_byte_cost, SubproblemCache(cache_dir)))
        stack.enter_context(skipping_stock_propagation(REPLACED_STOCK_PASSES if replace_stock else ()))
        stack.enter_context(inserted_passes(before={InsertConstShapesPass: [SolverLayoutPass(reports, time_limit, service),
                                                                            CanonicalTransposePass()]}))
        yield reports


# Stock heuristics the solver replaces: they push permutes through views and
# merge them without a cost model (on a ViT, into 10-op rank-5 transposes).
REPLACED_STOCK_PASSES = ("PropagateViewCopyPermuteDownPass", "PropagateViewCopyPermuteUpPass")


# The exported program the Arm pipeline is transforming, so the solver pass can
# tell parameters and constants (whose transposes fold) from real inputs.
_current_program: contextvars.ContextVar = contextvars.ContextVar("layout_solver_arm_program", default=None)


@contextlib.contextmanager
def skipping_stock_propagation(names=REPLACED_STOCK_PASSES) -> Iterator[None]:
    """Scoped substitution of ArmPassManager (tosa/backend.py imports the name lazily) by a
    subclass that skips the replaced stock passes (none if `names` is empty) and exposes the
    exported program to the solver pass; restored on every exit."""
    import executorch.backends.arm._passes as arm_passes

    skipped = tuple(getattr(arm_passes, n) for n in names)
    original = arm_passes.ArmPassManager

    class SolverArmPassManager(original):
        def configure_skip_passes(self):
            # The user's own skip rules (from the compile spec) stay in force.
            self._skip_pass_types = tuple(set(super().configure_skip_passes()) | set(skipped))
            return self._skip_pass_types

        def transform_to_backend_pipeline(self, exported_program, graph_module):
            token = _current_program.set(exported_program)
            try:
                return super().transform_to_backend_pipeline(exported_program, graph_module)
            finally:
                _current_program.reset(token)

    arm_passes.ArmPassManager = SolverArmPassManager
    try:
        yield
    finally:
        arm_passes.ArmPassManager = original
