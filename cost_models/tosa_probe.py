"""Small TOSA 1.0 graphs written from plain data: the probes a cost model compiles to ask a target's compiler
what a handful of operators cost.

A `ProbeBuilder` collects tensors (graph inputs, constants with their data, intermediates) and operators
(TOSA op name, input and output tensors, the serializer attribute and its arguments); `build()` freezes them
into a `ProbeGraph`, whose `key` names its content exactly (constant data by digest) so an answer can be
cached without serializing the graph, and whose `serialize()` writes the flatbuffer. Constants are written
first, then the operators in the order they were added, so operator `k` is TOSA operator
`len(constants) + k`: the index a compiler's per-layer report points back to.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field

import numpy as np

_DTYPES = ("bool", "int4", "int8", "int16", "int32", "int48", "fp16", "bf16", "fp32", "shape")
_NUMPY = {"bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32, "int48": np.int64,
          "fp16": np.float16, "fp32": np.float32, "shape": np.int64}  # fmt: skip


@dataclass(frozen=True)
class ProbeTensor:
    """A tensor of the probe: its shape and dtype; `data` for a constant, `is_input` for a graph input."""

    shape: tuple[int, ...]
    dtype: str
    data: np.ndarray | None = field(default=None, compare=False)
    is_input: bool = False

    def digest(self) -> str:
        """Shape, dtype, role and (for a constant) the data's hash."""
        data = "" if self.data is None else hashlib.sha1(np.ascontiguousarray(self.data).tobytes()).hexdigest()
        return f"{self.shape}:{self.dtype}:{int(self.is_input)}:{data}"


@dataclass(frozen=True)
class ProbeOp:
    """One TOSA operator: `op` ("ADD"), input and output tensor indices, and the attribute as the name of a
    `TosaSerializerAttribute` method with its keyword arguments (None: the op's own, "AddAttribute")."""

    op: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    attribute: str | None = None
    arguments: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True)
class ProbeGraph:
    """A frozen probe: tensors, operators, graph outputs."""

    tensors: tuple[ProbeTensor, ...]
    ops: tuple[ProbeOp, ...]
    outputs: tuple[int, ...]

    @property
    def constants(self) -> list[int]:
        """Indices of the constant tensors (written first, one CONST operator each)."""
        return [i for i, t in enumerate(self.tensors) if t.data is not None]

    def tosa_index(self, op: int) -> int:
        """The TOSA operator index of operator `op` (constants come first, one CONST operator each)."""
        return len(self.constants) + op

    @property
    def key(self) -> str:
        """A digest of everything the serialized graph holds."""
        text = json.dumps(
            [
                [t.digest() for t in self.tensors],
                [[o.op, o.inputs, o.outputs, o.attribute, [[k, _plain(v)] for k, v in o.arguments]] for o in self.ops],
                self.outputs,
            ]
        )
        return hashlib.sha1(text.encode()).hexdigest()

    def serialize(self) -> bytes:
        """The TOSA 1.0 flatbuffer."""
        import tosa_serializer as ts

        graph = ts.TosaSerializer("", targetMajor=1, targetMinor=0, targetPatch=0, targetDraft=False)
        names = [f"t{i}" for i in range(len(self.tensors))]
        for i, t in enumerate(self.tensors):
            if t.is_input:
                graph.addInputTensor(ts.TosaSerializerTensor(names[i], list(t.shape), _ts_dtype(t.dtype), data=None))
        for i in self.constants:
            t = self.tensors[i]
            graph.addConst(list(t.shape), _ts_dtype(t.dtype), _const_values(t), name=names[i])
        made = {}
        for o in self.ops:
            for i in o.outputs:
                t = self.tensors[i]
                made[i] = graph.addIntermediate(list(t.shape), _ts_dtype(t.dtype))
                names[i] = made[i].name
            attr = ts.TosaSerializerAttribute()
            getattr(attr, o.attribute or _default_attribute(o.op))(**{k: _ts_value(v) for k, v in o.arguments})
            graph.addOperator(getattr(ts.Op, o.op), [names[i] for i in o.inputs], [names[i] for i in o.outputs], attr)
        for i in self.outputs:
            graph.addOutputTensor(made[i])
        return graph.serialize()


