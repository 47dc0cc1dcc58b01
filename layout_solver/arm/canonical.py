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
from executorch.exir.pass_base import PassResult
from torch.fx import Node

from cost_models.ethos_u55 import is_identity, materialisations
from graph_io.fx import create_like, dtype_name, fake_like, shape_of
from layout_solver.arm.op_rules import read_by_windows_only

_PERMUTES = (exir_ops.edge.aten.permute_copy.default, exir_ops.edge.aten.permute.default)
_VIEW = exir_ops.edge.aten.view_copy.default


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

    def __init__(self, stats: dict | None = None, pricing=None):
        super().__init__()
        self.stats = stats if stats is not None else {}
        self.pricing = pricing  # an ArmPricing (default: Vela for executorch's default ethos-u55-128 spec)

    def call(self, graph_module):
        if self.pricing is None:
            from layout_solver.arm.pricing import default_vela_pricing

            self.pricing = default_vela_pricing()
        # Edited in place (no ExportPass retrace, a whole-graph cost): only permutes change, and each new
        # node's tensor metadata is its input's with the new shape.
        graph = graph_module.graph
        permutes = [n for n in graph.nodes if n.op == "call_function" and n.target in _PERMUTES]
        shared = {n: len(n.args[0].users) > 1 for n in permutes}  # decided on the graph as given
        readers = {n: n if read_by_windows_only(n) else None for n in permutes}
        # the permute is its input's only reader: Ethos-U85 may write it as the output of the op computing it
        writers = {n: None if shared[n] else (n.args[0], tuple(range(len(shape_of(n.args[0].meta["val"])))))
                   for n in permutes}  # fmt: skip
        modified = False
        for node in permutes:
            perm = [int(p) for p in node.args[1]]
            written = self._write(
                graph,
                node,
                node.args[0],
                perm,
                shared[node],
                split=True,
                read_by=readers[node],
                written_by=writers[node],
            )
            if written is not None:
                node.replace_all_uses_with(written)
                graph.erase_node(node)
                modified = True
        if modified:
            graph.lint()  # the pass manager recompiles a modified graph module
        return PassResult(graph_module, modified)

    def _cycles(self, shape, perm, dtype: str, read_by: Node | None = None, written_by=None) -> float:
        from cost_models.vela import VelaUnsupported

        try:
            return self.pricing.as_given(shape, perm, dtype, read_by, written_by).cycles
        except VelaUnsupported:
            return float("inf")

    def _cheapest_form(
        self, shape, perm, dtype: str, shared: bool = False, read_by: Node | None = None, written_by=None
    ) -> tuple[float, tuple, tuple]:
        """The cheapest materialisation of TRANSPOSE(shape, perm), priced by Vela: (cycles, shape, perm); the
        form as given on a tie. `shared`: the input has other readers, so a form with a reshape in front also
        pays the memory copy Vela makes of that reshape. `read_by`: the permute, where only convolutions or
        pooling read it (the form as given is priced with them); `written_by`: (its input, identity) where the
        transpose is that input's only reader (every form reading the input's shape is priced as its producer's
        output; see ArmPricing.transpose)."""
        copy = self.pricing.copy(math.prod(shape), dtype) if shared else 0.0
        given = (tuple(shape), tuple(perm))
        priced = [
            (self._cycles(s, p, dtype, read_by if (tuple(s), tuple(p)) == given else None,
                          written_by if tuple(s) == given[0] else None)
             + (copy if list(s) != list(shape) else 0.0), i, s, p)
            for i, (s, p) in enumerate(materialisations(shape, perm))
        ]  # fmt: skip
        cycles, _, shape, perm = min(priced)
        return cycles, shape, perm

    @staticmethod
    def _emit(graph, template: Node, target, x: Node, arg: list, shape: list[int]) -> Node:
        """A new node target(x, arg) before `template`, with its metadata (quantization parameters, debug
        handles) and a tensor of `shape`."""
        node = create_like(graph, template, target, (x, list(arg)), keep_val=False)
        node.meta["val"] = fake_like(x.meta["val"], shape)
        return node

    def _step(self, graph, template: Node, x: Node, perm: list[int]) -> Node:
        """One transpose of a two-step write, itself in its cheapest single form."""
        written = self._write(graph, template, x, perm, shared=False, split=False)
        if written is not None:
            return written
        shape = shape_of(x.meta["val"])
        return self._emit(graph, template, template.target, x, perm, [shape[p] for p in perm])

    def _write(
        self,
        graph,
        template: Node,
        x: Node,
        perm: list[int],
        shared: bool,
        split: bool,
        read_by: Node | None = None,
        written_by=None,
    ) -> Node | None:
        """The rewritten permute of `x` by `perm` (new nodes before `template`), or None to keep it as it is.
        `shared`: x has other readers, so a reshape in front of the transpose would be a memory copy. `read_by`:
        the permute, where only convolutions or pooling read it; `written_by`: (x, identity), where the permute is
        x's only reader."""
        shape = shape_of(x.meta["val"])
        rank = len(shape)
        perm = [p % rank for p in perm] if rank else perm
        out_shape = [shape[p] for p in perm]
        forms = materialisations(shape, perm)
        if len(forms) > 1 and is_identity(forms[1][1]):
            _count(self.stats, "to_reshape")
            return self._emit(graph, template, _VIEW, x, out_shape, out_shape)
        dtype = dtype_name(x.meta["val"])
        if dtype not in ("int8", "int16", "int32"):
            _count(self.stats, "kept")
            return None
        steps = self.pricing.two_steps(shape, perm, dtype) if split and not shared else None
        if len(forms) == 1 and steps is None:
            _count(self.stats, "kept")  # nothing to gain
            return None
        cycles, fshape, fperm = self._cheapest_form(shape, perm, dtype, shared, read_by, written_by)
        if steps is not None and steps[0] < cycles:  # the pair the pricing prices transitions with
            (_, first), (_, second) = steps[1]
            _count(self.stats, "two_steps")
            return self._step(graph, template, self._step(graph, template, x, list(first)), list(second))
        if (fshape, fperm) == (tuple(shape), tuple(perm)):
            _count(self.stats, "kept")
            return None
        op = template.target
        if list(fshape) == shape:  # the same shape with the unit axes left in place
            _count(self.stats, "unit_axes_fixed")
            moved = self._emit(graph, template, op, x, fperm, [shape[p] for p in fperm])
            return self._emit(graph, template, _VIEW, moved, out_shape, out_shape)
        _count(self.stats, "reduced_rank")
        flat = self._emit(graph, template, _VIEW, x, fshape, fshape)
        moved = self._emit(graph, template, op, flat, fperm, [fshape[p] for p in fperm])
        return self._emit(graph, template, _VIEW, moved, out_shape, out_shape)
