"""Post-condition of every Vulkan tagging pass: the tagged graph is one the runtime can run.

This is a second reading of the rules, kept apart from the problem builder
(`problem_builder.py`) so that one blind spot cannot hide in both:

* the registry, read node by node (`make_op_repsets`): representations inside
  the registered sets, synced tensors agreeing;
* the runtime's own C++ (`backends/vulkan/runtime/graph/ops/impl/*.cpp`), read
  separately and written down below as predicates over a node's input and
  output representations. Where the two disagree the runtime wins, and the
  registry check steps aside for that one rule (said at the entry).

Both are checked against the device by the differential execution tests.
"""

from __future__ import annotations

import operator
from collections import Counter
from collections.abc import Callable

import torch
from executorch.backends.vulkan import utils
from executorch.backends.vulkan.op_registry import get_op_features, has_impl
from executorch.backends.vulkan.serialization.vulkan_graph_schema import VkStorageType
from executorch.exir.dialects._ops import ops as exir_ops


class LayoutValidationError(RuntimeError):
    """The tagged graph breaks a representation rule; the message names the node and the rule."""


def _storage(r: utils.TensorRepr) -> VkStorageType:
    return r.storage_type


def _view_ok(ins: list[utils.TensorRepr], out: utils.TensorRepr, node=None) -> str | None:
    # View.cpp view(): the shader is chosen from the output's storage (view_buffer
    # or the texture view) and binds the input as the same kind of resource.
    if _storage(ins[0]) != _storage(out):
        return f"view_copy reads {ins[0].storage_type.name} into {out.storage_type.name}: View.cpp needs one storage"
    return None


def _clone_ok(ins: list[utils.TensorRepr], out: utils.TensorRepr, node=None) -> str | None:
    # Clone.cpp clone(): VK_THROW("Buffer to buffer memory layout transition not supported yet!")
    if _storage(ins[0]) == _storage(out) == VkStorageType.BUFFER and ins[0].memory_layout != out.memory_layout:
        return (
            f"clone BUFFER {ins[0].memory_layout.name} -> {out.memory_layout.name}: Clone.cpp has no "
            "buffer-to-buffer layout transition"
        )
    return None


def _to_dim_order_copy_ok(ins: list[utils.TensorRepr], out: utils.TensorRepr, node=None) -> str | None:
    # View.cpp to_dim_order_copy(): VK_CHECK_COND(is_buffer_storage(in) && is_buffer_storage(out))
    if not (_storage(ins[0]) == _storage(out) == VkStorageType.BUFFER):
        return "_to_dim_order_copy needs buffers on both sides (View.cpp)"
    return None


def _layer_norm_ok(ins: list[utils.TensorRepr], out: utils.TensorRepr, node: torch.fx.Node) -> str | None:
    # Seen on the device (differential tests): a width/height-packed texture layer norm over a tensor whose
    # channel dim is not a multiple of 4 computes wrong values.
    val = node.meta["val"][0]
    channels = int(val.shape[-3]) if len(val.shape) >= 3 else 1
    if (
        out.storage_type == VkStorageType.TEXTURE_3D
        and out.memory_layout.name != "TENSOR_CHANNELS_PACKED"
        and channels % 4
    ):
        return (
            f"native_layer_norm in a {out.memory_layout.name} texture with {channels} channels is wrong on the device"
        )
    return None


# target -> (check over the tensor inputs' and the output's representations (and the node),
#            whether it replaces the registry's sync rule for that op)
RUNTIME_RULES: dict[object, tuple[Callable, bool]] = {
    exir_ops.edge.aten.native_layer_norm.default: (_layer_norm_ok, False),
    # The view shaders take both packings as specialization constants: the
    # registry's primary-io sync is stricter than the runtime, which wins.
    exir_ops.edge.aten.view_copy.default: (_view_ok, True),
    exir_ops.edge.aten.clone.default: (_clone_ok, True),
    exir_ops.edge.dim_order_ops._to_dim_order_copy.default: (_to_dim_order_copy_ok, False),
}


def reprs_of(node: torch.fx.Node) -> list[utils.TensorRepr] | None:
    """Representations of every tensor a node produces, or None if any is untagged.

    (utils.has_node_repr is False for multi-output nodes, whose spec is a tuple.)"""
    spec = node.meta.get("spec")
    specs = spec if isinstance(spec, (list, tuple)) else [spec]
    found = [getattr(s, "etvk_node_repr", None) for s in specs]
    return None if not found or any(r is None for r in found) else found


def _is_constant(node) -> bool:
    return isinstance(node, torch.fx.Node) and bool(node.meta.get("etvk_tensorref", False))