class ProbeBuilder:
    """Collects a probe's tensors and operators; `op()` returns the index of the operator it added."""

    def __init__(self):
        self.tensors: list[ProbeTensor] = []
        self.ops: list[ProbeOp] = []
        self.outputs: list[int] = []

    def _tensor(self, tensor: ProbeTensor) -> int:
        if tensor.dtype not in _DTYPES:
            raise ValueError(f"unknown probe dtype {tensor.dtype!r}")
        self.tensors.append(tensor)
        return len(self.tensors) - 1

    def input(self, shape, dtype: str) -> int:
        """A graph input (an activation the probe reads)."""
        return self._tensor(ProbeTensor(tuple(int(d) for d in shape), dtype, is_input=True))

    def const(self, data, dtype: str, shape=None) -> int:
        """A constant with its values (`shape` defaults to the data's)."""
        array = np.asarray(data, dtype=_NUMPY.get(dtype, np.int64))
        shape = tuple(int(d) for d in (array.shape if shape is None else shape))
        return self._tensor(ProbeTensor(shape, dtype, array.reshape(shape) if shape else array.reshape(-1)))

    def op(self, name: str, inputs, shape, dtype: str, attribute: str | None = None, **arguments) -> tuple[int, int]:
        """Add operator `name` writing a new tensor of `shape`, `dtype`; returns (operator index, tensor index)."""
        out = self._tensor(ProbeTensor(tuple(int(d) for d in shape), dtype))
        self.ops.append(ProbeOp(name, tuple(inputs), (out,), attribute, tuple(sorted(arguments.items()))))
        return len(self.ops) - 1, out

    def output(self, tensor: int) -> None:
        """Make `tensor` a graph output (a result Vela must write to memory)."""
        if tensor not in self.outputs:
            self.outputs.append(tensor)

    def shape_of(self, tensor: int) -> tuple[int, ...]:
        """The shape of tensor `tensor`."""
        return self.tensors[tensor].shape

    def build(self) -> ProbeGraph:
        """The frozen probe; every operator's output that nothing reads becomes a graph output."""
        read = {i for o in self.ops for i in o.inputs}
        outputs = list(self.outputs) + [
            i for o in self.ops for i in o.outputs if i not in read and i not in self.outputs
        ]
        return ProbeGraph(tuple(self.tensors), tuple(self.ops), tuple(outputs))


def clamp_through(b: ProbeBuilder, tensor: int, shape, dtype: str) -> int:
    """A CLAMP over the whole int8/int16 range reading `tensor`: a stand-in op that changes nothing (it makes a
    probe's operand an intermediate, as in a program, rather than a graph input); returns its result."""
    info = np.iinfo(_NUMPY[dtype])
    width = info.bits // 8
    return b.op("CLAMP", [tensor], shape, dtype, "ClampAttribute",
                min_val=int(info.min + 1).to_bytes(width, "little", signed=True),
                max_val=int(info.max).to_bytes(width, "little", signed=True),
                nan_mode="NanPropagationMode.PROPAGATE")[1]  # fmt: skip


def _default_attribute(op: str) -> str:
    """The serializer's attribute method of an op with no arguments ("REDUCE_SUM" -> "ReduceSumAttribute")."""
    return {"MATMUL": "MatMulAttribute", "INTDIV": "IntDivAttribute"}.get(
        op, "".join(w.capitalize() for w in op.split("_")) + "Attribute"
    )


def _ts_dtype(dtype: str):
    import tosa_serializer as ts

    return getattr(ts.DType, dtype.upper())


def _const_values(tensor: ProbeTensor):
    if tensor.dtype == "int48":  # the serializer takes int48 as Python ints
        return [int(v) for v in tensor.data.reshape(-1)]
    return tensor.data


def _plain(value):
    """An attribute argument as JSON-able data (for the key)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)


def _ts_value(value):
    """Attribute arguments given by name ("DType.INT32", "RoundingMode.SINGLE_ROUND") become serializer enums."""
    import tosa_serializer as ts

    if isinstance(value, str) and value.count(".") == 1 and value.split(".")[0] in ("DType", "RoundingMode",
                                                                                    "NanPropagationMode", "ResizeMode"):  # fmt: skip
        enum, member = value.split(".")
        return getattr(getattr(ts, enum), member)
    if isinstance(value, tuple):
        return list(value)
    if isinstance(value, (bytes, bytearray)):
        return list(value)
    return value
