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

import functools
import itertools
import logging
import operator
from dataclasses import dataclass, field

import torch
from executorch.backends.vulkan import utils
from executorch.backends.vulkan.op_registry import get_op_features, has_impl
from executorch.backends.vulkan.serialization.vulkan_graph_schema import VkMemoryLayout, VkStorageType

from cost_models import vulkan as vk_cost
from layout_solver.problem import Problem, ProblemError

log = logging.getLogger(__name__)

# More modes than this for one op means many independent slots; keep each
# independent slot to its preferred representations instead of the product.
MAX_MODES_PER_OP = 4096


def repr_label(r: utils.TensorRepr) -> str:
    return f"{r.storage_type.name}:{r.memory_layout.name}"


def label_repr(label: str) -> utils.TensorRepr:
    storage, layout = label.split(":")
    return utils.TensorRepr(VkStorageType[storage], VkMemoryLayout[layout])


def repset_labels(repset: utils.TensorRepSet) -> list[str]:
    """Labels of a repset, textures first (the stock preference), then buffers."""
    tex = sorted(repset.valid_texture_layouts, key=lambda lay: lay.value)
    buf = sorted(repset.valid_buffer_layouts, key=lambda lay: lay.value)
    return [f"TEXTURE_3D:{lay.name}" for lay in tex] + [f"BUFFER:{lay.name}" for lay in buf]


@functools.lru_cache(maxsize=None)
def packed_dim_key(label: str) -> utils.PackedDimInfo:
    r = label_repr(label)
    return utils.PackedDimInfo.from_repr(r.memory_layout, r.storage_type)


@dataclass
class Slot:
    """Where an operand sits in its consumer: node.args[arg] (or node.args[arg][item] for lists)."""

    arg: int
    item: int | None = None


@dataclass
class VulkanProblem:
    problem: Problem
    value_node: dict[str, torch.fx.Node]  # value id -> fx node holding it
    op_node: dict[str, torch.fx.Node]
    op_slots: dict[str, list[Slot]]  # op id -> operand slots, aligned with Op.operands
    multi_output_ops: dict[str, list[str]] = field(default_factory=dict)  # op id -> result value ids


def is_constant_tensor(node) -> bool:
    return isinstance(node, torch.fx.Node) and bool(node.meta.get("etvk_tensorref", False))


def _tensor_value_node(node) -> bool:
    return isinstance(node, torch.fx.Node) and utils.is_tensor_node(node) and not is_constant_tensor(node)


def _dtype_name(val) -> str:
    return str(val.dtype).removeprefix("torch.")


