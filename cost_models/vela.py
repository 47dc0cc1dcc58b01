"""Ask Vela (ethos-u-vela) what a single TOSA operator costs on Ethos-U55.

Builds a one-operator TOSA flatbuffer with tosa_serializer, compiles it with
Vela using executorch's Ethos-U55 flags, and reads Vela's per-layer CSV.
Results are cached on disk by (operator, shape, attributes, dtype, Vela version).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import tempfile
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

ACCELERATOR = "ethos-u55-128"
SYSTEM_CONFIG = "Ethos_U55_High_End_Embedded"
MEMORY_MODE = "Shared_Sram"
DEFAULT_CACHE = Path(os.environ.get("LAYOUT_SOLVER_VELA_CACHE", Path.home() / ".cache" / "layout-solver" / "vela"))


class VelaUnsupported(RuntimeError):
    """Vela cannot place this operator on the NPU as given."""


@dataclass(frozen=True)
class VelaMeasurement:
    """Vela's figures for one transpose: its NPU ops and cycles, cycles per row, and the Vela version."""

    shape: tuple[int, ...]
    perm: tuple[int, ...]
    dtype: str
    npu_ops: int  # rows of Vela's per-layer table that ran on the NPU
    cycles: int  # sum of their Op Cycles
    rows: tuple[tuple[str, int], ...]  # (NNG operator, cycles) per row
    vela_version: str


@cache
def vela_version() -> str:
    """The installed ethos-u-vela version (part of every cache key)."""
    return metadata.version("ethos-u-vela")


def _vela_ini() -> str:
    import ethosu

    root = Path(next(iter(ethosu.__path__)))
    return str(root / "config_files" / "Arm" / "vela.ini")


def transpose_tosa(shape: tuple[int, ...], perm: tuple[int, ...], dtype: str = "int8") -> bytes:
    """A TOSA 1.0 graph holding one TRANSPOSE of an input of `shape`."""
    import tosa_serializer as ts

    tosa_dtype = getattr(ts.DType, dtype.upper())
    graph = ts.TosaSerializer("", targetMajor=1, targetMinor=0, targetPatch=0, targetDraft=False)
    graph.addInputTensor(ts.TosaSerializerTensor("input", list(shape), tosa_dtype, data=None))
    out = graph.addIntermediate([shape[p] for p in perm], tosa_dtype)
    attr = ts.TosaSerializerAttribute()
    attr.TransposeAttribute(list(perm))
    graph.addOperator(ts.Op.TRANSPOSE, ["input"], [out.name], attr)
    graph.addOutputTensor(out)
    return graph.serialize()


def rescale_then_transpose_tosa(shape: tuple[int, ...], dtype_in: str, dtype_out: str) -> bytes:
    """RESCALE (per tensor) feeding a TRANSPOSE: Vela cannot fuse the RESCALE anywhere, so it runs standalone."""
    import tosa_serializer as ts

    din, dout = getattr(ts.DType, dtype_in.upper()), getattr(ts.DType, dtype_out.upper())
    graph = ts.TosaSerializer("", targetMajor=1, targetMinor=0, targetPatch=0, targetDraft=False)
    graph.addInputTensor(ts.TosaSerializerTensor("input", list(shape), din, data=None))
    consts = [
        graph.addConst([1], ts.DType.INT32, [1 << 30], name="multiplier"),
        graph.addConst([1], ts.DType.INT8, [30], name="shift"),
        graph.addConst([1], din, [0], name="input_zp"),
        graph.addConst([1], dout, [0], name="output_zp"),
    ]
    scaled = graph.addIntermediate(list(shape), dout)
    attr = ts.TosaSerializerAttribute()
    attr.RescaleAttribute(
        scale32=True,
        rounding_mode=ts.RoundingMode.SINGLE_ROUND,
        per_channel=False,
        input_unsigned=False,
        output_unsigned=False,
    )
    graph.addOperator(ts.Op.RESCALE, ["input"] + [c.name for c in consts], [scaled.name], attr)
    perm = list(range(len(shape) - 3)) + [len(shape) - 2, len(shape) - 3, len(shape) - 1]
    out = graph.addIntermediate([shape[p] for p in perm], dout)
    attr = ts.TosaSerializerAttribute()
    attr.TransposeAttribute(perm)
    graph.addOperator(ts.Op.TRANSPOSE, [scaled.name], [out.name], attr)
    graph.addOutputTensor(out)
    return graph.serialize()


