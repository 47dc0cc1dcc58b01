"""Vulkan edge graph -> layout problem, with constraints from executorch itself.

Every op's allowed representations come from the registry
(`get_op_features(target).make_op_repsets(node, texture_limits)`), which
already applies texture limits, PACKED_INT8 layouts and the op's sync rules;
this module only turns those repsets into modes:

* tensors that must agree (sync_args_repr, sync_outs_repr, and the primary
  input with the primary output under sync_primary_io_repr) form one group
  that picks one packed-dim configuration together;
* every other tensor slot picks its representation on its own;
* a mode's cost is the op-mode cost of its output storage.

Values are the non-constant tensors: op outputs (multi-output ops' results
are their getitem nodes), graph inputs, and outputs of ops without a Vulkan
implementation, which, as in the stock pass, take whatever their consumers
want. Prepacked constants have no storage and are not part of the problem.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import operator
from dataclasses import dataclass, field

import torch
from executorch.backends.vulkan import utils
from executorch.backends.vulkan.op_registry import get_op_features, has_impl
from executorch.exir.dialects._ops import ops as exir_ops

from cost_models import vulkan as vk_cost
from graph_io.fx import dtype_name
from graph_io.vulkan import label_repr
from layout_solver.core.problem import Prices, Problem, ProblemError
from layout_solver.vulkan.runtime_rules import RUNTIME_LABEL_RULES, RUNTIME_PAIR_RULES, storage_of

log = logging.getLogger(__name__)

# More modes than this for one op means many independent slots; keep each
# independent slot to its preferred representations instead of the product.
MAX_MODES_PER_OP = 4096


def repset_labels(repset: utils.TensorRepSet, dtype: str | None = None) -> list[str]:
    """Labels of a repset, textures first (the stock preference), then buffers.

    With a dtype, the PACKED_INT8_* layouts are kept only for 8-bit tensors: the
    registry lists them in its "any" sets for every dtype, the runtime packs
    only int8 data in them.
    """
    tex = sorted(repset.valid_texture_layouts, key=lambda lay: lay.value)
    buf = sorted(repset.valid_buffer_layouts, key=lambda lay: lay.value)
    if dtype is not None and dtype not in ("int8", "uint8"):
        buf = [lay for lay in buf if not lay.name.startswith("PACKED_INT8")]
    return [f"TEXTURE_3D:{lay.name}" for lay in tex] + [f"BUFFER:{lay.name}" for lay in buf]


# Op classes a device profile prices separately (`layout-solver calibrate vulkan` measures one representative of
# each in every representation it may take).
OP_CLASSES: dict[object, str] = {
    **{
        t: "unary"
        for t in (
            exir_ops.edge.aten.relu.default,
            exir_ops.edge.aten.gelu.default,
            exir_ops.edge.aten.sigmoid.default,
            exir_ops.edge.aten.hardswish.default,
            exir_ops.edge.aten.tanh.default,
            exir_ops.edge.aten.hardtanh.default,
            exir_ops.edge.aten.clamp.default,
            exir_ops.edge.aten.sqrt.default,
            exir_ops.edge.aten.rsqrt.default,
            exir_ops.edge.aten.exp.default,
            exir_ops.edge.aten.neg.default,
            exir_ops.edge.aten.abs.default,
        )
    },
    **{
        t: "binary"
        for t in (
            exir_ops.edge.aten.add.Tensor,
            exir_ops.edge.aten.sub.Tensor,
            exir_ops.edge.aten.mul.Tensor,
        )
    },
    # Measured on lavapipe (2026-11-28): a division written to a channels- or height-packed texture pays about
    # a millisecond per dispatch that add, mul and a width-packed or buffer division do not (16 chained divides
    # of a [1, 16, 8, 8] tensor: 1.1 ms each channels-packed, 0.08 ms width-packed, 0.05 ms for add), whatever
    # the divisor's shape; priced as "binary", MobileNetV3's hard-sigmoid divisions were 0.1 ms where they ran 1-2.5.
    exir_ops.edge.aten.div.Tensor: "divide",
    exir_ops.edge.aten.permute_copy.default: "permute",
    exir_ops.edge.aten.view_copy.default: "view",
    # squeeze / unsqueeze dispatch a copy like a view's (view_buffer, clone, permute_texture3d kernels,
    # measured per dispatch on lavapipe at a view's cost), so a view's price is theirs.
    exir_ops.edge.aten.squeeze_copy.dims: "view",
    exir_ops.edge.aten.unsqueeze_copy.default: "view",
    exir_ops.edge.aten.select_copy.int: "select",
    exir_ops.edge.aten._softmax.default: "softmax",
    exir_ops.edge.aten.native_layer_norm.default: "layer_norm",
    exir_ops.edge.aten.linear.default: "linear",
    exir_ops.edge.aten.bmm.default: "matmul",
    exir_ops.edge.aten.mm.default: "matmul",
}


def op_class(node: torch.fx.Node) -> str | None:
    """The cost class a device profile prices the node's op by (OP_CLASSES), or None."""
    return OP_CLASSES.get(node.target)


