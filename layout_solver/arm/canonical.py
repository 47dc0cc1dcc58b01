"""Write every transpose in its cheapest form before it becomes a TOSA TRANSPOSE.

A permute of shape S by p moves exactly the same bytes as the canonical
transpose (unit dims dropped, input axes that stay adjacent merged), framed
by two RESHAPEs, which Vela folds away. Vela prices the canonical form far
lower: the ViT's rank-5 (0,2,3,1,4) of [1,36,3,3,64] is 10 NPU ops as given
and 1 op as (1,0,2) of [36,9,64]. A permute that is an identity in memory
becomes a single reshape.

The rewrite is exact (tests check it against numpy on random shapes and
permutations) and local, so it runs after the solver's assignment or, on its
own, after the stock propagation passes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from executorch.backends.arm._passes.arm_pass import ArmPass
from executorch.exir.dialects._ops import ops as exir_ops

from cost_models.ethos_u55 import canonical_transpose, is_identity

_PERMUTES = (exir_ops.edge.aten.permute_copy.default, exir_ops.edge.aten.permute.default)
_VIEW = exir_ops.edge.aten.view_copy.default


class CanonicalTransposePass(ArmPass):
    _passes_required_after: set = set()

    def __init__(self, stats: dict | None = None):
        super().__init__()
        self.stats = stats if stats is not None else {}

    def call_operator(self, op, args, kwargs, meta, updated=False):
        if op not in _PERMUTES:
            return super().call_operator(op, args, kwargs, meta, updated)
        x, perm = args[0], [int(p) for p in args[1]]
        shape = [int(d) for d in x.data.shape]
        rank = len(shape)
        perm = [p % rank for p in perm] if rank else perm
        out_shape = [shape[p] for p in perm]
        cshape, cperm = canonical_transpose(shape, perm)
        if is_identity(cperm):
            self.stats["to_reshape"] = self.stats.get("to_reshape", 0) + 1
            return super().call_operator(_VIEW, (x, out_shape), {}, meta, True)
        if len(cperm) == rank:
            return super().call_operator(op, args, kwargs, meta, updated)
        self.stats["reduced_rank"] = self.stats.get("reduced_rank", 0) + 1
        flat = super().call_operator(_VIEW, (x, list(cshape)), {}, meta, True)
        moved = super().call_operator(op, (flat, list(cperm)), {}, meta, True)
        return super().call_operator(_VIEW, (moved, out_shape), {}, meta, True)


@contextlib.contextmanager
def canonical_transposes(stats: dict | None = None) -> Iterator[dict]:
    """Inside this block, Ethos-U lowering writes every transpose in its cheapest form.

    The pass goes in just before InsertConstShapesPass: after the stock
    view/permute fusers (which would fold the reshapes back) and early enough
    that the new reshapes get their constant shape operands.
    """
    from executorch.backends.arm._passes.insert_const_shapes import InsertConstShapesPass

    from layout_solver.arm.measure import inserted_passes

    stats = {} if stats is None else stats
    with inserted_passes(before={InsertConstShapesPass: [CanonicalTransposePass(stats)]}):
        yield stats
