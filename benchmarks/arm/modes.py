"""Ethos-U55: what the algebraic layout modes would buy on Vela 5.1, each measured on its own.

Run: .venv/bin/python -m benchmarks.arm.modes [--out benchmarks/results/arm_modes.md]

Each candidate mode is written as the TOSA it would lower to and compiled by Vela (ethos-u55-128, executorch's
U55 flags), next to what the graph does today, on the attention shapes of layout_solver/zoo/outside.py (DeiT:
3 heads x 66 tokens x 32; SegFormer: 2 x 64 x 32 attending to 16; Swin: 16 windows x 2 heads x 16 tokens x 16):

* MATMUL operand orientation: TOSA MATMUL reads B as (N, C, W) and Vela transposes B to (N, W, C) before
  every MatMul. Is the transpose that makes B (a k.transpose) merged with Vela's, so that feeding B
  "pre-transposed" saves one?
* Transposed product (C^T = B^T A^T): the same MatMul with H and W exchanged; does Vela price it differently?
  Vela runs one output column at a time: a product with fewer rows than columns (a decode token against its
  cache, a prefill shorter than the cache) is cheaper transposed. This is the MATMUL rule the solver has
  (layout_solver.arm.op_rules.MatMul), priced per shape by Vela; square products gain nothing.
* Fully-connected orientation: executorch lowers a linear layer to a 1x1 CONV2D, which writes its output
  channels innermost; the other orientation (y^T = W x^T) could only be a MATMUL with the weight as A.
* Slice fusion: Vela reads a SLICE straight into an elementwise consumer but copies it out before a
  TRANSPOSE; the solver prices that copy on a transition after a SLICE (layout_solver.arm.problem_builder).
* Head split as data movement: the (T, h, d) -> (h, T, d) TRANSPOSE written as h SLICEs + a CONCAT on a new
  outer axis (one move serving each head) against the TRANSPOSE.
* Two transposes in a row (what the write-back does now, cost_models.ethos_u55.two_step_transposes): Swin's
  per-window head split and window partition, one TRANSPOSE against the pair.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import tosa_serializer as ts

from benchmarks import harness
from cost_models import ethos_u55
from cost_models import vela as vela_probe
from cost_models.vela import run_vela, transpose_probe

INT8 = ts.DType.INT8


def _graph():
    return ts.TosaSerializer("", targetMajor=1, targetMinor=0, targetPatch=0, targetDraft=False)


def _op(graph, op, inputs, outputs, attribute: str, *args):
    attr = ts.TosaSerializerAttribute()
    getattr(attr, attribute)(*args)
    graph.addOperator(op, inputs, outputs, attr)


def _reshape(graph, source: str, shape: list[int], name: str):
    const = graph.addConst([len(shape)], ts.DType.SHAPE, shape, name=f"{name}_shape")
    out = graph.addIntermediate(shape, INT8)
    _op(graph, ts.Op.RESHAPE, [source, const.name], [out.name], "ReshapeAttribute")
    return out


def matmul_tosa(n: int, h: int, c: int, w: int, b_from_transpose: bool) -> bytes:
    """MATMUL (n, h, c) x (n, c, w); B is a graph input, or the TRANSPOSE of an (n, w, c) input."""
    if not b_from_transpose:
        return vela_probe.matmul_probe(n, h, c, w).serialize()
    graph = _graph()
    graph.addInputTensor(ts.TosaSerializerTensor("a", [n, h, c], INT8, data=None))
    graph.addInputTensor(ts.TosaSerializerTensor("bt", [n, w, c], INT8, data=None))
    b = graph.addIntermediate([n, c, w], INT8).name
    _op(graph, ts.Op.TRANSPOSE, ["bt"], [b], "TransposeAttribute", [0, 2, 1])
    zero_points = [graph.addConst([1], INT8, [0], name=z).name for z in ("a_zp", "b_zp")]
    out = graph.addIntermediate([n, h, w], ts.DType.INT32)
    _op(graph, ts.Op.MATMUL, ["a", b, *zero_points], [out.name], "MatMulAttribute")
    graph.addOutputTensor(out)
    return graph.serialize()


def conv1x1_tosa(tokens: int, c_in: int, c_out: int) -> bytes:
    """A linear layer as executorch lowers it: a 1x1 CONV2D over (1, 1, tokens, c_in), int32 out."""
    graph = _graph()
    graph.addInputTensor(ts.TosaSerializerTensor("x", [1, 1, tokens, c_in], INT8, data=None))
    weight = graph.addConst([c_out, 1, 1, c_in], INT8, [1] * (c_out * c_in), name="w").name
    bias = graph.addConst([c_out], ts.DType.INT32, [0] * c_out, name="b").name
    zero_points = [graph.addConst([1], INT8, [0], name=z).name for z in ("x_zp", "w_zp")]
    out = graph.addIntermediate([1, 1, tokens, c_out], ts.DType.INT32)
    _op(graph, ts.Op.CONV2D, ["x", weight, bias, *zero_points], [out.name], "Conv2dAttribute", [0, 0, 0, 0], [1, 1],
        [1, 1], False, ts.DType.INT32)  # fmt: skip
    graph.addOutputTensor(out)
    return graph.serialize()


def slice_then_tosa(shape, start, size, then: str) -> bytes:
    """SLICE of an int8 input read by a CLAMP (Vela fuses the slice into it) or by a TRANSPOSE of its last two
    axes (it cannot)."""
    graph = _graph()
    graph.addInputTensor(ts.TosaSerializerTensor("x", list(shape), INT8, data=None))
    bounds = [
        graph.addConst([len(shape)], ts.DType.SHAPE, list(v), name=n).name for n, v in (("st", start), ("sz", size))
    ]
    piece = graph.addIntermediate(list(size), INT8).name
    _op(graph, ts.Op.SLICE, ["x", *bounds], [piece], "SliceAttribute")
    if then == "clamp":
        out = graph.addIntermediate(list(size), INT8)
        _op(graph, ts.Op.CLAMP, [piece], [out.name], "ClampAttribute", [156], [100], ts.NanPropagationMode.PROPAGATE)
    else:
        perm = [*range(len(shape) - 2), len(shape) - 1, len(shape) - 2]
        out = graph.addIntermediate([size[p] for p in perm], INT8)
        _op(graph, ts.Op.TRANSPOSE, [piece], [out.name], "TransposeAttribute", perm)
    graph.addOutputTensor(out)
    return graph.serialize()


def slices_concat_tosa(shape: tuple[int, ...], axis: int) -> bytes:
    """TRANSPOSE moving `axis` to the front, written as one SLICE per index along it and a CONCAT on axis 0."""
    graph = _graph()
    graph.addInputTensor(ts.TosaSerializerTensor("input", list(shape), INT8, data=None))
    rest = [d for i, d in enumerate(shape) if i != axis]
    parts = []
    for j in range(shape[axis]):
        start, size = [0] * len(shape), list(shape)
        start[axis], size[axis] = j, 1
        consts = [
            graph.addConst([len(shape)], ts.DType.SHAPE, v, name=f"{k}{j}").name
            for k, v in (("start", start), ("size", size))
        ]
        piece = graph.addIntermediate(size, INT8).name
        _op(graph, ts.Op.SLICE, ["input", *consts], [piece], "SliceAttribute")
        parts.append(_reshape(graph, piece, [1, *rest], f"piece{j}").name)
    out = graph.addIntermediate([shape[axis], *rest], INT8)
    _op(graph, ts.Op.CONCAT, parts, [out.name], "ConcatAttribute", 0)
    graph.addOutputTensor(out)
    return graph.serialize()


def chain_tosa(shape: tuple[int, ...], steps) -> bytes:
    """TRANSPOSEs in a row, each written in its cheapest form (reshape, transpose, reshape) as the write-back does."""
    graph = _graph()
    graph.addInputTensor(ts.TosaSerializerTensor("input", list(shape), INT8, data=None))
    current, current_shape = "input", list(shape)
    for k, (step_shape, perm) in enumerate(steps):
        form = ethos_u55.transpose_cost(step_shape, perm)
        if list(form.shape) != current_shape:
            current = _reshape(graph, current, list(form.shape), f"in{k}").name
        moved = graph.addIntermediate([form.shape[p] for p in form.perm], INT8).name
        _op(graph, ts.Op.TRANSPOSE, [current], [moved], "TransposeAttribute", list(form.perm))
        current_shape = [step_shape[p] for p in perm]
        out = _reshape(graph, moved, current_shape, f"out{k}")
        current = out.name
    graph.addOutputTensor(out)
    return graph.serialize()


def vela(tosa: bytes) -> list[tuple[str, int]]:
    """Vela's NPU rows for a graph: (operator, cycles)."""
    with tempfile.TemporaryDirectory() as tmp:
        rows = run_vela(tosa, Path(tmp))
    return [(r["NNG Operator"], int(float(r["Op Cycles"]))) for r in rows if r["Target"] == "NPU"]