def run_vela(tosa: bytes, workdir: Path) -> list[dict]:
    """Compile with Vela in-process; return the per-layer rows."""
    from ethosu.vela import vela

    path = workdir / "op.tosa"
    path.write_bytes(tosa)
    out = workdir / "out"
    args = [
        f"--accelerator-config={ACCELERATOR}",
        f"--config={_vela_ini()}",
        f"--system-config={SYSTEM_CONFIG}",
        f"--memory-mode={MEMORY_MODE}",
        "--verbose-performance",
        f"--output-dir={out}",
        str(path),
    ]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = vela.main(args)
        except RuntimeError as exc:
            raise VelaUnsupported(str(exc)) from exc
    csv_path = out / "op_per-layer.csv"
    if code not in (0, None) or not csv_path.exists():
        raise RuntimeError(f"vela failed (exit {code}) on {path}")
    with csv_path.open() as f:
        return list(csv.DictReader(f))


def measure_transpose(shape, perm, dtype: str = "int8", cache_dir: Path | None = DEFAULT_CACHE) -> VelaMeasurement:
    """Vela's cycles for TRANSPOSE(shape, perm) on ethos-u55-128 (disk-cached); raises VelaUnsupported when Vela
    rejects it.
    """
    shape, perm = tuple(int(d) for d in shape), tuple(int(p) for p in perm)
    npu = _npu_rows(["TRANSPOSE", shape, perm, dtype], lambda: transpose_tosa(shape, perm, dtype), cache_dir)
    return VelaMeasurement(shape, perm, dtype, len(npu), sum(c for _, c in npu), npu, vela_version())


def matmul_tosa(n: int, h: int, c: int, w: int, dtype: str = "int8") -> bytes:
    """A TOSA 1.0 graph holding one MATMUL of (n, h, c) by (n, c, w), both graph inputs, zero points 0."""
    import tosa_serializer as ts

    tosa_dtype = getattr(ts.DType, dtype.upper())
    graph = ts.TosaSerializer("", targetMajor=1, targetMinor=0, targetPatch=0, targetDraft=False)
    graph.addInputTensor(ts.TosaSerializerTensor("a", [n, h, c], tosa_dtype, data=None))
    graph.addInputTensor(ts.TosaSerializerTensor("b", [n, c, w], tosa_dtype, data=None))
    zero_points = [graph.addConst([1], tosa_dtype, [0], name=z).name for z in ("a_zp", "b_zp")]
    out = graph.addIntermediate([n, h, w], ts.DType.INT32)
    attr = ts.TosaSerializerAttribute()
    attr.MatMulAttribute()
    graph.addOperator(ts.Op.MATMUL, ["a", "b", *zero_points], [out.name], attr)
    graph.addOutputTensor(out)
    return graph.serialize()


def measure_matmul(n: int, h: int, c: int, w: int, dtype: str = "int8", cache_dir: Path | None = DEFAULT_CACHE) -> int:
    """Vela's NPU cycles for MATMUL (n, h, c) x (n, c, w) on ethos-u55-128 (disk-cached), the transpose Vela
    inserts for its second operand included; raises VelaUnsupported when Vela rejects it.

    Measured (Vela 5.1): the cost is not symmetric in h and w. Vela computes one output column at a time, so a
    product with few rows and many columns pays a per-column overhead: (4, 1, 32, 256) costs 76,544 cycles,
    its transpose (4, 256, 32, 1) 35,106.
    """
    shape = tuple(int(d) for d in (n, h, c, w))
    npu = _npu_rows(["MATMUL", shape, dtype], lambda: matmul_tosa(*shape, dtype), cache_dir)
    return sum(cycles for _, cycles in npu)


def slice_tosa(shape, start, size, dtype: str = "int8") -> bytes:
    """A TOSA 1.0 graph holding one SLICE of an input of `shape` (its result is the graph's output, so Vela
    must materialise it)."""
    import tosa_serializer as ts

    tosa_dtype = getattr(ts.DType, dtype.upper())
    graph = ts.TosaSerializer("", targetMajor=1, targetMinor=0, targetPatch=0, targetDraft=False)
    graph.addInputTensor(ts.TosaSerializerTensor("input", list(shape), tosa_dtype, data=None))
    bounds = [
        graph.addConst([len(shape)], ts.DType.SHAPE, list(v), name=n).name
        for n, v in (("start", start), ("size", size))
    ]
    out = graph.addIntermediate(list(size), tosa_dtype)
    attr = ts.TosaSerializerAttribute()
    attr.SliceAttribute()
    graph.addOperator(ts.Op.SLICE, ["input", *bounds], [out.name], attr)
    graph.addOutputTensor(out)
    return graph.serialize()