def contraction(node: torch.fx.Node) -> int:
    """Length of the sum behind each output element of a linear / matmul node (its input's last dim), else 0."""
    if OP_CLASSES.get(node.target) not in ("linear", "matmul"):
        return 0
    first = node.args[0]
    val = first.meta.get("val") if isinstance(first, torch.fx.Node) else None
    return int(val.shape[-1]) if val is not None and len(val.shape) else 0


# An op target's name, as str() gives it (an edge op's repr is dear, and a delegate repeats a few targets).
_target_name = functools.cache(str)


@functools.cache
def packed_dim_key(label: str) -> utils.PackedDimInfo:
    """The runtime's packed-dim description of a label (what two labels must share to alias)."""
    r = label_repr(label)
    return utils.PackedDimInfo.from_repr(r.memory_layout, r.storage_type)


@dataclass
class Slot:
    """Where an operand sits in its consumer: node.args[arg] (or node.args[arg][item] for lists)."""

    arg: int
    item: int | None = None


@dataclass
class VulkanProblem:
    """A delegate graph as a layout problem, with the maps the write-back needs back to the fx graph. `problem` is
    None where `priced_again` left it to `prices` (`materialized` makes it)."""

    problem: Problem | None
    value_node: dict[str, torch.fx.Node]  # value id -> fx node holding it
    op_node: dict[str, torch.fx.Node]
    op_slots: dict[str, list[Slot]]  # op id -> operand slots, aligned with Op.operands
    multi_output_ops: dict[str, list[str]] = field(default_factory=dict)  # op id -> result value ids
    # (value, src, dst) -> the representations of the clones that make it, where that is more than one
    routes: dict[tuple[str, str, str], list[str]] = field(default_factory=dict)
    draft: _Draft | None = field(default=None, repr=False)  # what `priced_again` re-prices
    prices: Prices | None = field(default=None, repr=False)  # its prices (those `problem` has, where there is one)

    @property
    def structure(self) -> Problem:
        """Its values, ops and modes (every profile's problem of one graph has the same): `problem`, or the problem
        its prices were checked for."""
        return self.problem if self.problem is not None else self.prices.structure

    def materialized(self) -> Problem:
        """Its problem as a Problem of its own, made from its prices the first time (`Problem.priced`)."""
        if self.problem is None:
            self.problem = self.prices.structure.priced(self.prices)
        return self.problem


def is_constant_tensor(node) -> bool:
    """Whether the node is a constant the Vulkan builder serializes as a TensorRef (prepacked, no layout)."""
    return isinstance(node, torch.fx.Node) and bool(node.meta.get("etvk_tensorref", False))