def _summary(rows: list[tuple[str, int]]) -> str:
    counts: dict[str, list[int]] = {}
    for name, cycles in rows:
        counts.setdefault(name, []).append(cycles)
    return ", ".join(f"{len(c)} {name} {sum(c):,}" for name, c in counts.items())


def main() -> None:
    parser = harness.parser(__doc__, "also write the table to this markdown file")
    args = parser.parse_args()
    cases = []
    for n, h, c, w, label in ((3, 66, 32, 66, "DeiT q.k^T"), (2, 64, 32, 16, "SegFormer q.k^T")):
        cases.append(
            (
                f"MATMUL operand: {label}",
                "B as given",
                matmul_tosa(n, h, c, w, False),
                "B via TRANSPOSE",
                matmul_tosa(n, h, c, w, True),
            )
        )
    for n, h, c, w, label in (
        (3, 66, 66, 32, "DeiT p.v"),
        (2, 64, 16, 32, "SegFormer p.v"),
        (4, 1, 32, 256, "decode q.k^T, 256-position cache"),
        (4, 1, 256, 32, "decode p.v, 256-position cache"),
        (4, 32, 32, 64, "32-token prefill q.k^T, 64-position cache"),
    ):
        cases.append(
            (
                f"transposed product: {label}",
                "C = A B",
                matmul_tosa(n, h, c, w, False),
                "C^T = B^T A^T",
                matmul_tosa(n, w, c, h, False),
            )
        )
    for tokens, c_in, c_out, label in ((64, 96, 96, "64 tokens x 96"), (1, 128, 512, "one token, 128 -> 512")):
        cases.append(
            (
                f"fully-connected orientation: {label}",
                "CONV2D 1x1 (y = x W^T)",
                conv1x1_tosa(tokens, c_in, c_out),
                "MATMUL (y^T = W x^T)",
                vela_probe.matmul_probe(1, c_out, c_in, tokens).serialize(),
            )
        )
    cases.append(
        (
            "slice fusion: decode cache [1, 2, 48, 32] -> [1, 2, 47, 32]",
            "SLICE -> CLAMP (fused)",
            slice_then_tosa((1, 2, 48, 32), (0, 0, 1, 0), (1, 2, 47, 32), "clamp"),
            "SLICE -> TRANSPOSE",
            slice_then_tosa((1, 2, 48, 32), (0, 0, 1, 0), (1, 2, 47, 32), "transpose"),
        )
    )
    for shape, label in (((66, 3, 32), "DeiT"), ((64, 2, 32), "SegFormer"), ((197, 6, 64), "ViT-S/16")):
        cases.append(
            (
                f"head split {shape}: {label}",
                "TRANSPOSE",
                transpose_probe(shape, (1, 0, 2)).serialize(),
                "SLICEs + CONCAT",
                slices_concat_tosa(shape, 1),
            )
        )
    for shape, perm, label in (
        ((16, 16, 2, 16), (0, 2, 1, 3), "Swin head split"),
        ((1, 4, 4, 4, 4, 32), (0, 1, 3, 2, 4, 5), "Swin window partition"),
    ):
        _, steps = ethos_u55.two_step_transposes(shape, perm)
        cases.append(
            (
                f"two steps {shape} {perm}: {label}",
                "one TRANSPOSE",
                transpose_probe(shape, perm).serialize(),
                "two TRANSPOSEs",
                chain_tosa(shape, steps),
            )
        )
    lines = [
        harness.provenance("ethos-u55-128, int8; cycles are Vela's per-layer Op Cycles on the NPU"),
        "",
        *harness.table(("mode", "today", "Vela rows", "cycles", "candidate", "Vela rows", "cycles", "change"), ()),
    ]
    for name, base_label, base, alt_label, alt in cases:
        a, b = vela(base), vela(alt)
        ca, cb = sum(c for _, c in a), sum(c for _, c in b)
        cells = (name, base_label, _summary(a), f"{ca:,}", alt_label, _summary(b), f"{cb:,}", f"{cb / ca - 1:+.0%}")
        lines.append(harness.row(cells))
        print(lines[-1], flush=True)
    harness.write(lines, args.out)


if __name__ == "__main__":
    main()