def build_problem(graph_module: torch.fx.GraphModule, texture_limits, name: str = "vulkan") -> VulkanProblem:
    graph = graph_module.graph
    values: dict[str, dict] = {}
    value_node: dict[str, torch.fx.Node] = {}
    mentions: dict[str, list[str]] = {}  # value id -> labels any mode names for it
    produced: dict[str, set[str]] = {}  # value id -> labels its producer may store it in
    wanted: dict[str, set[str]] = {}  # value id -> labels its consumers may read it in
    ops: list[dict] = []
    op_node: dict[str, torch.fx.Node] = {}
    op_slots: dict[str, list[Slot]] = {}
    multi: dict[str, list[str]] = {}

    def add_value(vid: str, node: torch.fx.Node, val, kind: str) -> None:
        if any(not isinstance(d, int) for d in val.shape):
            raise ProblemError(f"node {node.name!r}: dynamic shape {tuple(val.shape)} is not supported", ops=[node.name])
        shape = [int(d) for d in val.shape]
        dtype = _dtype_name(val)
        values[vid] = {"id": vid, "shape": shape, "dtype": dtype, "size_bytes": vk_cost.tensor_bytes(shape, dtype),
                       "kind": kind}
        value_node[vid] = node

    def value_of(node: torch.fx.Node) -> str:
        if node.name not in values:
            # Graph input, or output of an op without a Vulkan implementation:
            # free, as in the stock pass (the first consumer decides).
            add_value(node.name, node, node.meta["val"], "input" if node.op == "placeholder" else "activation")
        return node.name

    for node in graph.nodes:
        if node.op != "call_function" or not utils.is_tensor_node(node) or is_constant_tensor(node):
            continue
        if not has_impl(node.target):
            continue
        if node.target == operator.getitem:
            continue  # aliases a result of its source op, registered with that op
        try:
            repsets = get_op_features(node.target).make_op_repsets(node, texture_limits)
        except Exception as exc:  # the registry could not describe this node
            raise ProblemError(f"node {node.name!r} ({node.target}): the Vulkan op registry cannot describe it: {exc}",
                               ops=[node.name]) from exc
        op_id = node.name
        # Results: a single tensor, or one value per output (the getitem nodes that read them).
        vals = node.meta["val"]
        if isinstance(vals, (list, tuple)):
            readers = {u.args[1]: u for u in node.users if u.target == operator.getitem}
            results = []
            for k, val in enumerate(vals):
                holder = readers.get(k)
                vid = holder.name if holder is not None else f"{node.name}#{k}"
                add_value(vid, holder if holder is not None else node, val, "activation")
                results.append(vid)
            multi[op_id] = results
        else:
            add_value(node.name, node, vals, "activation")
            results = [node.name]
        # Operands: non-constant tensor args (cat's list entries one by one).
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
            labels = repset_labels(registered)
            if not labels:
                raise ProblemError(f"node {node.name!r}: no legal representation for argument {i}", ops=[node.name])
            if registered == utils.ANY_STORAGE_INCL_PACKED_INT8:
                continue  # registry places no constraint (NO_STORAGE arg): reads it as it is
            for item, a in items:
                operands.append(value_of(a))
                slots.append(Slot(i, item))
                slot_sets.append(labels)
                slot_arg.append(i)
        result_sets = [repset_labels(repsets.get_out_repset(k)) for k in range(len(results))]
        modes = _modes(node, repsets, slot_sets, slot_arg, result_sets, values, results)
        slot_labels = list(zip(*[m["operands"] + m["results"] for m in modes]))
        for vid, labels in zip(operands, slot_labels[: len(operands)]):
            mentions.setdefault(vid, []).extend(labels)
            wanted.setdefault(vid, set()).update(labels)
        for vid, labels in zip(results, slot_labels[len(operands):]):
            mentions.setdefault(vid, []).extend(labels)
            produced.setdefault(vid, set()).update(labels)
        ops.append({"id": op_id, "target": str(node.target), "operands": operands, "results": results,
                    "modes": modes})
        op_node[op_id] = node
        op_slots[op_id] = slots

    final_values = []
    costs = []
    for vid, value in values.items():
        domain = list(dict.fromkeys(mentions.get(vid, [])))
        if not domain:
            continue  # e.g. an unread output of a multi-output op that no mode names
        value["domain"] = domain
        final_values.append(value)
        # Only (stored-as, read-as) pairs can occur; a free value may be stored in any label.
        sources = [lab for lab in domain if lab in produced[vid]] if vid in produced else domain
        targets = [lab for lab in domain if lab in wanted.get(vid, ())]
        for src, dst in itertools.product(sources, targets):
            if src == dst:
                continue
            costs.append({"value": vid, "src": src, "dst": dst,
                          "cost": round(vk_cost.transition_cost(value["shape"], value["dtype"], src, dst), 3)})
    # One validation call over plain dicts: pydantic-core checks thousands of
    # objects several times faster than constructing them one by one.
    problem = Problem.model_validate({"name": name, "values": final_values, "ops": ops, "transition_costs": costs,
                                      "default_cost_per_byte": 0.0})
    return VulkanProblem(problem, value_node, op_node, op_slots, multi)


def _modes(node, repsets, slot_sets, slot_arg, result_sets, values, results) -> list[dict]:
    """Enumerate the op's legal modes from its sync rules and per-slot label sets."""
    n_in = len(slot_sets)
    members_in = list(range(n_in))
    groups: list[tuple[list[int], list[int]]] = []  # (operand slot indices, result indices)
    synced_in = set()
    synced_out = set()
    if repsets.sync_primary_io_repr:
        ins = members_in if repsets.sync_args_repr else [s for s in members_in if slot_arg[s] == repsets.primary_arg_idx]
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
                same = anchor if anchor in labels else next(lab for lab in labels if packed_dim_key(lab) == packed_dim_key(anchor))
                picked.append(same)
            choices.append((picked[: len(ins)], picked[len(ins):]))
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
        cost = sum(vk_cost.op_mode_cost(values[r]["size_bytes"], lab.split(":")[0])
                   for r, lab in zip(results, result_labels))
        modes.append({"name": "|".join(operand_labels + ["->"] + result_labels), "operands": operand_labels,
                      "results": result_labels, "cost": round(cost, 3)})
    return modes