def storage_free_args(features, node: torch.fx.Node) -> set[int]:
    """Argument positions the op registers as NO_STORAGE: it prepacks them or never binds them.

    Read from the op's own registration (before OpRepSets widens NO_STORAGE to
    ANY_STORAGE_INCL_PACKED_INT8, which is also what an unconstrained *tensor*
    slot such as view_copy's input looks like afterwards: the two must not be
    confused, or the view's input escapes its storage rule).
    """
    inputs = features.inputs_storage
    if features.pick_io_storage_fn is not None:
        inputs = utils.TensorRepSetList(features.pick_io_storage_fn(node)[0])
    # Past the end of a per-argument list the registry answers set(): nothing registered.
    return {i for i in range(len(node.args)) if not isinstance(inputs[i], utils.TensorRepSet) or inputs[i].is_empty()}


def _tensor_value_node(node) -> bool:
    return isinstance(node, torch.fx.Node) and utils.is_tensor_node(node) and not is_constant_tensor(node)


@dataclass
class _Draft:
    """What build_problem gathers in its walk over the graph, before the transitions are priced: the values (in
    the order the graph first mentions them), the ops with their modes, and per value the labels its modes name,
    its producer may store it in, and its consumers may read it in."""

    texture_limits: object
    profile: vk_cost.VulkanProfile
    values: dict[str, dict] = field(default_factory=dict)
    value_node: dict[str, torch.fx.Node] = field(default_factory=dict)
    mentions: dict[str, list[str]] = field(default_factory=dict)  # value id -> labels any mode names for it
    produced: dict[str, set[str]] = field(default_factory=dict)  # value id -> labels its producer may store it in
    wanted: dict[str, set[str]] = field(default_factory=dict)  # value id -> labels its consumers may read it in
    ops: list[dict] = field(default_factory=list)
    op_node: dict[str, torch.fx.Node] = field(default_factory=dict)
    op_slots: dict[str, list[Slot]] = field(default_factory=dict)
    multi: dict[str, list[str]] = field(default_factory=dict)
    pricers: list = field(default_factory=list)  # per op (in `ops` order): profile -> its modes' prices
    # `_domains_and_transition_pairs`: the values with their domains, and the transition pairs to price
    final_values: list[dict] | None = None
    pairs: TransitionPairs | None = None
    # node name -> the registry's OpRepSets, unconstrained: what the stock pass caches as "etvk_node_repsets"
    repsets: dict[str, utils.OpRepSets] = field(default_factory=dict)

    def add_value(self, vid: str, node: torch.fx.Node, val, kind: str) -> None:
        """Register the tensor `val` (held by `node`) as value `vid`; ProblemError for a dynamic shape."""
        if any(not isinstance(d, int) for d in val.shape):
            raise ProblemError(
                f"node {node.name!r}: dynamic shape {tuple(val.shape)} is not supported", ops=[node.name]
            )
        shape = [int(d) for d in val.shape]
        dtype = dtype_name(val)
        self.values[vid] = {
            "id": vid,
            "shape": shape,
            "dtype": dtype,
            "size_bytes": vk_cost.tensor_bytes(shape, dtype),
            "kind": kind,
        }
        self.value_node[vid] = node

    def value_of(self, node: torch.fx.Node) -> str:
        """The value `node` produces, registered on first sight: a graph input, or the output of an op without
        a Vulkan implementation, is free, as in the stock pass (the first consumer decides)."""
        if node.name not in self.values:
            self.add_value(node.name, node, node.meta["val"], "input" if node.op == "placeholder" else "activation")
        return node.name


