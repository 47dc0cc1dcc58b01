"""The solver's TagMemoryMetaPass, a counting stock pass, and the validator.

`SolverTagMemoryMetaPass` keeps the stock constructor, so `vulkan_preprocess`
can build it exactly as it builds the stock pass. Both passes append a
`PassReport` to the reports being collected (see `collect_reports`), so a
comparison measures both sides with one cost model.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import operator
import time
import warnings
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from executorch.backends.vulkan import utils
from executorch.backends.vulkan._passes.tag_memory_meta_pass import TagMemoryMetaPass
from executorch.backends.vulkan.op_registry import has_impl
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import PassResult

from cost_models import vulkan as vk_cost
from graph_io.vulkan import SlotUse, TransitionPlan, insert_transitions, set_reprs
from layout_solver.joint_lowering import (
    JointReports,
    current_partition,
    joint_preprocess,
    program_links,
    solve_partition,
)
from layout_solver.multimethod import SubproblemCache
from layout_solver.problem import ProblemError
from layout_solver.service.client import solve_problem
from layout_solver.solve import gc_paused
from layout_solver.vulkan.rules import build_problem, contraction, is_constant_tensor, op_class, repr_label
from layout_solver.vulkan.validate import census, reprs_of, validate

log = logging.getLogger(__name__)


@dataclass
class PassReport:
    """What one tagging pass did to one delegate: its transitions, tensors per representation, timings and
    (solver) objective, bound, gap and notes; `modelled_us` prices the tagged graph with the profile."""

    kind: str  # "stock", "solver", or "stock-fallback"
    transitions: list[dict] = field(default_factory=list)  # value, src, dst, bytes, cost
    tensors_by_repr: Counter = field(default_factory=Counter)
    pass_seconds: float = 0.0
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    notes: list[str] = field(default_factory=list)
    phase_seconds: dict[str, float] = field(default_factory=dict)
    problem_ops: int = 0
    modelled_us: float = 0.0  # modelled_cost() of the tagged graph
    partition: str = field(default_factory=current_partition)  # "method#index" in a multi-method lowering

    @property
    def transition_cost(self) -> float:
        return sum(t["cost"] for t in self.transitions)


_reports: contextvars.ContextVar[list[PassReport] | None] = contextvars.ContextVar("layout_solver_reports", default=None)


@contextlib.contextmanager
def collect_reports() -> Iterator[list[PassReport]]:
    """Collect the PassReports of every tagging pass run inside the block (one per delegate)."""
    with _collecting_into([]) as reports:
        yield reports


@contextlib.contextmanager
def _collecting_into(reports: list) -> Iterator[list[PassReport]]:
    token = _reports.set(reports)
    try:
        yield reports
    finally:
        _reports.reset(token)


def _record(report: PassReport) -> None:
    sink = _reports.get()
    if sink is not None:
        sink.append(report)


def _is_clone(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target == exir_ops.edge.aten.clone.default


def _tensors_by_repr(graph_module: torch.fx.GraphModule) -> Counter:
    counts: Counter = Counter()
    for node in graph_module.graph.nodes:
        if node.target == operator.getitem or is_constant_tensor(node):
            continue  # getitem aliases a tensor already counted at its producer
        for one in reprs_of(node) or []:
            counts[repr_label(one)] += 1
    return counts


def _transition_record(clone: torch.fx.Node, profile: vk_cost.VulkanProfile | None) -> dict:
    source = clone.args[0]
    src = utils.get_node_repr(source)
    src_label = repr_label(src) if isinstance(src, utils.TensorRepr) else repr_label(src.vals[0])
    dst_label = repr_label(utils.get_node_repr(clone))
    val = clone.meta["val"]
    shape, dtype = [int(d) for d in val.shape], str(val.dtype).removeprefix("torch.")
    return {"value": source.name, "src": src_label, "dst": dst_label, "bytes": vk_cost.tensor_bytes(shape, dtype),
            "cost": vk_cost.transition_cost(shape, dtype, src_label, dst_label, profile)}


def modelled_cost(graph_module: torch.fx.GraphModule, profile: vk_cost.VulkanProfile | None) -> float:
    """The profile's price of a tagged graph: every op in its representation, every transition.

    Both sides of a comparison are priced by this one function, so their
    difference is the model's prediction of the change in run time.
    """
    total = 0.0
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or not has_impl(node.target) or node.target == operator.getitem:
            continue
        if is_constant_tensor(node) or not utils.is_tensor_node(node):
            continue
        if _is_clone(node):
            total += _transition_record(node, profile)["cost"]
            continue
        first = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
        first_reprs = reprs_of(first) if first is not None else None
        reads = repr_label(first_reprs[0]) if first_reprs else None
        for r, val in zip(reprs_of(node) or [], node.meta["val"] if isinstance(node.meta["val"], (list, tuple))
                          else [node.meta["val"]]):
            shape, dtype = [int(d) for d in val.shape], str(val.dtype).removeprefix("torch.")
            total += vk_cost.op_mode_cost(op_class(node), shape, dtype, repr_label(r), profile, contraction(node),
                                          reads)
    return total


class CountingTagMemoryMetaPass(TagMemoryMetaPass):
    """The stock pass, unchanged, plus a report of the clones it inserted."""

    cost_profile: vk_cost.VulkanProfile | None = None

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        before = {n for n in graph_module.graph.nodes if _is_clone(n)}
        start = time.perf_counter()
        result = super().call(graph_module)
        elapsed = time.perf_counter() - start
        clones = [n for n in graph_module.graph.nodes if _is_clone(n) and n not in before]
        _record(PassReport("stock", [_transition_record(c, self.cost_profile) for c in clones],
                           _tensors_by_repr(graph_module), elapsed,
                           modelled_us=modelled_cost(graph_module, self.cost_profile)))
        return result


class SolverTagMemoryMetaPass(TagMemoryMetaPass):
    """Chooses every tensor's representation by solving one global problem."""

    time_limit: float = 10.0
    cost_profile: vk_cost.VulkanProfile | None = None  # None: the default profile
    service: str | None = None  # a layout-solver service URL; None: $LAYOUT_SOLVER_SERVICE or in-process
    _exported_program = None  # set by vulkan_preprocess's apply_passes before each call

    def constrain(self, vproblem) -> None:
        """Hook for subclasses (calibration pins representations); the solver adds no constraint."""

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        with gc_paused():  # the lowering heap is large; cyclic GC rescans would dominate
            return self._call(graph_module)

    def _call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        start = time.perf_counter()
        before = census(graph_module)  # the post-condition's own count, before and after
        try:
            vproblem = build_problem(graph_module, self.texture_limits, name="vulkan-delegate",
                                     profile=self.cost_profile)
            self.constrain(vproblem)
        except ProblemError as exc:
            # A graph the registry cannot describe: stock behaviour, said out loud.
            warnings.warn(f"layout-solver: {exc}; using the stock TagMemoryMetaPass for this graph", stacklevel=2)
            result = super().call(graph_module)
            _record(PassReport("stock-fallback", [], _tensors_by_repr(graph_module), time.perf_counter() - start,
                               notes=[str(exc)], modelled_us=modelled_cost(graph_module, self.cost_profile)))
            return result
        t_built = time.perf_counter()
        solution = solve_partition(
            vproblem.problem, lambda p: solve_problem(p, self.time_limit, self.service),
            lambda: program_links(self._exported_program,
                                  {vid for vid, node in vproblem.value_node.items() if node.op == "placeholder"}))
        t_solved = time.perf_counter()
        self._write_back(graph_module, vproblem, solution)
        t_written = time.perf_counter()
        validate(graph_module, self.texture_limits, before)
        end = time.perf_counter()
        clones = [n for n in graph_module.graph.nodes if _is_clone(n) and n.meta.get("layout_solver_transition")]
        phases = {"build": t_built - start, "solve": t_solved - t_built, "write_back": t_written - t_solved,
                  "validate": end - t_written}
        _record(PassReport("solver", [_transition_record(c, self.cost_profile) for c in clones],
                           _tensors_by_repr(graph_module), end - start, solution.objective, solution.bound, solution.gap,
                           list(solution.notes), phases, len(vproblem.problem.ops),
                           modelled_cost(graph_module, self.cost_profile)))
        return PassResult(graph_module, True)

    @staticmethod
    def _write_back(graph_module, vproblem, solution) -> None:
        labels = solution.labels
        node_labels: dict[torch.fx.Node, str | list[str]] = {}
        for op in vproblem.problem.ops:
            node = vproblem.op_node[op.id]
            if op.id in vproblem.multi_output_ops:
                node_labels[node] = [labels[r] for r in op.results]
                for r in op.results:
                    holder = vproblem.value_node[r]
                    if holder is not node:
                        node_labels[holder] = labels[r]
            else:
                node_labels[node] = labels[op.results[0]]
        for vid, node in vproblem.value_node.items():
            if node not in node_labels and vid in labels:
                node_labels[node] = labels[vid]  # graph inputs and ops without an implementation
        set_reprs(node_labels)
        ops = {op.id: op for op in vproblem.problem.ops}
        plans = []
        for t in solution.transitions:
            uses = []
            for consumer in t.consumers:
                op = ops[consumer]
                mode = next(m for m in op.modes if m.name == solution.modes[consumer])
                for vid, want, slot in zip(op.operands, mode.operands, vproblem.op_slots[consumer]):
                    if vid == t.value and want == t.dst:
                        uses.append(SlotUse(vproblem.op_node[consumer], slot.arg, slot.item))
            via = tuple(vproblem.routes.get((t.value, t.src, t.dst), [t.dst])[:-1])
            plans.append(TransitionPlan(vproblem.value_node[t.value], t.dst, uses, via))
        for clone in insert_transitions(graph_module, plans):
            clone.meta["layout_solver_transition"] = True


