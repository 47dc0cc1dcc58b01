"""Reading TOSA flatbuffers: every operator with what the Ethos-U transpose accounting needs, and a
graph's inputs (to feed the reference model)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from cost_models import ethos_u55

_NUMPY = {"INT8": np.int8, "INT16": np.int16, "INT32": np.int32, "BOOL": np.bool_, "FP32": np.float32}


def tosa_inputs(path: Path) -> list[tuple[str, list[int], type]]:
    """(name, shape, numpy dtype) of each input of a TOSA flatbuffer; raises ValueError if unreadable."""
    import tosa_serializer as ts

    graph = ts.TosaSerializer("")
    if not graph.loadTosaFlatbuffer(str(path)):
        raise ValueError(f"cannot read TOSA flatbuffer {path}")
    block = graph.regions[0].basicBlocks[0]
    specs = []
    for name in block.inputs:
        tensor = block.tensors[name]
        specs.append((name, list(tensor.shape), _NUMPY[tensor.dtype.name]))
    return specs


def tosa_ops(tosa: bytes) -> list[ethos_u55.TosaOp]:
    """Every operator of a TOSA flatbuffer, with what the U55 transpose accounting needs."""
    from tosa.DType import DType
    from tosa.Op import Op
    from tosa.ReduceSumAttribute import ReduceSumAttribute
    from tosa.TosaGraph import TosaGraph
    from tosa.TransposeAttribute import TransposeAttribute

    names = {v: k for k, v in vars(Op).items() if not k.startswith("_")}
    dtypes = {v: k.lower() for k, v in vars(DType).items() if not k.startswith("_")}
    text = lambda b: b.decode() if isinstance(b, bytes) else b
    graph = TosaGraph.GetRootAs(tosa, 0)
    found = []
    for r in range(graph.RegionsLength()):
        region = graph.Regions(r)
        for b in range(region.BlocksLength()):
            block = region.Blocks(b)
            tensors = {text(block.Tensors(t).Name()): block.Tensors(t) for t in range(block.TensorsLength())}
            for o in range(block.OperatorsLength()):
                op = block.Operators(o)
                inputs = tuple(text(op.Inputs(i)) for i in range(op.InputsLength()))
                outputs = tuple(text(op.Outputs(i)) for i in range(op.OutputsLength()))
                shape = lambda t, tensors=tensors: (
                    tuple(int(d) for d in tensors[t].ShapeAsNumpy())
                    if t in tensors and not tensors[t].ShapeIsNone()
                    else ()
                )
                first = tensors.get(inputs[0]) if inputs else None
                extra = {}
                if op.Op() in (Op.TRANSPOSE, Op.REDUCE_SUM):
                    attr = TransposeAttribute() if op.Op() == Op.TRANSPOSE else ReduceSumAttribute()
                    attr.Init(op.Attribute().Bytes, op.Attribute().Pos)
                    extra = (
                        {"perm": tuple(int(p) for p in attr.PermsAsNumpy())}
                        if op.Op() == Op.TRANSPOSE
                        else {"axis": int(attr.Axis())}
                    )
                found.append(
                    ethos_u55.TosaOp(
                        names.get(op.Op(), str(op.Op())),
                        inputs,
                        outputs,
                        tuple(shape(t) for t in inputs),
                        dtypes.get(first.Type(), "other") if first is not None else "other",
                        output_shapes=tuple(shape(t) for t in outputs),
                        **extra,
                    )
                )
    return found


# Ops whose integer operand indexes another operand's dim: (op, indices operand, values operand, indexed dim).
_INDEXING = {"GATHER": (1, 0, 1), "SCATTER": (1, 0, 1)}
_PASS_THROUGH = ("RESHAPE", "CAST", "TRANSPOSE", "IDENTITY", "TILE", "SLICE")  # values kept, first operand


def index_bounds(tosa: bytes) -> dict[str, int]:
    """Graph tensors used as GATHER / SCATTER indices (traced back through reshapes, casts and transposes),
    each with the size of the dim it indexes: inputs outside [0, size) are not a program's valid inputs (the
    reference model aborts on them)."""
    ops = tosa_ops(tosa)
    producer = {out: op for op in ops for out in op.outputs}
    bounds: dict[str, int] = {}
    for op in ops:
        if op.op not in _INDEXING:
            continue
        indices, values, dim = _INDEXING[op.op]
        name = op.inputs[indices]
        while name in producer and producer[name].op in _PASS_THROUGH:
            name = producer[name].inputs[0]
        size = op.input_shapes[values][dim]
        bounds[name] = min(bounds.get(name, size), size)
    return bounds