def build_problem(
    graph_module: torch.fx.GraphModule,
    texture_limits,
    name: str = "vulkan",
    profile: vk_cost.VulkanProfile | str | None = None,
) -> VulkanProblem:
    """The layout problem of a Vulkan edge graph, priced with `profile` (a VulkanProfile, a name or a path), in
    two phases: every op the delegate runs with its modes (`_add_op`), then every value's domain with the prices
    of its transitions (`_domains_and_transition_prices`).

    Raises ProblemError naming the node the registry cannot describe.
    """
    draft = _Draft(texture_limits, vk_cost.load_profile(profile))
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or not utils.is_tensor_node(node) or is_constant_tensor(node):
            continue
        if not has_impl(node.target):
            continue
        if node.target == operator.getitem:
            continue  # aliases a result of its source op, registered with that op
        _add_op(draft, node)
    final_values, costs, routes = _domains_and_transition_prices(draft)
    # One validation call over plain dicts (pydantic-core checks them faster than objects are built one by one); the
    # transitions, most of the objects, are checked on their own, as `with_costs` checks another profile's.
    problem = Problem.model_validate(
        {"name": name, "values": final_values, "ops": draft.ops, "default_cost_per_byte": 0.0}
    )
    problem.transition_costs = problem.checked_transitions(costs)
    prices = Prices(
        [[m["cost"] for m in op["modes"]] for op in draft.ops], costs, problem.default_cost_per_byte, problem
    )
    return VulkanProblem(problem, draft.value_node, draft.op_node, draft.op_slots, draft.multi, routes, draft, prices)


def priced_again(built: VulkanProblem, profile: vk_cost.VulkanProfile | str | None) -> VulkanProblem:
    """`built`'s problem priced with another profile: the same values, domains, ops and modes (no profile changes
    what the registry allows), each mode and transition priced as `build_problem` prices them under `profile`,
    and the transition routes that profile finds cheapest; the structure is not built or validated again, and
    no Problem is made of it (`prices` alone; `materialized` makes one)."""
    draft = dataclasses.replace(built.draft, profile=vk_cost.load_profile(profile))
    mode_costs = [pricer(draft.profile) for pricer in draft.pricers]
    _, costs, routes = _domains_and_transition_prices(draft)
    prices = built.structure.checked_prices(mode_costs, costs, like=built.prices)
    return dataclasses.replace(built, problem=None, routes=routes, draft=draft, prices=prices)


def _add_op(draft: _Draft, node: torch.fx.Node) -> None:
    """Op modes: `node`'s results and operands as values, and its modes (every combination of representations
    the registry allows, priced by the profile)."""
    try:
        features = get_op_features(node.target)
        repsets = features.make_op_repsets(node, draft.texture_limits)
        storage_free = storage_free_args(features, node)
    except Exception as exc:  # the registry could not describe this node
        raise ProblemError(
            f"node {node.name!r} ({node.target}): the Vulkan op registry cannot describe it: {exc}", ops=[node.name]
        ) from exc
    values = draft.values
    results, vals = _add_results(draft, node)
    operands, slots, slot_sets, slot_arg = _operand_slots(draft, node, repsets, storage_free)
    result_sets = [repset_labels(repsets.get_out_repset(k), values[r]["dtype"]) for k, r in enumerate(results)]
    label_rule = RUNTIME_LABEL_RULES.get(node.target)
    if label_rule is not None:
        result_sets = [
            [lab for lab in labels if label_rule(val, lab)]
            for labels, val in zip(result_sets, vals if isinstance(vals, (list, tuple)) else [vals])
        ]
        slot_sets = [
            [lab for lab in labels if label_rule(node.args[arg].meta["val"], lab)]
            for labels, arg in zip(slot_sets, slot_arg)
        ]
    pair_rule = RUNTIME_PAIR_RULES.get(node.target)
    if pair_rule is not None and len(slot_sets) == 1 and len(results) == 1:
        combos = [([a], [b]) for a, b in pair_rule(slot_sets[0], result_sets[0])]
        resolve = False  # priced point by point, as the pair rule's modes always were
    else:
        combos = _mode_labels(node, repsets, slot_sets, slot_arg, result_sets, results)
        resolve = True
    pricer = functools.partial(_mode_costs, combos, values, results, op_class(node), contraction(node), resolve)
    modes = [
        {"name": "|".join(ins + ["->"] + outs), "operands": ins, "results": outs, "cost": cost}
        for (ins, outs), cost in zip(combos, pricer(draft.profile))
    ]
    if not modes:
        raise ProblemError(f"node {node.name!r} ({node.target}): no legal representation", ops=[node.name])
    slot_labels = list(zip(*[m["operands"] + m["results"] for m in modes]))
    for vid, labels in zip(operands, slot_labels[: len(operands)]):
        draft.mentions.setdefault(vid, []).extend(labels)
        draft.wanted.setdefault(vid, set()).update(labels)
    for vid, labels in zip(results, slot_labels[len(operands) :]):
        draft.mentions.setdefault(vid, []).extend(labels)
        draft.produced.setdefault(vid, set()).update(labels)
    draft.ops.append({"id": node.name, "target": _target_name(node.target), "operands": operands, "results": results,
                      "modes": modes})  # fmt: skip
    draft.op_node[node.name] = node
    draft.op_slots[node.name] = slots
    draft.pricers.append(pricer)
    draft.repsets[node.name] = repsets


