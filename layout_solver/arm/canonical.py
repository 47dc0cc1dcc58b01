"""Write every transpose in its cheapest form before it becomes a TOSA TRANSPOSE.

A permute of shape S by p moves exactly the same bytes as the canonical
transpose (unit dims dropped, input axes that stay adjacent merged), framed
by two RESHAPEs, which Vela folds away. Vela prices the canonical form far
lower: the ViT's rank-5 (0,2,3,1,4) of [1,36,3,3,64] is 10 NPU ops as given
and 1 op as (1,0,2) of [36,9,64]. A permute that is an identity in memory
becomes a single reshape. When the canonical form only drops unit axes,
Vela moves the reshape back past the transpose, so the form that would run
is the original shape with its unit axes kept in place; that form is written
directly (permute, then a reshape). The candidates are
cost_models.ethos_u55.materialisations().

The rewrite is exact (tests check it against numpy on random shapes and
permutations) and local, so it runs after the solver's assignment or, on its
own, after the stock propagation passes.
"""

from __future__ import annotations

from typing import ClassVar

from executorch.backends.arm._passes.arm_pass import ArmPass
from executorch.exir.dialects._ops import ops as exir_ops

from cost_models.ethos_u55 import is_identity, materialisations
from graph_io.fx import dtype_name

_PERMUTES = (exir_ops.edge.aten.permute_copy.default, exir_ops.edge.aten.permute.default)
_VIEW = exir_ops.edge.aten.view_copy.default


def _count(stats: dict, key: str) -> None:
    stats[key] = stats.get(key, 0) + 1


class CanonicalTransposePass(ArmPass):
    """Rewrite a permute into reshape -> canonical transpose -> reshape when Vela says it is cheaper.

    Merging axes is not always a win: it can leave a narrow innermost dim
    (slower per byte), and a reshape of a delegate input is a real memory copy
    on the NPU. So each candidate is priced exactly, as given and canonical,
    with Vela (disk-cached, as executorch's own DecomposePermuteForU55Pass
    probes Vela) and rewritten only if it gets cheaper.
    """

    _passes_required_after: ClassVar[set] = set()

    def __init__(self, stats: dict | None = None):
        super().__init__()
        self.stats = stats if stats is not None else {}

    @staticmethod
    def _vela_cycles(shape, perm, dtype: str) -> float:
        from cost_models.vela import VelaUnsupported, measure_transpose

        try:
            return float(measure_transpose(shape, perm, dtype).cycles)
        except VelaUnsupported:
            return float("inf")

    def call_operator(self, op, args, kwargs, meta, updated=False):
        if op not in _PERMUTES:
            return super().call_operator(op, args, kwargs, meta, updated)
        x, perm = args[0], [int(p) for p in args[1]]
        shape = [int(d) for d in x.data.shape]
        rank = len(shape)
        perm = [p % rank for p in perm] if rank else perm
        out_shape = [shape[p] for p in perm]
        source = getattr(getattr(x, "node", None), "op", None)
        forms = materialisations(shape, perm)[1:]
        if source == "placeholder" or not forms:
            _count(self.stats, "kept")  # a delegate input's reshape is a memory copy; or nothing to gain
            return super().call_operator(op, args, kwargs, meta, updated)
        fshape, fperm = forms[0]
        if is_identity(fperm):
            _count(self.stats, "to_reshape")
            return super().call_operator(_VIEW, (x, out_shape), {}, meta, True)
        dtype = dtype_name(x.data)
        if dtype not in ("int8", "int16", "int32") or (
            self._vela_cycles(fshape, fperm, dtype) >= self._vela_cycles(shape, perm, dtype)
        ):
            _count(self.stats, "kept")
            return super().call_operator(op, args, kwargs, meta, updated)
        if list(fshape) == shape:  # the same shape with the unit axes left in place
            _count(self.stats, "unit_axes_fixed")
            moved = super().call_operator(op, (x, list(fperm)), {}, meta, True)
            return super().call_operator(_VIEW, (moved, out_shape), {}, meta, True)
        _count(self.stats, "reduced_rank")
        flat = super().call_operator(_VIEW, (x, list(fshape)), {}, meta, True)
        moved = super().call_operator(op, (flat, list(fperm)), {}, meta, True)
        return super().call_operator(_VIEW, (moved, out_shape), {}, meta, True)
