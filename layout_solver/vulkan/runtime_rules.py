"""Where the Vulkan runtime's C++ is stricter than its op registry's sets: the runtime wins.

Each pair rule maps (input labels, output labels) of a one-input op to its legal (input, output) pairs; each
label rule keeps the labels a tensor of the op may take. The registry still supplies the label sets.
"""

from __future__ import annotations

from executorch.exir.dialects._ops import ops as exir_ops


def storage_of(label: str) -> str:
    """The storage half of a label: "TEXTURE_3D" or "BUFFER"."""
    return label.partition(":")[0]


def _view_pairs(ins: list[str], outs: list[str]) -> list[tuple[str, str]]:
    # View.cpp picks the shader from the output's storage (view_buffer or the
    # texture view) and binds the input the same way, so storage must agree;
    # both shaders take the input's and the output's packed dim / layout as
    # specialization constants, so the packing may change inside the view's own
    # dispatch (the registry's sync rule would forbid that and add a clone); the
    # cost model prices such a view as the clone it amounts to.
    return [(a, b) for a in ins for b in outs if storage_of(a) == storage_of(b)]


def _clone_pairs(ins: list[str], outs: list[str]) -> list[tuple[str, str]]:
    # Clone.cpp: texture->texture (a view when the layouts differ), texture<->buffer;
    # buffer->buffer only when the layout is unchanged ("not supported yet").
    return [(a, b) for a in ins for b in outs if not (storage_of(a) == storage_of(b) == "BUFFER" and a != b)]


def _layer_norm_label_ok(val, label: str) -> bool:
    # Found on the device by the differential tests (lavapipe, runtime at cff6f4dd32): native_layer_norm
    # written to a width- or height-packed texture is wrong when the channel dim is not a multiple of 4
    # (layer_norm -> conv on [1, 3, 5, 7]: max abs error 1.17); channels-packed textures and buffers are right.
    storage, _, layout = label.partition(":")
    channels = int(val.shape[-3]) if len(val.shape) >= 3 else 1
    return storage != "TEXTURE_3D" or layout == "TENSOR_CHANNELS_PACKED" or channels % 4 == 0


# target -> predicate (tensor value, label) over the labels its tensors may take, where the runtime is
# stricter than the registry.
RUNTIME_LABEL_RULES = {
    exir_ops.edge.aten.native_layer_norm.default: _layer_norm_label_ok,
}


RUNTIME_PAIR_RULES = {
    exir_ops.edge.aten.view_copy.default: _view_pairs,
    exir_ops.edge.aten.clone.default: _clone_pairs,
}