def _add_results(draft: _Draft, node: torch.fx.Node) -> tuple[list[str], object]:
    """`node`'s results as values: a single tensor, or one value per output (the getitem nodes that read them);
    with the node's `val` meta."""
    vals = node.meta["val"]
    if not isinstance(vals, (list, tuple)):
        draft.add_value(node.name, node, vals, "activation")
        return [node.name], vals
    readers = {u.args[1]: u for u in node.users if u.target == operator.getitem}
    results = []
    for k, val in enumerate(vals):
        holder = readers.get(k)
        vid = holder.name if holder is not None else f"{node.name}#{k}"
        draft.add_value(vid, holder if holder is not None else node, val, "activation")
        results.append(vid)
    draft.multi[node.name] = results
    return results, vals


def _operand_slots(draft: _Draft, node: torch.fx.Node, repsets, storage_free: set[int]):
    """`node`'s operands: its non-constant tensor arguments (cat's list entries one by one) as values, each with
    its slot, the labels the registry allows there and its argument position."""
    operands: list[str] = []
    slots: list[Slot] = []
    slot_sets: list[list[str]] = []
    slot_arg: list[int] = []
    for i, arg in enumerate(node.args):
        if isinstance(arg, torch.fx.Node):
            items = [(None, arg)] if _tensor_value_node(arg) else []
        elif isinstance(arg, (list, tuple)) and arg and all(_tensor_value_node(a) for a in arg):
            items = list(enumerate(arg))
        else:
            items = []
        if not items:
            continue
        registered = repsets.get_arg_repset(i)
        labels = repset_labels(registered, dtype_name(items[0][1].meta["val"]))
        if not labels:
            raise ProblemError(f"node {node.name!r}: no legal representation for argument {i}", ops=[node.name])
        if i in storage_free:
            continue  # registered NO_STORAGE (prepacked or non-tensor): read as it is
        for item, a in items:
            operands.append(draft.value_of(a))
            slots.append(Slot(i, item))
            slot_sets.append(labels)
            slot_arg.append(i)
    return operands, slots, slot_sets, slot_arg


def _domains_and_transition_prices(draft: _Draft):
    """Values and domains, transition prices: each value read or written by a mode, with the labels the modes
    name as its domain, and a price for every (stored-as, read-as) pair that can occur (through a texture where
    one clone cannot do it: `routes`). The pairs depend on the registry alone, so they are found once per draft
    (`draft.pairs`) and only priced again under another profile: once per price class, not per pair."""
    if draft.pairs is None:
        draft.final_values, draft.pairs = _domains_and_transition_pairs(draft)
    pairs, profile = draft.pairs, draft.profile
    priced = [_route(shape, dtype, src, dst, textures, profile) for shape, dtype, src, dst, textures in pairs.classes]
    prices = [round(cost, 3) for _, cost in priced]
    costs = {key: prices[c] for key, c in zip(pairs.keys, pairs.class_of)}  # (value, src, dst) -> price
    routes = {key: list(priced[c][0]) for key, c in zip(pairs.keys, pairs.class_of) if len(priced[c][0]) > 1}
    return draft.final_values, costs, routes


