"""Stock's tagging as the solver's pass runs it: with the registry answers the pass's build already read, and
ExecuTorch's packed-dim arithmetic on representation sets (and its dim orders from strides) answered from a table.

The pass prices every candidate against stock's own tagging of the delegate graph (`passes._stock_prices`). Stock's
`set_op_node_tensor_reprs` asks the registry for a fresh `OpRepSets` for every op it tags; the build asked for the same
nodes moments before (about 40 ms of a MobileViT delegate's pass went to asking again). Scoped changes to ExecuTorch,
like the pass swap in `hooks`, kept in their own module because `hooks` imports `passes`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import threading
from collections.abc import Iterator

from executorch.backends.vulkan import utils
from executorch.exir import tensor as exir_tensor

_REGISTRY_SWAP = threading.Lock()  # one swap at a time: each restores what it found


@contextlib.contextmanager
def registry_answers_reused(answers: dict, texture_limits) -> Iterator[None]:
    """Inside this block, stock's tagging gets a node's op repsets from `answers` (node -> the `OpRepSets` the
    registry gave for it under `texture_limits`) instead of asking the registry for them again.

    Stock's `set_op_node_tensor_reprs` makes a fresh `OpRepSets` for every op it tags and narrows that one, so it
    gets a fresh copy: the same sync flags, its own lists of the same (never mutated) `TensorRepSet`s, which is what
    the registry returns for a node whose target, arguments and metadata are unchanged. Any other node, limit or
    thread's pass reads the registry as before (the answers are keyed by the node objects themselves).
    """
    from executorch.backends.vulkan._passes import tag_memory_meta_pass as tagging

    class Reused:
        def __init__(self, features):
            self.features = features

        def make_op_repsets(self, op_node, *limits):
            known = answers.get(op_node) if len(limits) == 1 and limits[0] is texture_limits else None
            if known is None:
                return self.features.make_op_repsets(op_node, *limits)
            fresh = copy.copy(known)
            fresh.args_repset_list = utils.TensorRepSetList(list(known.args_repset_list.vals))
            fresh.outs_repset_list = utils.TensorRepSetList(list(known.outs_repset_list.vals))
            return fresh

        def __getattr__(self, name):  # anything else stock reads of the op's features
            return getattr(self.features, name)

    with _REGISTRY_SWAP:
        original = tagging.get_op_features
        tagging.get_op_features = lambda target: Reused(original(target))
        try:
            yield
        finally:
            tagging.get_op_features = original


_PACKED_DIMS_SWAP = threading.Lock()  # guards the count of passes inside `packed_dims_tabulated`
_packed_dims_users = 0


@contextlib.contextmanager
def packed_dims_tabulated() -> Iterator[None]:
    """Inside this block, ExecuTorch's `PackedDimInfo.from_repr` answers from a table and
    `TensorRepSet._possible_pdis` from another, keyed by the set's layouts (its two sets built from the first).

    Every `OpRepSets` the registry makes, and every narrowing stock's tagging does, checks its sync rules by turning
    each layout of each representation set into a new frozen-dataclass `PackedDimInfo` (`assert_sync_contraints`):
    6% of the solver pass on a MobileViT-v2 (py-spy: `has_compatible_packed_dim_info_set`). `from_repr` is a pure
    function of a (layout, storage) pair, and a `PackedDimInfo` is frozen and compared by value, so one instance per
    pair gives every caller the same answers. The swap is process-wide while any pass is inside (a count, not a lock held through the pass, so
    passes on other threads run side by side); a stock pass running meanwhile gets the same values, faster.

    `utils.filter_invalid_reprs` (which texture layouts of a set fit a tensor within the limits: every registry
    answer asks it per argument) answers from a table keyed by (shape, the set's texture layouts, limits) too.

    The block also swaps `exir.tensor.dim_order_from_stride` (every clone a tagging or a write-back inserts gets a
    TensorSpec from it) for `_dim_order_sorted`: stock's defines a NamedTuple class on every call, 1.3% of the pass.
    """
    global _packed_dims_users
    info, repset = utils.PackedDimInfo, utils.TensorRepSet
    with _PACKED_DIMS_SWAP:
        if _packed_dims_users == 0:
            info.from_repr = classmethod(_from_repr_tabulated)
            repset._possible_pdis = _possible_pdis_tabulated
            utils.filter_invalid_reprs = _filter_invalid_reprs_tabulated
            exir_tensor.dim_order_from_stride = _dim_order_sorted
        _packed_dims_users += 1
    try:
        yield
    finally:
        with _PACKED_DIMS_SWAP:
            _packed_dims_users -= 1
            if _packed_dims_users == 0:
                info.from_repr = _STOCK_FROM_REPR
                repset._possible_pdis = _STOCK_POSSIBLE_PDIS
                utils.filter_invalid_reprs = _STOCK_FILTER
                exir_tensor.dim_order_from_stride = _STOCK_DIM_ORDER


_STOCK_FROM_REPR = utils.PackedDimInfo.__dict__["from_repr"]
_STOCK_POSSIBLE_PDIS = utils.TensorRepSet.__dict__["_possible_pdis"]
_STOCK_DIM_ORDER = exir_tensor.dim_order_from_stride
_STOCK_FILTER = utils.filter_invalid_reprs


@functools.cache
def _from_repr_tabulated(cls, memory_layout, storage_type=utils.VkStorageType.BUFFER):
    """`PackedDimInfo.from_repr`, one call per (layout, storage)."""
    return _STOCK_FROM_REPR.__func__(cls, memory_layout, storage_type)


def _possible_pdis_tabulated(self):
    """`TensorRepSet._possible_pdis`: the (buffer, texture) sets of the layouts' PackedDimInfos, from a table keyed by
    the layouts (frozen: stock's callers only read them)."""
    key = (frozenset(self.valid_buffer_layouts), frozenset(self.valid_texture_layouts))
    known = _PDIS.get(key)
    if known is None:
        info, buffer, texture = utils.PackedDimInfo, utils.VkStorageType.BUFFER, utils.VkStorageType.TEXTURE_3D
        known = _PDIS[key] = (
            frozenset(_from_repr_tabulated(info, layout, buffer) for layout in key[0]),
            frozenset(_from_repr_tabulated(info, layout, texture) for layout in key[1]),
        )
    return known


_PDIS: dict[tuple[frozenset, frozenset], tuple[frozenset, frozenset]] = {}  # at most one entry per pair of layout sets


def _filter_invalid_reprs_tabulated(tensor_val, tensor_repset, texture_limits):
    """`utils.filter_invalid_reprs` for a static shape: the texture layouts that fit, from a table; the new set is
    built in the order of the given one, as stock's is (its first layout is the one stock's tagging picks)."""
    shape = tensor_val.shape
    if not all(type(d) is int for d in shape):
        return _STOCK_FILTER(tensor_val, tensor_repset, texture_limits)
    textures = tensor_repset.valid_texture_layouts
    key = (tuple(shape), frozenset(textures), tuple(texture_limits))
    fits = _FITS.get(key)
    if fits is None:
        if len(_FITS) >= 65536:  # a service lowering model after model: bounded
            _FITS.clear()
        fits = _FITS[key] = frozenset(_STOCK_FILTER(tensor_val, tensor_repset, texture_limits).valid_texture_layouts)
    kept = set() if len(shape) > 4 else {layout for layout in textures if layout in fits}
    return utils.TensorRepSet(tensor_repset.valid_buffer_layouts, kept)


_FITS: dict[tuple, frozenset] = {}  # (shape, texture layouts, limits) -> those that fit; a model's shapes repeat


def _dim_order_sorted(stride):
    """`exir.tensor.dim_order_from_stride` for strides of positive ints (every static shape's): the dims by stride,
    largest first, ties in dim order, as stock's stable sort of its comparison key orders them (for two positive
    ints its `<` is theirs). Symbolic, zero or negative strides go to stock's."""
    if all(type(s) is int and s > 0 for s in stride):
        return tuple(sorted(range(len(stride)), key=stride.__getitem__, reverse=True))
    return _STOCK_DIM_ORDER(stride)
