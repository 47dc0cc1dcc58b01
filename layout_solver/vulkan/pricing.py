"""What the Vulkan passes price a tagged graph at, and how far to trust it: the modelled cost of a tagged graph
per op and per node (`modelled_cost_by_node`: the runtime's operator names, transitions as clone dispatches), a
profile's resolution and the labels it does not stand behind, and the pricings a change must be no dearer under.
Arm's counterpart is `layout_solver.arm.pricing`."""

from __future__ import annotations

import functools
import math
import operator
from collections import Counter

import torch
from executorch.backends.vulkan import utils
from executorch.backends.vulkan.op_registry import has_impl
from executorch.exir.dialects._ops import ops as exir_ops

from cost_models import vulkan as vk_cost
from graph_io.fx import dtype_name, graph_snapshot, shape_of
from graph_io.vulkan import repr_label
from layout_solver.lowering.pass_report import is_explaining
from layout_solver.vulkan.problem_builder import contraction, is_constant_tensor, op_class
from layout_solver.vulkan.validate import reprs_of


def is_clone(node: torch.fx.Node) -> bool:
    """Whether `node` is a clone: how the Vulkan delegate writes a transition."""
    return node.op == "call_function" and node.target == exir_ops.edge.aten.clone.default


def _transition_labels(clone: torch.fx.Node) -> tuple[str, str, str]:
    """The value a clone converts and the representations it converts between."""
    source = clone.args[0]
    src = utils.get_node_repr(source)
    src_label = repr_label(src) if isinstance(src, utils.TensorRepr) else repr_label(src.vals[0])
    return source.name, src_label, repr_label(utils.get_node_repr(clone))


def transition_record(clone: torch.fx.Node, profile: vk_cost.VulkanProfile | None) -> dict:
    """One transition as a pass report lists it: the clone's value, representations and modelled cost."""
    value, src_label, dst_label = _transition_labels(clone)
    val = clone.meta["val"]
    shape, dtype = shape_of(val), dtype_name(val)
    return {
        "value": value,
        "src": src_label,
        "dst": dst_label,
        "bytes": vk_cost.tensor_bytes(shape, dtype),
        "cost": vk_cost.transition_cost(shape, dtype, src_label, dst_label, profile),
    }


def modelled_cost(
    graph_module: torch.fx.GraphModule, profile: vk_cost.VulkanProfile | None, estimate: bool = False
) -> float:
    """The profile's price of a tagged graph: every op in its representation, every transition.

    Both sides of a comparison are priced by this one function, so their
    difference is the model's prediction of the change in run time. The solver
    decides by the prices its problem has (`estimate=False`: a label whose fit
    cannot explain its samples costs the class's dearest); reports and
    predictions take the best estimate (`estimate=True`: that label priced by
    its own samples, see `cost_models.vulkan.op_mode_cost`).
    """
    return sum(modelled_cost_by_op(graph_module, profile, estimate).values())


def modelled_cost_by_op(
    graph_module: torch.fx.GraphModule, profile: vk_cost.VulkanProfile | None, estimate: bool = False
) -> Counter:
    """`modelled_cost` split by operator name ("aten.clone.default" holds the transitions), the names the
    runtime's dispatch profile uses, so each op's price can be held against its measured time."""
    return _by_op(modelled_cost_by_node(graph_module, profile, estimate))


def _by_op(priced: dict[str, tuple[str, tuple[str, ...], float]]) -> Counter:
    total: Counter = Counter()
    for operator_name, _, price in priced.values():
        total[operator_name] += price
    return total


def modelled_cost_by_node(
    graph_module: torch.fx.GraphModule, profile: vk_cost.VulkanProfile | None, estimate: bool = False
) -> dict[str, tuple[str, tuple[str, ...], float]]:
    """`modelled_cost` per priced node: name -> (operator name, the representations it writes and reads,
    price). Two taggings of copies of one graph share their ops' names, so the ops a change moved can be
    told apart; a transition is keyed by what it converts and to what (each tagging names the clones it
    inserts in its own order)."""
    return modelled_costs_by_node(graph_module, {"": (profile, estimate)})[""]


