"""Write a representation assignment into a Vulkan edge graph.

Plain inputs only (node names and "STORAGE:LAYOUT" labels), so this module
knows nothing of the solver. It sets `etvk_node_repr` on every tensor it is
given and inserts one `clone` per (value, target representation), placed
before the first consumer that reads it and wired into exactly the argument
slots that need it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from executorch.backends.vulkan import utils
from executorch.backends.vulkan.serialization.vulkan_graph_schema import VkMemoryLayout, VkStorageType
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.tensor import TensorSpec


def repr_label(r: utils.TensorRepr) -> str:
    """The problem's label of a representation, "STORAGE:LAYOUT" (e.g. "TEXTURE_3D:TENSOR_WIDTH_PACKED")."""
    return f"{r.storage_type.name}:{r.memory_layout.name}"


def label_repr(label: str) -> utils.TensorRepr:
    """The representation a label names (inverse of repr_label); raises KeyError for an unknown name."""
    storage, layout = label.split(":")
    return utils.TensorRepr(VkStorageType[storage], VkMemoryLayout[layout])


@dataclass(frozen=True)
class SlotUse:
    """One argument slot that reads a value: the consumer node, the argument index and the index inside a list
    argument.
    """

    consumer: torch.fx.Node
    arg: int
    item: int | None  # index inside a list argument (cat), else None


@dataclass
class TransitionPlan:
    """Clone `source` into `target`, through the representations in `via` first, for `uses`."""

    source: torch.fx.Node
    target: str
    uses: list[SlotUse]
    via: tuple[str, ...] = ()


def set_reprs(node_labels: dict[torch.fx.Node, str | list[str]]) -> None:
    """Set `etvk_node_repr` on every node from its label (a list of labels for multi-output nodes)."""
    for node, label in node_labels.items():
        if isinstance(label, list):
            utils.set_node_repr(node, utils.TensorReprList([label_repr(x) for x in label]))
        else:
            utils.set_node_repr(node, label_repr(label))


def insert_transitions(graph_module: torch.fx.GraphModule, plans: list[TransitionPlan]) -> list[torch.fx.Node]:
    """Insert the planned clones (one per value and target representation, through `via` first) before their first
    reader and rewire exactly the planned slots; returns the clones.
    """
    order = {n: i for i, n in enumerate(graph_module.graph.nodes)}
    clones = []
    for plan in plans:
        first = min((u.consumer for u in plan.uses), key=order.__getitem__)
        clone = plan.source
        for label in (*plan.via, plan.target):
            with graph_module.graph.inserting_before(first):
                clone = graph_module.graph.create_node("call_function", exir_ops.edge.aten.clone.default, (clone,))
            clone.meta["val"] = plan.source.meta["val"]
            clone.meta["spec"] = TensorSpec.from_tensor(clone.meta["val"])
            clone.meta["spec"].const = False
            utils.set_node_repr(clone, label_repr(label))
            clones.append(clone)
        for use in plan.uses:
            args = list(use.consumer.args)
            if use.item is None:
                assert args[use.arg] is plan.source, (use.consumer, use.arg)
                args[use.arg] = clone
            else:
                items = list(args[use.arg])
                assert items[use.item] is plan.source, (use.consumer, use.arg, use.item)
                items[use.item] = clone
                args[use.arg] = type(args[use.arg])(items) if isinstance(args[use.arg], tuple) else items
            use.consumer.args = tuple(args)
    return clones