@dataclass(frozen=True)
class TransitionPairs:
    """Every (stored-as, read-as) pair that can occur, in the order the values and their labels are listed: its
    (value, src, dst) key and the index of its price class, a (shape, dtype, src, dst, textures the value fits in)
    that determines its route and price under any profile (a model's layers repeat a few shapes: a transformer
    delegate's 1,500 pairs fall in a few hundred classes)."""

    keys: list[tuple[str, str, str]]
    class_of: list[int]
    classes: list[tuple]


def _domains_and_transition_pairs(draft: _Draft) -> tuple[list[dict], TransitionPairs]:
    """Each value read or written by a mode, with the labels the modes name as its domain, and every
    (stored-as, read-as) pair that can occur (`TransitionPairs`)."""
    final_values = []
    keys: list[tuple[str, str, str]] = []
    class_of: list[int] = []
    class_index: dict[tuple, int] = {}
    for vid, value in draft.values.items():
        domain = list(dict.fromkeys(draft.mentions.get(vid, [])))
        if not domain:
            continue  # e.g. an unread output of a multi-output op that no mode names
        value["domain"] = domain
        final_values.append(value)
        # Only (stored-as, read-as) pairs can occur; a free value may be stored in any label.
        produced = draft.produced
        sources = [lab for lab in domain if lab in produced[vid]] if vid in produced else domain
        targets = [lab for lab in domain if lab in draft.wanted.get(vid, ())]
        textures = tuple(texture_labels(draft.value_node[vid], draft.texture_limits))
        shape = tuple(value["shape"])
        for src, dst in itertools.product(sources, targets):
            if src != dst:
                keys.append((vid, src, dst))
                class_of.append(class_index.setdefault((shape, value["dtype"], src, dst, textures), len(class_index)))
    return final_values, TransitionPairs(keys, class_of, list(class_index))


# A transition the runtime cannot make in one clone and no texture can relay:
# priced so that no optimum uses it; the validator rejects it if one is forced.
UNROUTABLE_COST = 1e9


def texture_labels(node: torch.fx.Node, texture_limits) -> list[str]:
    """Texture representations this tensor fits in (rank <= 4, within the texture limits)."""
    val = node.meta["val"]
    if isinstance(val, (list, tuple)):
        return []
    return repset_labels(utils.filter_invalid_reprs(val, utils.ANY_TEXTURE, texture_limits))


def transition_route(
    shape, dtype: str, src: str, dst: str, textures: list[str], profile: vk_cost.VulkanProfile | None = None
) -> tuple[list[str], float]:
    """The clones that take a tensor from `src` to `dst`, and their cost.

    One clone, except buffer -> buffer with another layout, which Clone.cpp
    refuses: that goes through the cheapest texture the tensor fits in.
    """
    route, cost = _route(tuple(shape), dtype, src, dst, tuple(textures), vk_cost.load_profile(profile))
    return list(route), cost


@functools.lru_cache(maxsize=65536)  # a model's layers repeat their shapes; profiles hash by identity
def _route(shape, dtype: str, src: str, dst: str, textures: tuple[str, ...], profile) -> tuple[tuple[str, ...], float]:
    if not (storage_of(src) == storage_of(dst) == "BUFFER"):
        return (dst,), vk_cost.transition_cost(shape, dtype, src, dst, profile)
    hops = [
        (
            vk_cost.transition_cost(shape, dtype, src, via, profile)
            + vk_cost.transition_cost(shape, dtype, via, dst, profile),
            via,
        )
        for via in textures
    ]
    if not hops:
        return (dst,), UNROUTABLE_COST
    cost, via = min(hops)
    return (via, dst), cost