@contextlib.contextmanager
def _substituted_pass(cls) -> Iterator[None]:
    """Scoped swap of the name vulkan_preprocess looks up at call time; restored on every exit."""
    from executorch.backends.vulkan import vulkan_preprocess

    original = vulkan_preprocess.TagMemoryMetaPass
    vulkan_preprocess.TagMemoryMetaPass = cls
    try:
        yield
    finally:
        vulkan_preprocess.TagMemoryMetaPass = original


@contextlib.contextmanager
def solver_layouts(time_limit: float = 10.0, cost_profile: str | Path | vk_cost.VulkanProfile | None = None,
                   service: str | None = None, method_weights: dict[str, float] | None = None,
                   cache_dir: str | Path | None = None) -> Iterator[JointReports]:
    """Inside this block, Vulkan lowering uses the solver instead of TagMemoryMetaPass.

    `cost_profile` prices transitions and op modes: a built-in name ("mobile-gpu",
    the default; "lavapipe"), a profile file written by `layout-solver calibrate
    vulkan`, or a VulkanProfile. `service`: URL of a `layout-solver serve`
    instance to solve on (default $LAYOUT_SOLVER_SERVICE; unset: in-process); on
    any failure the problem is solved in-process and the report's notes say so.

    `method_weights` ({"decode": 128, "prefill": 1}: how often each method runs
    per use of the program) makes a multi-method lowering one joint problem over
    every partition of every method (see `layout_solver.joint_lowering`);
    identical partitions are solved once, and with `cache_dir` across runs too.
    Single-method programs are lowered exactly as without it. Vulkan constants
    are prepacked from one content-hashed copy, so they add no links here.

    Yields the list that receives one PassReport per lowered delegate (its
    `partition` names the method); `.joint` holds one JointResult per
    multi-method lowering.
    """
    from executorch.backends.vulkan.vulkan_preprocess import VulkanBackend

    profile = vk_cost.load_profile(cost_profile)
    pass_cls = type("SolverTagMemoryMetaPass", (SolverTagMemoryMetaPass,),
                    {"time_limit": time_limit, "cost_profile": profile, "service": service})
    reports = JointReports()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_collecting_into(reports))
        stack.enter_context(_substituted_pass(pass_cls))
        if method_weights:
            stack.enter_context(joint_preprocess(
                VulkanBackend, method_weights, lambda p: solve_problem(p, time_limit, service), reports,
                cache=SubproblemCache(cache_dir)))
        yield reports


@contextlib.contextmanager
def stock_layouts(cost_profile: str | Path | vk_cost.VulkanProfile | None = None) -> Iterator[list[PassReport]]:
    """The stock pass, with reports priced by `cost_profile` (for side-by-side measurements)."""
    pass_cls = type("CountingTagMemoryMetaPass", (CountingTagMemoryMetaPass,),
                    {"cost_profile": vk_cost.load_profile(cost_profile)})
    with collect_reports() as reports, _substituted_pass(pass_cls):
        yield reports
