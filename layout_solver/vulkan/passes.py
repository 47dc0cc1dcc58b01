"""The solver's TagMemoryMetaPass and a counting stock pass.

`SolverTagMemoryMetaPass` keeps the stock constructor, so `vulkan_preprocess`
can build it exactly as it builds the stock pass. Both passes record a
`layout_solver.lowering.pass_report.PassReport` (see `collecting_reports`), so a comparison
measures both sides with one cost model. The solver pass's post-condition is
`validate` (an independent reading of the runtime's rules); the scoped swap
of the stock pass lives in `layout_solver.vulkan.hooks`.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import operator
import time
import warnings
from collections import Counter

import torch
from executorch.backends.vulkan._passes.tag_memory_meta_pass import TagMemoryMetaPass
from executorch.exir.pass_base import PassResult

from cost_models import vulkan as vk_cost
from graph_io.vulkan import SlotUse, TransitionPlan, Written, insert_transitions, repr_label, set_reprs
from layout_solver._moved import moved_attributes
from layout_solver.core import robust
from layout_solver.core.evaluate import evaluate
from layout_solver.core.model import compiles_reused
from layout_solver.core.problem import ProblemError, Solution
from layout_solver.core.solve import DEFAULT_TIME_LIMIT, gc_paused
from layout_solver.lowering.joint_lowering import bound_to_joint_answer
from layout_solver.lowering.pass_report import PassReport, record, stage_clock
from layout_solver.lowering.solver_pass import SolverPass, lowering_solver, solver_report
from layout_solver.vulkan.pricing import (
    decision_pricings,
    is_clone,
    modelled,
    modelled_costs_by_node,
    priced_nodes,
    resolution,
    total,
    transition_record,
    unreliable,
)
from layout_solver.vulkan.problem_builder import build_problem, is_constant_tensor, op_class, priced_again
from layout_solver.vulkan.stock_tagging import packed_dims_tabulated, registry_answers_reused
from layout_solver.vulkan.validate import census, reprs_of, validate

log = logging.getLogger(__name__)


def _tensors_by_repr(graph_module: torch.fx.GraphModule) -> Counter:
    counts: Counter = Counter()
    for node in graph_module.graph.nodes:
        if node.target == operator.getitem or is_constant_tensor(node):
            continue  # getitem aliases a tensor already counted at its producer
        for one in reprs_of(node) or []:
            counts[repr_label(one)] += 1
    return counts


@dataclasses.dataclass
class GraphCopy:
    """A copy of a delegate graph to tag and price without touching the original: all the stock pass, the
    write-back and the pricing read of a module is its `graph`, so the module (its attributes, its generated
    code) is not copied."""

    graph: torch.fx.Graph


def _detached_copy(graph_module: torch.fx.GraphModule) -> GraphCopy:
    """A copy of the graph that can be tagged without touching the original (see `detach_specs`)."""
    detached = copy.deepcopy(graph_module.graph)  # the nodes, names kept; no module, no recompile
    detach_specs(detached)
    return GraphCopy(detached)


def detach_specs(graph: torch.fx.Graph) -> None:
    """Give a copied graph's nodes their own TensorSpec objects: fx copies each node's meta shallowly, and the
    Vulkan tagging writes representations onto the specs in meta["spec"], which the copy would share with the
    original (a tagging of the copy showed through in it). One copy per spec: nodes that share one in the
    original (the output node reads its producers' specs) share it in the copy, as a tagging of the original
    would see them."""
    copies: dict[int, object] = {}

    def copied(spec):
        return copies.setdefault(id(spec), copy.copy(spec))

    for node in graph.nodes:
        spec = node.meta.get("spec")
        if isinstance(spec, (list, tuple)):
            node.meta["spec"] = type(spec)(copied(s) for s in spec)
        elif spec is not None:
            node.meta["spec"] = copied(spec)


def _adopt(graph_module: torch.fx.GraphModule, tagged: GraphCopy) -> None:
    """Give `graph_module` the graph of `tagged`, a `_detached_copy` of it that a tagging was written onto: the same
    nodes by name (attributes the graph reads stay the module's own), tagged, with their clones (the graph itself
    carries stock's tagging by then, `_stock_prices`)."""
    graph_module.graph = tagged.graph  # fx's setter re-owns the graph and recompiles the module


def moved_onto(vproblem, graph: torch.fx.Graph):
    """`vproblem` with the nodes of `graph`, a copy of its own graph (the same node names), in place of its own."""
    by_name = {n.name: n for n in graph.nodes}
    return dataclasses.replace(
        vproblem,
        value_node={vid: by_name[n.name] for vid, n in vproblem.value_node.items()},
        op_node={oid: by_name[n.name] for oid, n in vproblem.op_node.items()},
    )


def _layout_key(solution: Solution) -> tuple:
    """A solution's labels and modes, as one hashable key: what a write-back depends on besides the problem."""
    return tuple(sorted(solution.labels.items())), tuple(sorted(solution.modes.items()))


class CountingTagMemoryMetaPass(TagMemoryMetaPass):
    """The stock pass, unchanged, plus a report of the clones it inserted."""

    cost_profile: vk_cost.VulkanProfile | None = None
    cost_profiles: dict[str, vk_cost.VulkanProfile] | None = None  # also priced by each of these

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        before = {n for n in graph_module.graph.nodes if is_clone(n)}
        start = time.perf_counter()
        result = super().call(graph_module)
        elapsed = time.perf_counter() - start
        clones = [n for n in graph_module.graph.nodes if is_clone(n) and n not in before]
        record(
            PassReport(
                "stock",
                pass_seconds=elapsed,
                transitions=[transition_record(c, self.cost_profile) for c in clones],
                tensors_by_repr=_tensors_by_repr(graph_module),
                **modelled(graph_module, self.cost_profile, self.cost_profiles),
            )
        )
        return result


class SolverTagMemoryMetaPass(SolverPass, TagMemoryMetaPass):
    """Chooses every tensor's representation by solving one global problem.

    With one profile (`cost_profile`), its optimum. With several (`cost_profiles`, the default: every
    profile the project ships or the user adds), the candidate layouts of `layout_solver.core.robust` are
    written onto an untagged copy of the graph, priced by every profile against stock's tagging of the graph
    itself, and taken back: the combined optimum is kept if no profile prices it dearer than stock's tagging; else the
    candidate (each profile's own optimum too) with the smallest worst ratio that no profile prices
    dearer; else stock's tagging.
    """

    time_limit: float = DEFAULT_TIME_LIMIT
    cost_profile: vk_cost.VulkanProfile | None = None  # prices the reports; alone, the objective too
    cost_profiles: dict[str, vk_cost.VulkanProfile] | None = None  # several: the robust objective
    service: str | None = None  # a layout-solver service URL; None: $LAYOUT_SOLVER_SERVICE or in-process
    _exported_program = None  # set by vulkan_preprocess's apply_passes before each call

    def constrain(self, vproblem) -> None:
        """Hook for subclasses (calibration pins representations); the solver adds no constraint."""

    # requires / call / ensures (SolverPass): the snapshot and the post-condition.
    def snapshot(self, graph_module) -> Counter:
        """The graph's tensors counted by kind, for the post-condition."""
        return census(graph_module)  # the post-condition's own count, before and after

    def check(self, graph_module, before: Counter) -> None:
        """`layout_solver.vulkan.validate` on a tagging this pass chose (not on stock's, where it kept that). The registry
        it asks again does its packed-dim arithmetic from the table the pass used (`packed_dims_tabulated`: stock's
        values, one per pair), half of the check's time otherwise."""
        if self.decision.get("label") is not None:  # stock's tagging is stock's, not ours to police
            with gc_paused(), packed_dims_tabulated():
                validate(graph_module, self.texture_limits, before)

    # The three phases: one problem per profile; its optimum, or the robust choice among several; written
    # back as the chosen profile's problem says (or stock's own tagging, where the robust choice keeps it).
    def build(self, graph_module):
        """One problem per profile (in `self.built`); the first is the report's."""
        self.built = {}
        first = None
        for label, profile in self.profiles.items():
            if first is None:  # built once; no profile changes what the registry allows, only the prices
                first = self.built[label] = build_problem(
                    graph_module, self.texture_limits, name="vulkan-delegate", profile=profile
                )
            else:
                self.built[label] = priced_again(first, profile)
        if type(self).constrain is not SolverTagMemoryMetaPass.constrain:
            for built in self.built.values():  # after the pricing: `priced_again` reads the unconstrained modes
                built.materialized()  # a problem of its own to constrain
                self.constrain(built)
                built.prices = None  # the problem's modes may no longer be the ones it was priced with
        return next(iter(self.built.values()))  # the report's problem size; the others are in `self.built`

    @staticmethod
    def _solved(built, solve) -> Solution:
        """`solve`'s optimum of one profile's problem (`self.built`'s), at its prices where no Problem was made of
        it."""
        return solve(built.problem) if built.problem is not None else solve(built.structure, built.prices)

    @staticmethod
    def _objective(built, solution: Solution) -> float:
        """What one profile's problem (`self.built`'s) prices `solution` at: `evaluate`'s objective."""
        if built.problem is not None:
            return evaluate(built.problem, solution.modes, solution.labels).objective
        return evaluate(built.structure, solution.modes, solution.labels, built.prices).objective

    def solve(self, built) -> Solution:
        """The one profile's optimum, or the robust choice among the profiles (`self.decision` says which)."""
        if len(self.built) == 1:
            label = self.decision["label"] = next(iter(self.built))
            solution = self._solved(self.built[label], self.solver)
            self._keep_stock_if_estimated_dearer(label, solution)
            return solution
        return self._robust_choice(self.graph_module, self.built, self.profiles, self.solver, self.decision)

    def _keep_stock_if_estimated_dearer(self, label: str, solution: Solution) -> None:
        """Keep stock's tagging where the profile's best estimate prices the optimum above stock's.

        The solver decides as if a label whose fit cannot explain its samples cost the class's dearest label
        (so it is never lured into it), and that price can make leaving stock's op in such a label look like
        a saving the samples do not show: permute_layernorm's solver bought 16 transitions to leave
        channels-packed layer_norms the estimate prices 0.7 ms below the layout it bought (lavapipe).
        """
        estimate = {name: v for name, v in decision_pricings({label: self.profiles[label]}).items() if v[1]}
        if bound_to_joint_answer() or not estimate:
            return
        (name,) = estimate
        stock = total(self._stock_prices(self.graph_module, estimate)[name])
        mine = total(self._priced_candidate(label, solution, estimate)[name])
        if mine > stock + robust.NOISE_US:
            self.decision["label"] = None
            self.decision["note"] = (
                f"kept stock's tagging: the profile's best estimate (a label its fits cannot explain priced by its "
                f"own samples) prices the optimum at {mine:,.0f} us, stock's at {stock:,.0f} us"
            )

    def write_back(self, graph_module, built, solution) -> None:
        """Tag the graph as the chosen profile's problem says, or with stock's own tagging: stock's was written onto
        the graph itself to be priced (`_stock_prices`); a candidate was priced on an untagged copy (`pristine`),
        where it is written again, for good, and adopted; where nothing was priced, it is written now."""
        label = self.decision["label"]
        if self.pristine is None:  # nothing priced: the graph is as the pass was given it
            if label is None:
                TagMemoryMetaPass.call(self, graph_module)  # stock's own tagging, as stock writes it
            else:
                self._write_back(graph_module, self.built[label], solution)
        elif label is not None:  # stock's tagging is on the graph; the untagged copy takes the candidate's
            self._write_back(self.pristine, self._on_pristine(label), solution)
            _adopt(graph_module, self.pristine)

    def is_valid_op_node(self, node) -> bool:
        """Stock's answer, asked once per node while the pass runs: stock's tagging asks it again at every step of
        every trace through a node's users (92,000 times on a MobileViT delegate of 900 nodes), and it depends on
        the node's target and metadata alone, which the tagging does not change (a clone it inserts is a new node).
        """
        known = getattr(self, "_valid_op_nodes", None)
        if known is None or not isinstance(node, torch.fx.Node):
            return super().is_valid_op_node(node)
        answer = known.get(node)
        if answer is None:
            answer = known[node] = super().is_valid_op_node(node)
        return answer

    def get_node_cached_repsets(self, op_node: torch.fx.Node):
        """Stock's answer, kept per node while the pass runs: stock's tagging asks for it at every step of every
        trace (136,000 times on the MobileViT delegate), and stock caches it on the node once and never changes it
        (its checks on the way cost more than the lookup)."""
        known = getattr(self, "_node_repsets", None)
        if known is None:
            return super().get_node_cached_repsets(op_node)
        answer = known.get(op_node)
        if answer is None:
            answer = known[op_node] = super().get_node_cached_repsets(op_node)
        return answer

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        # The pass makes tens of thousands of small objects (copies of the graph, problems, prices): with the
        # lowering's heap behind them, the cyclic collector's full sweeps were most of the pass's time on
        # some graphs (0.46 s of 0.84 s in one profile). Reference counting frees them all the same.
        self._valid_op_nodes: dict[torch.fx.Node, bool] = {}
        self._node_repsets: dict[torch.fx.Node, object] = {}
        self._op_prices: dict = {}  # `modelled_costs_by_node`'s, shared by the taggings this pass prices
        self._stock_nodes = None  # (graph, its `priced_nodes`) of stock's tagging, once priced
        with gc_paused(), compiles_reused(), packed_dims_tabulated():
            try:
                return self._call(graph_module)
            finally:
                # What the pass built is spent (the report has what it needs): released while the collector is
                # paused, reference counting frees it; kept, the collector's first sweep after the pause would
                # walk it (61,000 objects after a transformer block's delegate, 20-50 ms a delegate).
                self.built, self._pristine_problems, self.pristine, self.solver = {}, {}, None, None
                self._valid_op_nodes = self._node_repsets = self._op_prices = self._stock_nodes = None
                if getattr(self, "run", None) is not None:
                    self.run = dataclasses.replace(self.run, built=None)

    def _call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        start = stage_clock()
        clones_before = {n.name for n in graph_module.graph.nodes if is_clone(n)}  # names: the graph may be adopted
        self.graph_module = graph_module
        self.profiles = self.cost_profiles or {"profile": vk_cost.load_profile(self.cost_profile)}
        self.built = {}
        self.decision = {}
        self._pristine_problems = {}  # label -> its problem with the nodes of `pristine` (`_on_pristine`)
        self.pristine = None  # a copy of the graph as it was given, once stock's tagging is written onto the graph
        self.solver = lowering_solver(
            self.time_limit,
            self.service,
            self._exported_program,
            lambda: {
                vid for vid, node in next(iter(self.built.values())).value_node.items() if node.op == "placeholder"
            },
        )
        try:
            run = self.solve_graph(graph_module)
        except ProblemError as exc:
            # A graph the registry cannot describe: stock behaviour, said out loud.
            self.run = None
            warnings.warn(f"layout-solver: {exc}; using the stock TagMemoryMetaPass for this graph", stacklevel=2)
            if self.pristine is None:  # else stock's tagging is on the graph already (`_stock_prices`)
                super().call(graph_module)
            result = PassResult(graph_module, True)
            record(
                PassReport(
                    "stock-fallback",
                    pass_seconds=stage_clock() - start,
                    notes=[str(exc)],
                    tensors_by_repr=_tensors_by_repr(graph_module),
                    **modelled(graph_module, self.cost_profile, self.cost_profiles),
                )
            )
            return result
        kept_stock = self.decision.get("label") is None
        clones = [
            n
            for n in graph_module.graph.nodes
            if is_clone(n) and (n.meta.get("layout_solver_transition") or (kept_stock and n.name not in clones_before))
        ]
        report = self.report = solver_report(
            run,
            stage_clock() - start,
            transitions=[transition_record(c, self.cost_profile) for c in clones],
            tensors_by_repr=_tensors_by_repr(graph_module),
            kept_stock=kept_stock,
            **modelled(
                graph_module, self.cost_profile, self.cost_profiles, self._op_prices, self._unchanged(graph_module)
            ),
        )
        if "note" in self.decision:
            report.notes.append(self.decision["note"])
        if "choice" in self.decision:  # the robust objective: no single problem's objective, bound or gap
            report.objective = report.bound = report.gap = None
            report.notes.append(self.decision["choice"].describe())
            report.pricing = "every profile: " + ", ".join(self.profiles)
        record(report)
        return PassResult(graph_module, True)

    def _robust_choice(self, graph_module, problems, profiles, solve, decision) -> Solution:
        """Solve the candidates of `layout_solver.core.robust`, price each written layout and stock's with every
        profile, and record in `decision` which profile's problem writes the chosen one (label None: stock)."""
        pricings = decision_pricings(profiles)
        stock_nodes = self._stock_prices(graph_module, pricings)
        stock = {name: total(nodes) for name, nodes in stock_nodes.items()}
        candidates: dict[str, tuple[str, Solution]] = {}
        labels = list(problems)
        try:
            weights = [1.0 / (stock[label] + robust.NOISE_US) for label in labels]
            given = [problems[label].prices for label in labels]
            structure = problems[labels[0]].structure
            combined = robust.weighted_prices(
                [problems[label].structure for label in labels], weights, prices=None if None in given else given
            )
            # First: in a joint multi-method lowering this is the partition's share of the joint problem.
            candidates["every profile"] = (labels[0], solve(structure, combined))
        except ProblemError as exc:  # built differently under two profiles: their own optima only
            log.info("layout-solver: no combined candidate (%s)", exc)
        prices: dict[str, dict[str, float]] = {}
        margins: dict[str, dict[str, float]] = {}
        classes = {n.name: op_class(n) for n in self.pristine.graph.nodes if n.op == "call_function"}
        # each pricing's error on one op, and which of its prices it does not stand behind: once per delegate
        errors = {name: (resolution(p), unreliable(p, classes)) for name, (p, _) in pricings.items()}
        seen: dict[tuple, str] = {}
        refused: dict[str, dict[str, float]] = {}  # refused on its problems' prices alone: ratio by profile

        def price(names, screen: bool = False) -> None:
            written = []
            for name in names:
                label, solution = candidates[name]
                layout = _layout_key(solution)
                if layout in seen:  # the same layout as an earlier candidate has the same prices
                    continue
                seen[layout] = name
                if screen:  # a profile's own optimum: often dearer than stock's under another profile
                    objectives = {  # under its own profile, the solve's objective: `evaluate` of the same answer
                        other: solution.objective if other == label else self._objective(problems[other], solution)
                        for other in labels
                    }
                    if robust.dearer_than_stock(objectives, stock) is not None:
                        floor = 1.0 + robust.PRICE_AGREEMENT
                        refused[name] = {p: robust.ratio(v / floor, stock[p]) for p, v in objectives.items()}
                        continue  # not written and priced: `choose` would refuse it all the same
                written.append(name)
            for name in written:
                label, solution = candidates[name]
                nodes = self._priced_candidate(label, solution, pricings)
                prices[name] = {pricing: total(n) for pricing, n in nodes.items()}
                margins[name] = {
                    pricing: robust.uncertainty(stock_nodes[pricing], n, *errors[pricing], vk_cost.UNFIT_FACTOR - 1.0)
                    for pricing, n in nodes.items()
                }

        price(list(candidates))
        # The combined optimum is usually admissible; each profile's own optimum costs one more solve
        # apiece, so they are tried only when it is not (or there is none), unless the joint answer must be kept
        # (a value linked to another method's partition). A 32-layer Llama's prefill kept stock's tagging (192
        # transitions) in a joint lowering where the per-method one took the lavapipe optimum (129).
        if not candidates or (robust.choose(prices, stock, margins).chosen is None and not bound_to_joint_answer()):
            # ... and each only where the first solve's bound does not already rule it out (own_optimum_ruled_out)
            first = candidates.get("every profile")
            tried = [
                label
                for label in labels
                if first is None
                or not robust.own_optimum_ruled_out(
                    first[1].bound, len(labels), robust.ratio(prices["every profile"][label], stock[label])
                )
            ]
            for label in tried:
                candidates[f"{label} optimum"] = (label, self._solved(problems[label], solve))
            price([f"{label} optimum" for label in tried], screen=True)
        choice = robust.choose(prices, stock, margins)
        if refused:  # reported with the rest, at the ratios their problems' prices give (a floor of the written)
            choice = dataclasses.replace(choice, tried={**choice.tried, **refused})
        decision["choice"] = choice
        if choice.chosen is None:
            decision["label"] = None
            return next(iter(candidates.values()))[1]  # for the report: stock's own tagging is what is written
        label, solution = candidates[choice.chosen]
        decision["label"] = label
        return solution

    def _stock_prices(self, graph_module, pricings) -> dict[str, dict]:
        """Every pricing's (`decision_pricings`) prices of stock's own tagging, by node (`modelled_cost_by_node`).
        Written onto the graph itself, as stock's pass writes it (where stock's tagging is kept, most delegates,
        nothing is left to write); an untagged copy is kept first (`pristine`), for the candidates."""
        self.pristine = _detached_copy(graph_module)
        # The registry's answers for the graph's ops were read once by the build: stock's pass finds them in its own
        # cache instead of asking the registry again (what it constrains it still makes afresh).
        # The fresh ones it narrows for each op it tags are copies of those (`registry_answers_reused`).
        repsets = next(iter(self.built.values())).draft.repsets
        answers = {}
        for node in graph_module.graph.nodes:
            known = repsets.get(node.name)
            if known is not None and known.op_node is node:
                node.meta.setdefault("etvk_node_repsets", known)
                answers[node] = known
        with registry_answers_reused(answers, self.texture_limits):
            TagMemoryMetaPass.call(self, graph_module)
        self._stock_nodes = (graph_module.graph, priced_nodes(graph_module))
        return modelled_costs_by_node(graph_module, pricings, self._op_prices, self._stock_nodes[1])

    def _unchanged(self, graph_module) -> list | None:
        """Stock's tagging's `priced_nodes`, where the graph is still the one stock's tagging was priced on (stock's
        tagging kept: nothing written after it), for the report to price it again without reading it again."""
        if self._stock_nodes is None or self._stock_nodes[0] is not graph_module.graph:  # a candidate's, adopted
            return None
        return self._stock_nodes[1]

    def _on_pristine(self, label):
        """`label`'s problem with the nodes of the untagged copy (`pristine`) in place of the graph's."""
        moved = self._pristine_problems.get(label)
        if moved is None:
            moved = self._pristine_problems[label] = moved_onto(self.built[label], self.pristine.graph)
        return moved

    def _priced_candidate(self, label, solution, pricings) -> dict[str, dict]:
        """Every pricing's (`decision_pricings`) prices of `solution` written as `label`'s problem says, by node:
        written onto the untagged copy (`pristine`), priced, and taken back (`graph_io.vulkan.Written`), so each
        candidate needs no copy of its own (a copy was 10% of a MobileViT-v2 delegate's pass)."""
        written = Written(self.pristine.graph)
        self._write_back(self.pristine, self._on_pristine(label), solution, written)
        try:
            return modelled_costs_by_node(self.pristine, pricings, self._op_prices)
        finally:
            written.take_back()

    @staticmethod
    def _write_back(graph_module, vproblem, solution, written: Written | None = None) -> None:
        """Tag `graph_module` (a module or a `GraphCopy`) as `solution` says, `vproblem`'s nodes being its own;
        `written`, if given, records what changed (`Written.take_back`)."""
        labels = solution.labels
        node_labels: dict[torch.fx.Node, str | list[str]] = {}
        for op in vproblem.structure.ops:
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
        set_reprs(node_labels, written)
        ops = {op.id: op for op in vproblem.structure.ops}
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
        for clone in insert_transitions(graph_module, plans, written):
            clone.meta["layout_solver_transition"] = True


# Names that moved elsewhere, kept here one release (with a DeprecationWarning).
__getattr__ = moved_attributes(
    __name__,
    {
        "modelled_cost": "layout_solver.vulkan.pricing",
        "modelled_cost_by_op": "layout_solver.vulkan.pricing",
        "modelled_cost_by_node": "layout_solver.vulkan.pricing",
    },
)