def modelled_costs_by_node(
    graph_module: torch.fx.GraphModule,
    pricings: dict[str, tuple[vk_cost.VulkanProfile | None, bool]],
    op_prices: dict | None = None,
    nodes: list | None = None,
) -> dict[str, dict[str, tuple[str, tuple[str, ...], float]]]:
    """`modelled_cost_by_node` under each of `pricings` (name -> (profile, estimate), as `decision_pricings`
    gives them), reading the graph once: what each node writes and reads is the same under every pricing.

    `op_prices`, if given, keeps each op's price by (its name, what it writes and reads, profile, estimate) for
    the next call on a copy of the same graph (copies keep the ops' names, targets and metadata; a tagging adds
    only clones, priced apart): a pass prices stock's tagging and each candidate's, which share most ops.
    `nodes`, if given: `priced_nodes` of the graph as it is now, read by the caller before (the graph unchanged)."""
    priced: dict[str, dict[str, tuple[str, tuple[str, ...], float]]] = {name: {} for name in pricings}
    for key, name, labels, price in _priced_nodes(graph_module) if nodes is None else nodes:
        for pricing, (profile, estimate) in pricings.items():
            if op_prices is None or key.startswith(_TRANSITION_KEY):
                priced[pricing][key] = (name, labels, price(profile, estimate))
                continue
            memo = (key, labels, profile, estimate)
            cost = op_prices.get(memo)
            if cost is None:
                cost = op_prices[memo] = price(profile, estimate)
            priced[pricing][key] = (name, labels, cost)
    return priced


_TRANSITION_KEY = "transition of "


def priced_nodes(graph_module: torch.fx.GraphModule) -> list[tuple]:
    """What `modelled_costs_by_node` reads off a tagged graph, for several readings of the same graph."""
    return list(_priced_nodes(graph_module))


def _priced_nodes(graph_module: torch.fx.GraphModule):
    """Each priced node of a tagged graph: its key in `modelled_cost_by_node`, operator name, the representations
    it writes and reads, and its price as a function of (profile, estimate)."""
    keys: set[str] = set()
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or not has_impl(node.target) or node.target == operator.getitem:
            continue
        if is_constant_tensor(node) or not utils.is_tensor_node(node):
            continue
        name = _operator_name(node)
        writes = tuple(repr_label(r) for r in reprs_of(node) or [])
        if is_clone(node):
            key = _TRANSITION_KEY + "{} from {} to {}".format(*_transition_labels(node))  # priced per pricing
            while key in keys:  # the same conversion twice (one per consumer group): each is priced
                key += "'"
            keys.add(key)
            yield key, name, writes, functools.partial(_clone_price, node)
            continue
        first = node.args[0] if node.args and isinstance(node.args[0], torch.fx.Node) else None
        first_reprs = reprs_of(first) if first is not None else None
        reads = repr_label(first_reprs[0]) if first_reprs else None
        outputs = node.meta["val"] if isinstance(node.meta["val"], (list, tuple)) else [node.meta["val"]]
        written = list(zip(reprs_of(node) or [], outputs))
        keys.add(node.name)
        yield node.name, name, (*writes, "<-", reads or ""), functools.partial(_op_price, node, written, reads)


def _clone_price(clone: torch.fx.Node, profile, estimate: bool) -> float:
    return transition_record(clone, profile)["cost"]


def _op_price(node: torch.fx.Node, written: list, reads: str | None, profile, estimate: bool) -> float:
    cls, k = op_class(node), contraction(node)
    price = 0.0
    for r, val in vk_cost.priced_results(cls, profile or vk_cost.load_profile(), written):
        price += vk_cost.op_mode_cost(cls, shape_of(val), dtype_name(val), repr_label(r), profile, k, reads, estimate)
    return price


def total(priced: dict[str, tuple]) -> float:
    """The price of a tagging from its prices by node (`modelled_cost_by_node`)."""
    return sum(price for _, _, price in priced.values())


def resolution(profile: vk_cost.VulkanProfile) -> float:
    """How far a measured profile's price of one op can be off: the larger of its fits' median relative error
    on their own samples (`mode_resolution`) and, where measured, on the operators of whole programs
    (`program_error`); 0 for a profile of assumed numbers, which has nothing to be off from.

    The probes' own error understates it: the lavapipe fits miss their samples by a median 13%, the ops of
    20 programs by 26% (exp 0.235), and a catalog MobileViT's transformer stage moved into width-packed
    textures, priced 9% cheaper than stock's, ran 6% slower: its layer norms there, priced 89-301 us, ran
    2.5-3.1 ms (`benchmarks/results/vulkan_runtime.md`)."""
    if not profile.measured:
        return 0.0
    return max(vk_cost.mode_resolution(profile), math.expm1(profile.program_error))