def measure_slice(shape, start, size, dtype: str = "int8", cache_dir: Path | None = DEFAULT_CACHE) -> int:
    """Vela's NPU cycles for a SLICE it cannot fuse into a consumer (a MemoryCopy), disk-cached; raises
    VelaUnsupported when Vela rejects it.

    Vela reads a slice straight into the input of the elementwise, CONCAT or compute op that consumes it,
    but copies it out first when a TRANSPOSE or RESHAPE reads it. Measured (Vela 5.1): a [1, 2, 47, 32] int8
    slice of [1, 2, 48, 32] costs 5,392 cycles on its own, a [64, 64, 1] int32 slice of [64, 64, 2] 131,284
    (an element at a time); fused into an ADD it costs nothing beyond the ADD.
    """
    shape, start, size = (tuple(int(d) for d in v) for v in (shape, start, size))
    npu = _npu_rows(["SLICE", shape, start, size, dtype], lambda: slice_tosa(shape, start, size, dtype), cache_dir)
    return sum(cycles for _, cycles in npu)


def pad_tosa(shape, padding, dtype: str = "int8") -> bytes:
    """A TOSA 1.0 graph holding one PAD of an input of `shape`; `padding` is (before, after) per axis, flattened."""
    import tosa_serializer as ts

    tosa_dtype = getattr(ts.DType, dtype.upper())
    graph = ts.TosaSerializer("", targetMajor=1, targetMinor=0, targetPatch=0, targetDraft=False)
    graph.addInputTensor(ts.TosaSerializerTensor("input", list(shape), tosa_dtype, data=None))
    pads = graph.addConst([len(padding)], ts.DType.SHAPE, list(padding), name="padding").name
    value = graph.addConst([1], tosa_dtype, [0], name="pad_const").name
    out = graph.addIntermediate([d + padding[2 * i] + padding[2 * i + 1] for i, d in enumerate(shape)], tosa_dtype)
    attr = ts.TosaSerializerAttribute()
    attr.PadAttribute()
    graph.addOperator(ts.Op.PAD, ["input", pads, value], [out.name], attr)
    graph.addOutputTensor(out)
    return graph.serialize()


def measure_pad(shape, padding, dtype: str = "int8", cache_dir: Path | None = DEFAULT_CACHE) -> int:
    """Vela's NPU cycles for PAD(shape, padding) (disk-cached); raises VelaUnsupported when Vela rejects it.

    Vela copies the input into the padded output and fills the borders, so the cost follows the physical
    order: measured (Vela 5.1), padding H and W of a 3-channel 64 x 64 int8 image costs several times more
    with the 3 channels innermost than with W innermost.
    """
    shape, padding = tuple(int(d) for d in shape), tuple(int(p) for p in padding)
    npu = _npu_rows(["PAD", shape, padding, dtype], lambda: pad_tosa(shape, padding, dtype), cache_dir)
    return sum(cycles for _, cycles in npu)


def _npu_rows(key: list, tosa, cache_dir: Path | None) -> tuple[tuple[str, int], ...]:
    """(NNG operator, cycles) of every NPU row Vela compiles the graph `tosa()` into, cached on disk under `key`
    (plus the Vela version and accelerator)."""
    digest = hashlib.sha1(json.dumps([*key, vela_version(), ACCELERATOR]).encode()).hexdigest()
    cached = cache_dir / f"{digest}.json" if cache_dir else None
    if cached and cached.exists():
        return tuple((name, int(cycles)) for name, cycles in json.loads(cached.read_text())["rows"])
    with tempfile.TemporaryDirectory() as tmp:
        rows = run_vela(tosa(), Path(tmp))
    npu = tuple((r["NNG Operator"], int(float(r["Op Cycles"]))) for r in rows if r["Target"] == "NPU")
    if cached:
        cached.parent.mkdir(parents=True, exist_ok=True)
        cached.write_text(json.dumps({"key": [*key, vela_version(), ACCELERATOR], "rows": npu}))
    return npu
