"""Write a representation assignment into a Vulkan edge graph.

Plain inputs only (node names and "STORAGE:LAYOUT" labels), so this module
knows nothing of the solver. It sets `etvk_node_repr` on every tensor it is
given and inserts one `clone` per (value, target representation), placed
before the first consumer that reads it and wired into exactly the argument
slots that need it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

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


_ABSENT = object()  # a spec without `etvk_node_repr`, as an untagged graph's are


@dataclass
class Written:
    """What `set_reprs` and `insert_transitions` changed on one graph, for `take_back` to undo exactly: a pass that
    prices several taggings of one untagged graph writes each onto it and takes it back, instead of copying the
    graph for each (a copy of a 150-node delegate graph costs about 2 ms; writing and taking back, a tenth).

    Taken back: every spec's representation (absent again where it was), each rewired consumer's arguments, the
    clones (erased), each source's users in their order, and the graph's name registry, so the next tagging's
    clones get the names they would get on a fresh copy."""

    graph: torch.fx.Graph
    specs: list[tuple[TensorSpec, object]] = field(default_factory=list)  # spec, its representation before
    args: dict[torch.fx.Node, tuple] = field(default_factory=dict)  # consumer -> its arguments before
    users: dict[torch.fx.Node, dict] = field(default_factory=dict)  # a source or a consumer's input -> its users before
    clones: list[torch.fx.Node] = field(default_factory=list)
    names: tuple | None = None  # the graph's name registry before the first clone

    def take_back(self) -> None:
        """Undo what was recorded, last change first: the graph is as it was before the tagging was written."""
        for consumer, args in self.args.items():
            consumer.args = args
        for clone in reversed(self.clones):  # a clone through another: the later one first
            self.graph.erase_node(clone)
        for source, users in self.users.items():
            source.users.clear()
            source.users.update(users)
        if self.names is not None:
            names = self.graph._graph_namespace
            names._obj_to_name, names._used_names, names._base_count = self.names
        for spec, before in reversed(self.specs):
            if before is _ABSENT:
                del spec.etvk_node_repr
            else:
                spec.etvk_node_repr = before


def set_reprs(node_labels: dict[torch.fx.Node, str | list[str]], written: Written | None = None) -> None:
    """Set `etvk_node_repr` on every node from its label (a list of labels for multi-output nodes); `written`, if
    given, records what it replaced."""
    for node, label in node_labels.items():
        if written is not None:
            spec = node.meta["spec"]
            for one in spec if isinstance(spec, (list, tuple)) else (spec,):
                written.specs.append((one, one.__dict__.get("etvk_node_repr", _ABSENT)))
        if isinstance(label, list):
            utils.set_node_repr(node, utils.TensorReprList([label_repr(x) for x in label]))
        else:
            utils.set_node_repr(node, label_repr(label))


def insert_transitions(
    graph_module: torch.fx.GraphModule, plans: list[TransitionPlan], written: Written | None = None
) -> list[torch.fx.Node]:
    """Insert the planned clones (one per value and target representation, through `via` first) before their first
    reader and rewire exactly the planned slots; returns the clones. `written`, if given, records what it changed.
    """
    order = {n: i for i, n in enumerate(graph_module.graph.nodes)}
    clones = []
    if written is not None and plans:
        names = graph_module.graph._graph_namespace
        written.names = (dict(names._obj_to_name), set(names._used_names), dict(names._base_count))
    for plan in plans:
        first = min((u.consumer for u in plan.uses), key=order.__getitem__)
        if written is not None:  # rewiring a consumer moves it to the end of each of its inputs' users
            written.users.setdefault(plan.source, dict(plan.source.users))
            for use in plan.uses:
                if use.consumer not in written.args:
                    written.args[use.consumer] = use.consumer.args
                    for read in use.consumer.all_input_nodes:
                        written.users.setdefault(read, dict(read.users))
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
    if written is not None:
        written.clones.extend(clones)
    return clones