def _tensor_fits(node: torch.fx.Node, r: utils.TensorRepr, texture_limits) -> str | None:
    """Tensor-level facts: textures hold rank <= 4 within the limits; PACKED_INT8 holds 8-bit data."""
    val = node.meta["val"]
    if isinstance(val, (list, tuple)):
        return None
    if r.memory_layout.name.startswith("PACKED_INT8") and val.dtype not in (torch.int8, torch.uint8):
        return f"{r.memory_layout.name} holds 8-bit data, the tensor is {val.dtype}"
    if r.storage_type == VkStorageType.TEXTURE_3D:
        if len(val.shape) > 4:
            return f"a rank-{len(val.shape)} tensor cannot be a texture"
        extents = utils.required_image_extents(val.shape, r.memory_layout)
        if not utils.extents_are_valid(extents, texture_limits):
            return f"texture extents {extents} exceed the limits {texture_limits}"
    return None


def _registered_inputs(node: torch.fx.Node):
    features = get_op_features(node.target)
    if features.pick_io_storage_fn is not None:
        return utils.TensorRepSetList(features.pick_io_storage_fn(node)[0])
    return features.inputs_storage


def census(graph_module: torch.fx.GraphModule) -> Counter:
    """Ops by target, transition clones left out: a tagging pass may add clones and nothing else."""
    return Counter(
        str(n.target)
        for n in graph_module.graph.nodes
        if n.op == "call_function" and n.target != exir_ops.edge.aten.clone.default
    )


def validate(graph_module: torch.fx.GraphModule, texture_limits, census_before: Counter | None = None) -> None:
    """Raise LayoutValidationError at the first node the registry or the runtime would reject."""
    for node in graph_module.graph.nodes:
        if node.op != "call_function" or not utils.is_tensor_node(node) or _is_constant(node):
            continue
        if not has_impl(node.target) or node.target == operator.getitem:
            continue
        outs = reprs_of(node)
        if outs is None:
            raise LayoutValidationError(f"node {node.name!r} ({node.target}) has no representation")
        for r in outs:
            problem = _tensor_fits(node, r, texture_limits)
            if problem:
                raise LayoutValidationError(f"node {node.name!r}: {problem}")
        registered = _registered_inputs(node)
        tensor_args: dict[int, list[torch.fx.Node]] = {}
        for i, arg in enumerate(node.args):
            items = [arg] if isinstance(arg, torch.fx.Node) else list(arg) if isinstance(arg, (list, tuple)) else []
            items = [
                a for a in items if isinstance(a, torch.fx.Node) and utils.is_tensor_node(a) and not _is_constant(a)
            ]
            reg = registered[i]
            if items and isinstance(reg, utils.TensorRepSet) and not reg.is_empty():  # NO_STORAGE: prepacked
                tensor_args[i] = items
        arg_reprs: dict[int, list[utils.TensorRepr]] = {}
        for i, items in tensor_args.items():
            for a in items:
                r = utils.get_node_repr(a) if utils.has_node_repr(a) else None
                if not isinstance(r, utils.TensorRepr):
                    raise LayoutValidationError(f"node {node.name!r}: argument {i} ({a.name!r}) has no representation")
                arg_reprs.setdefault(i, []).append(r)
        runtime_rule, replaces_sync = RUNTIME_RULES.get(node.target, (None, False))
        if runtime_rule is not None:
            first_inputs = [rs[0] for _, rs in sorted(arg_reprs.items())]
            problem = runtime_rule(first_inputs, outs[0], node) if first_inputs else None
            if problem:
                raise LayoutValidationError(f"node {node.name!r}: {problem}")
        _check_registry(node, outs, arg_reprs, texture_limits, check_sync=not replaces_sync)
    if census_before is not None:
        after = census(graph_module)
        if after != census_before:
            raise LayoutValidationError(
                f"ops changed beyond transitions: {(after - census_before) + (census_before - after)}"
            )


def _check_registry(node, outs, arg_reprs, texture_limits, check_sync: bool) -> None:
    repsets = get_op_features(node.target).make_op_repsets(node, texture_limits)
    pdi = lambda r: utils.PackedDimInfo.from_repr(r.memory_layout, r.storage_type)
    for k, r in enumerate(outs):
        if not repsets.get_out_repset(k).is_compatible(r):
            raise LayoutValidationError(f"node {node.name!r}: output {k} is {r}, not in {repsets.get_out_repset(k)}")
    for i, reprs in arg_reprs.items():
        allowed = repsets.get_arg_repset(i)
        for r in reprs:
            if not allowed.is_compatible(r):
                raise LayoutValidationError(f"node {node.name!r}: argument {i} is {r}, not in {allowed}")
    if not check_sync:
        return
    firsts = {i: pdi(rs[0]) for i, rs in arg_reprs.items()}
    if repsets.sync_args_repr and len({pdi(r) for rs in arg_reprs.values() for r in rs}) > 1:
        raise LayoutValidationError(f"node {node.name!r}: synced arguments disagree: {arg_reprs}")
    if (
        repsets.sync_primary_io_repr
        and repsets.primary_arg_idx in firsts
        and firsts[repsets.primary_arg_idx] != pdi(outs[0])
    ):
        raise LayoutValidationError(f"node {node.name!r}: primary input and output disagree")