def unreliable(profile: vk_cost.VulkanProfile, classes: dict[str, str | None]):
    """Whether a priced node (`modelled_cost_by_node`'s name and record) is written in a label whose fit
    `profile` does not stand behind (`unfit_op_modes`: it prices one of its own samples over UNFIT_FACTOR
    times too cheap). Its price may be that far off, so a saving resting on it is not resolved: a catalog
    MobileViT's default change moved layer norms out of channels-packed textures (priced as the class's dearest
    label) into width-packed ones priced at 89-301 us, which ran 2.5-3.1 ms, and the program ran 6% slower."""
    unfit = vk_cost.unfit_op_modes(profile) if profile.measured else frozenset()
    return lambda name, record: bool(record[1]) and (classes.get(name), record[1][0]) in unfit


def decision_pricings(profiles: dict[str, vk_cost.VulkanProfile]) -> dict[str, tuple[vk_cost.VulkanProfile, bool]]:
    """What a change from stock's tagging must be no dearer under: each profile's decision prices, and its
    best estimate where the two differ (a measured profile with labels its fits cannot explain)."""
    pricings = {label: (p, False) for label, p in profiles.items()}
    for label, p in profiles.items():
        if p.measured and vk_cost.unfit_op_modes(p):
            pricings[f"{label} (estimate)"] = (p, True)
    return pricings


def _operator_name(node: torch.fx.Node) -> str:
    # "aten::linear" / "et_vk::conv_with_clamp" + overload, written as the runtime writes it
    schema = node.target._schema
    return f"{schema.name.replace('::', '.')}.{schema.overload_name or 'default'}"


def modelled(
    graph_module: torch.fx.GraphModule,
    profile: vk_cost.VulkanProfile | None,
    profiles: dict[str, vk_cost.VulkanProfile] | None = None,
    op_prices: dict | None = None,
    nodes: list | None = None,
) -> dict:
    """A tagged graph's modelled cost (total and by operator) under `profile`, and its total under each of
    `profiles`; while explaining, the graph with its prices too (`graph_with_prices`). `op_prices`, `nodes`: as in
    `modelled_costs_by_node`."""
    report = object()  # the report profile's key, apart from every label in `profiles`
    pricings = {report: (profile, True), **{label: (p, True) for label, p in (profiles or {}).items()}}
    by_pricing = modelled_costs_by_node(graph_module, pricings, op_prices, nodes)
    priced = by_pricing.pop(report)
    by_op = _by_op(priced)
    by_profile = {label: sum(_by_op(nodes).values()) for label, nodes in by_pricing.items()}
    fields = {"modelled_us": sum(by_op.values()), "modelled_us_by_op": by_op, "modelled_us_by_profile": by_profile}
    if is_explaining():
        fields["graph"] = graph_with_prices(graph_module, profile, priced)
    return fields


def graph_with_prices(
    graph_module: torch.fx.GraphModule, profile: vk_cost.VulkanProfile | None, priced: dict[str, tuple]
) -> list[dict]:
    """The tagged graph as `graph_io.fx.graph_snapshot` records: each tensor's representation (storage and
    packing), clones marked as transitions, each op at its price in `priced` (`modelled_cost_by_node`, the best
    estimate, as `modelled` sums it), so a viewer's per-op prices add up to the report's `modelled_us`."""
    by_name = {name: record[2] for name, record in priced.items() if not name.startswith(_TRANSITION_KEY)}

    def cost_of(node):
        if is_clone(node):
            return transition_record(node, profile)["cost"]
        return by_name.get(node.name)

    def layout_of(node):
        reprs = reprs_of(node) if utils.is_tensor_node(node) else None
        return ", ".join(repr_label(r) for r in reprs) if reprs else ""

    return graph_snapshot(graph_module, layout_of, cost_of, is_clone, is_constant_tensor)