def _mode_labels(node, repsets, slot_sets, slot_arg, result_sets, results) -> list[tuple[list[str], list[str]]]:
    """Enumerate the op's legal modes (each its operands' and results' labels) from its sync rules and per-slot
    label sets."""
    n_in = len(slot_sets)
    members_in = list(range(n_in))
    groups: list[tuple[list[int], list[int]]] = []  # (operand slot indices, result indices)
    synced_in = set()
    synced_out = set()
    if repsets.sync_primary_io_repr:
        ins = (
            members_in if repsets.sync_args_repr else [s for s in members_in if slot_arg[s] == repsets.primary_arg_idx]
        )
        outs = list(range(len(results))) if repsets.sync_outs_repr else [0]
        groups.append((ins, outs))
        synced_in |= set(ins)
        synced_out |= set(outs)
    if repsets.sync_args_repr and not synced_in and members_in:
        groups.append((members_in, []))
        synced_in |= set(members_in)
    if repsets.sync_outs_repr and not synced_out and len(results) > 1:
        groups.append(([], list(range(len(results)))))
        synced_out |= set(range(len(results)))
    groups += [([s], []) for s in members_in if s not in synced_in]
    groups += [([], [k]) for k in range(len(results)) if k not in synced_out]

    group_choices: list[list[tuple[list[str], list[str]]]] = []
    for ins, outs in groups:
        member_sets = [slot_sets[s] for s in ins] + [result_sets[k] for k in outs]
        # The group agrees on a packed-dim configuration; each member takes the
        # first of its own labels with it (equal labels whenever they share one).
        keys = None
        for labels in member_sets:
            ks = {packed_dim_key(lab) for lab in labels}
            keys = ks if keys is None else keys & ks
        anchors = [lab for lab in member_sets[0] if packed_dim_key(lab) in keys] if member_sets else []
        choices = []
        for anchor in anchors:
            picked = []
            for labels in member_sets:
                same = (
                    anchor
                    if anchor in labels
                    else next(lab for lab in labels if packed_dim_key(lab) == packed_dim_key(anchor))
                )
                picked.append(same)
            choices.append((picked[: len(ins)], picked[len(ins) :]))
        if not choices:
            raise ProblemError(f"node {node.name!r}: its synced tensors share no representation", ops=[node.name])
        group_choices.append(choices)

    total = 1
    for c in group_choices:
        total *= len(c)
    if total > MAX_MODES_PER_OP:
        log.warning("node %s: %d modes; keeping each unsynced slot's two preferred representations", node.name, total)
        group_choices = [c if len(g[0]) + len(g[1]) > 1 else c[:2] for g, c in zip(groups, group_choices)]

    modes = []
    for combo in itertools.product(*group_choices):
        operand_labels: list[str] = [""] * n_in
        result_labels: list[str] = [""] * len(results)
        for (ins, outs), (in_labels, out_labels) in zip(groups, combo):
            for s, lab in zip(ins, in_labels):
                operand_labels[s] = lab
            for k, lab in zip(outs, out_labels):
                result_labels[k] = lab
        modes.append((operand_labels, result_labels))
    return modes


def _mode_costs(
    combos: list[tuple[list[str], list[str]]],
    values: dict,
    results: list[str],
    op_class: str | None,
    contraction: int,
    resolve: bool,
    profile: vk_cost.VulkanProfile,
) -> list[float]:
    """Each mode's price under `profile` (`combos`: its operands' and results' labels); with `resolve`, prices the
    profile cannot tell apart are made one (`resolved_mode_costs`)."""
    costs = []
    for operand_labels, result_labels in combos:
        reads = operand_labels[0] if operand_labels else None
        cost = sum(
            vk_cost.op_mode_cost(op_class, values[r]["shape"], values[r]["dtype"], lab, profile, contraction, reads)
            for r, lab in vk_cost.priced_results(op_class, profile, list(zip(results, result_labels)))
        )
        costs.append(round(cost, 3))
    return vk_cost.resolved_mode_costs(costs, profile) if resolve else costs
