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
cost_models.ethos_u55.materialisations(). A transpose may also be written as two
in a row (each in its cheapest form) when that is cheaper in Vela: a swap of
two middle axes under an outer one runs as one op per outer index, but as two
single ops once one axis is moved out of the way first
(cost_models.ethos_u55.two_step_transposes()).

The rewrite is exact (tests check it against numpy on random shapes and
permutations) and local, so it runs after the solver's assignment or, on its
own, after the stock propagation passes.
"""

from __future__ import annotations

import math
from typing import ClassVar

from executorch.backends.arm._passes.arm_pass import ArmPass
from executorch.exir.dialects._ops import ops as exir_ops

from cost_models.ethos_u55 import copy_cycles, is_identity, materialisations, transpose_cost, two_step_transposes
from graph_io.fx import dtype_name

_PERMUTES = (exir_ops.edge.aten.permute_copy.default, exir_ops.edge.aten.permute.default)
_VIEW = exir_ops.edge.aten.view_copy.default
_SHARED_INPUT = "layout_solver_permute_input_shared"  # meta mark, set and cleared by CanonicalTransposePass.call


def _count(stats: dict, key: str) -> None:
    stats[key] = stats.get(key, 0) + 1


class CanonicalTransposePass(ArmPass):
    """Rewrite a permute into reshape -> canonical transpose -> reshape when Vela says it is cheaper.

    Merging axes is not always a win: it can leave a narrow innermost dim
    (slower per byte), and the RESHAPE in front of the transpose is a real
    memory copy when its input has other readers (Vela's
    bypass_memory_only_ops folds a reshape only when it is its input's sole
    consumer; a delegate input with one reader folds too). So each candidate
    is priced exactly, as given and canonical, with Vela (disk-cached, as
    executorch's own DecomposePermuteForU55Pass probes Vela), plus that copy
    for a shared input, and rewritten only if it gets cheaper.
    """

    _passes_required_after: ClassVar[set] = set()

    def __init__(self, stats: dict | None = None):
        super().__init__()
        self.stats = stats if stats is not None else {}

    def call(self, graph_module):
        # The rebuilt graph does not know its users yet: mark each permute whose input others read too.
        for node in graph_module.graph.nodes:
            if node.target in _PERMUTES:
                node.meta[_SHARED_INPUT] = len(node.args[0].users) > 1
        try:
            result = super().call(graph_module)
        finally:
            for node in graph_module.graph.nodes:
                node.meta.pop(_SHARED_INPUT, None)
        for node in result.graph_module.graph.nodes:
            node.meta.pop(_SHARED_INPUT, None)
        return result

    @staticmethod
    def _vela_cycles(shape, perm, dtype: str) -> float:
        from cost_models.vela import VelaUnsupported, measure_transpose

        try:
            return float(measure_transpose(shape, perm, dtype).cycles)
        except VelaUnsupported:
            return float("inf")

    def _cheapest_form(self, shape, perm, dtype: str, shared: bool = False) -> tuple[float, tuple, tuple]:
        """The cheapest materialisation of TRANSPOSE(shape, perm), priced by Vela: (cycles, shape, perm); the
        form as given on a tie. `shared`: the input has other readers, so a form with a reshape in front also
        pays the memory copy Vela makes of that reshape."""
        copy = copy_cycles(math.prod(shape), dtype) if shared else 0.0
        priced = [
            (self._vela_cycles(s, p, dtype) + (copy if list(s) != list(shape) else 0.0), i, s, p)
            for i, (s, p) in enumerate(materialisations(shape, perm))
        ]
        cycles, _, shape, perm = min(priced)
        return cycles, shape, perm

    def call_operator(self, op, args, kwargs, meta, updated=False):
        if op not in _PERMUTES:
            return super().call_operator(op, args, kwargs, meta, updated)
        written = self._write(op, args[0], [int(p) for p in args[1]], meta, split=True)
        return written if written is not None else super().call_operator(op, args, kwargs, meta, updated)

    def _step(self, op, x, perm, meta):
        """One transpose of a two-step write, itself in its cheapest single form."""
        written = self._write(op, x, perm, meta, split=False)
        return written if written is not None else super().call_operator(op, (x, perm), {}, meta, True)

    def _write(self, op, x, perm, meta, split: bool):
        """The rewritten permute of `x` by `perm`, or None to keep it as it is."""
        shape = [int(d) for d in x.data.shape]
        rank = len(shape)
        perm = [p % rank for p in perm] if rank else perm
        out_shape = [shape[p] for p in perm]
        forms = materialisations(shape, perm)
        if len(forms) > 1 and is_identity(forms[1][1]):
            _count(self.stats, "to_reshape")
            return super().call_operator(_VIEW, (x, out_shape), {}, meta, True)
        shared = bool(meta.data.get(_SHARED_INPUT))  # a reshape in front would be a memory copy
        dtype = dtype_name(x.data)
        if dtype not in ("int8", "int16", "int32"):
            _count(self.stats, "kept")
            return None
        steps = two_step_transposes(shape, perm, dtype) if split and not shared else None
        if steps is not None and steps[0] >= transpose_cost(shape, perm, dtype).cycles:
            steps = None  # the cost model sees no gain: no need to ask Vela
        if len(forms) == 1 and steps is None:
            _count(self.stats, "kept")  # nothing to gain
            return None
        cycles, fshape, fperm = self._cheapest_form(shape, perm, dtype, shared)
        if steps is not None:
            # The cost model picks the pair; Vela prices it, each step in the form it will be written in.
            (_, first), (mid, second) = steps[1]
            if self._cheapest_form(shape, first, dtype)[0] + self._cheapest_form(mid, second, dtype)[0] < cycles:
                _count(self.stats, "two_steps")
                return self._step(op, self._step(op, x, list(first), meta), list(second), meta)
        if (fshape, fperm) == (tuple(shape), tuple(perm)):
            _count(self.stats, "kept")
            return None
        if list(fshape) == shape:  # the same shape with the unit axes left in place
            _count(self.stats, "unit_axes_fixed")
            moved = super().call_operator(op, (x, list(fperm)), {}, meta, True)
            return super().call_operator(_VIEW, (moved, out_shape), {}, meta, True)
        _count(self.stats, "reduced_rank")
        flat = super().call_operator(_VIEW, (x, list(fshape)), {}, meta, True)
        moved = super().call_operator(op, (flat, list(fperm)), {}, meta, True)
        return super().call_operator(_VIEW, (moved, out_shape), {}, meta, True)
