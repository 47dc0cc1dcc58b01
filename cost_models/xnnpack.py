"""XNNPACK (CPU) costs: what a layout conversion costs the delegate, and what the whole program's run costs, in
microseconds.

Inside an XNNPACK delegate every layout conversion (stock's `_to_copy(memory_format=...)` stub, or a
`permute_copy` written in its physical form) runs as one XNNPACK `Transpose (ND)` operator over the tensor's
bytes; every other op costs the same in either dim order (its kernel is NHWC-only, NCHW-only, or layout-blind),
so a program's layout cost is the sum of its conversions.

A conversion is priced by its *class*, read off its physical permutation once size-1 dims are dropped and
runs of dims that stay adjacent are merged (what XNNPACK's transpose does itself before it picks a kernel):

* "copy": nothing moves (a permute whose physical form is the identity: a plain copy);
* "block": the innermost dim stays innermost (contiguous runs are moved whole);
* "transpose": the innermost dim changes (an element-wise gather).

Each class costs what its measured curve says at the tensor's KiB (a transpose at its KiB with its two transposed
dims rounded up to the kernel's tiles, `tiled_kib`), per element size (1 byte: int8, 4: fp32) and thread count:
linear between measured sizes (made non-decreasing), from zero below the smallest, proportional above the largest.
A curve, not one rate: the cost per byte steps up as a tensor leaves each cache level. No conversion costs less
than `OP_FLOOR_US`, one more operator's run. The
numbers are a *profile* (`XnnpackProfile`, JSON): the shipped one was measured on the project's own CPU by
`layout-solver calibrate xnnpack` (per-op times from ETDump); a user's device gets its own file from the same
command, never an assumption.

The same profile predicts a program's run time (`run_us`): every op the program runs costs what its class's
curve says at its work (`OP_CLASSES`: multiply-accumulates for convolutions and matrix products, elements
otherwise; the CPU's portable kernels each their own class, by the dim order they run in where it matters),
plus what running it costs beyond its kernel (`Overheads`: per call, per delegate, per XNNPACK operator, per
CPU kernel), fitted on probe programs of many tiny ops. Layout conversions are priced by their curves alone here
(the per-operator overhead already counts their run). An op's probe read its weights from cache; in a program they
were last read a run ago, so each op with weights also pays its weights' share of what the profile's `streaming`
curve says a run spends, beyond the cache, reading the program's weights in all (nothing while they fit it).
"""

from __future__ import annotations

import hashlib
import platform
from collections import defaultdict
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import NamedTuple

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

KINDS = ("copy", "block", "transpose")
# Every conversion is one more XNNPACK operator, whose run (dispatch included) costs at least the one tick ETDump
# resolves: a curve reads 0 below it (measured: swapping block moves for "free" small transposes and adding "free"
# copies made ViT-like programs 2-6% slower), so no conversion is priced under it.
OP_FLOOR_US = 1.0
# The profile `solver_layouts()` and the reports use when none is named: measured on the project's first CI machine.
# One fixed profile, never the host's: the same exported program gives the same bytes on any machine it is lowered
# on; the device it will run on is named (a built-in, a file from `calibrate xnnpack`, or "host").
DEFAULT_PROFILE = "ci-x86"
# The project's machines (their CPUs differ from one to the next: an AMD EPYC, an Intel Xeon), each measured by
# `layout-solver calibrate xnnpack --threads 1,2`.
BUILT_IN = {"ci-x86": "xnnpack_ci_x86.json", "ci-x86-xeon": "xnnpack_ci_x86_xeon.json"}
# The name of the built-in profile measured on the CPU this process runs on (`host_profile_name`): what a run time
# measured here is predicted with. A profile of another CPU predicts another machine (the EPYC's profile priced
# resnet8's two-thread run on this Xeon at 502 us, measured 201).
HOST = "host"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _interpolated(points: list[float], us: list[float], x: float) -> float:
    """Microseconds at `x`: interpolated between measured points, from 0 below, proportional above."""
    if x >= points[-1]:
        return us[-1] * x / points[-1]
    return float(np.interp(x, [0.0, *points], [0.0, *us]))


class Curve(_Strict):
    """Microseconds at measured sizes (KiB ascending, us non-decreasing), interpolated between them."""

    kib: list[float] = Field(min_length=1)
    us: list[float] = Field(min_length=1)

    def at(self, kib: float) -> float:
        """Microseconds at `kib` KiB: interpolated between measured sizes, from 0 below, proportional above."""
        return _interpolated(self.kib, self.us, kib)


class WorkCurve(_Strict):
    """An op class's microseconds at measured amounts of work (ascending; its class says the unit)."""

    work: list[float] = Field(min_length=1)
    us: list[float] = Field(min_length=1)

    def at(self, work: float) -> float:
        """Microseconds at `work`: interpolated between measured amounts, from 0 below, proportional above."""
        return _interpolated(self.work, self.us, work)


# An op's class, and what its work counts: its curve is read at that amount.
OP_CLASSES = {
    "conv": "multiply-accumulates",  # a dense (or grouped) convolution
    "dwconv:TAPS": "multiply-accumulates",  # a depthwise convolution of TAPS kernel taps ("dwconv:9": 3x3)
    "gemm": "multiply-accumulates",  # linear, addmm, mm
    "bmm": "multiply-accumulates",  # batched matrix multiply
    "softmax": "elements",
    "elementwise": "elements",  # add, mul, clamp, relu, ... (of the result)
    "transcendental": "elements",  # gelu, sigmoid, tanh, exp, ... (of the result)
    "pool": "elements",  # max / average pooling, mean (of the input)
    "copy": "elements",  # cat, slice, clone (of the result)
    "copy@strided": "elements",  # a cat or slice whose contiguous runs are short (STRIDED_RUN_BYTES)
    "copy@pad": "elements",  # a constant pad (of the result), and its rows (OP_UNITS)
    "resize": "elements",  # bilinear upsampling (of the result)
    "convert": "elements",  # an int8 program's quantize or dequantize XNNPACK runs (priced as "elementwise")
}
# Classes whose kernel also pays per unit of a second count, beyond its curve of work: XNNPACK's softmax runs three
# passes per row (max, exp and sum, scale), each a microkernel call; its batched product packs and runs each matrix
# apart. Short rows and small matrices are dominated by that cost (16-element rows: 5x the curve's time), so such
# an op costs `XnnpackProfile.unit_us` per unit beyond its curve, fitted on probes made of many short rows / small
# matrices (`layout_solver.targets.xnnpack.calibrate_ops`). XNNPACK's constant pad calls its kernel once per row
# of its output, a row being the innermost stored dim merged with the unpadded dims next to it
# (`reshape_constant_pad_nd`): NCHW padded in H and W, C x (H + 2) rows of W; NHWC, (H + 2) x (W + 2) rows of C
# (3 channels of 64 x 64: 43 us against 2; about 10 ns a row either way).
OP_UNITS = {"softmax": "rows", "bmm": "matrices", "copy@pad": "rows"}
PAD_COPY = "copy@pad"
# XNNPACK copies a concatenation's inputs (and a slice) run by run, a run being what is contiguous in memory on
# both sides: one whole input for NCHW along channels, C elements per pixel for NHWC. Runs shorter than this pay per
# run (int8 unet_like with a concatenation of 32- and 64-byte runs over 32 x 32 pixels: its Copy operators 43 us per
# run, against 6 in stock's order) and are priced by their own curve; a profile without one prices them as "copy"
# (`XnnpackProfile.op_us` drops the "@" variant).
STRIDED_RUN_BYTES = 512
STRIDED_COPY = "copy@strided"


def copy_class(run_bytes: float) -> str:
    """The class of a concatenation or slice whose shortest contiguous run is `run_bytes` long."""
    return STRIDED_COPY if run_bytes < STRIDED_RUN_BYTES else "copy"


# A CPU (portable) kernel's class is "cpu:" and its op name ("cpu:native_layer_norm.default"), "@channels_last"
# added where it reads a channels-last tensor; an op the profile has no curve for is priced as CPU_FALLBACK.
CPU_PREFIX = "cpu:"
CPU_FALLBACK = "cpu:other"


class Overheads(_Strict):
    """What running a program costs beyond its kernels, in microseconds: per call of the method (`call_us`),
    per delegate call, per XNNPACK operator (XNNPACK sets every operator up again on each call, dearer for a GEMM
    than for an add: `xnnpack_op_us_by_class`, by the op class's family, "dwconv" for "dwconv:9"; `xnnpack_op_us`
    for a family without its own) and per CPU kernel (dispatch, and what a tick of ETDump hides), and per KiB of
    the program's inputs and outputs (copied in and out)."""

    call_us: float = Field(ge=0)
    delegate_us: float = Field(ge=0)
    xnnpack_op_us: float = Field(ge=0)
    cpu_op_us: float = Field(ge=0)
    io_us_per_kib: float = Field(ge=0)
    xnnpack_op_us_by_class: dict[str, float] = Field(default_factory=dict)
    # Beyond one thread: what the first parallel operator after the pool's workers fell asleep pays for waking
    # them; the op curves hold none of it.
    pool_wake_us: float = Field(default=0.0, ge=0)
    # How long the workers spin for new work before they sleep (pthreadpool spins a fixed count of pauses, then
    # waits on a futex): an operator that splits across the pool after the calling thread ran alone for longer
    # than this (CPU kernels, small operators XNNPACK runs without the pool, `splits_across_pool`) pays
    # `pool_wake_us`, and so does the first of a run whose tail and head did (ci-x86: none at 18 us of CPU
    # kernels between two delegates, the wake-up at 24 us and beyond). None, a profile measured before it was:
    # every delegate call pays the wake-up.
    pool_spin_us: float | None = Field(default=None, ge=0)
    # What a run spends beyond its kernels' ETDump events in proportion to them (microseconds per kernel
    # microsecond): fitted with the I/O term on the single-op probes, whose run beyond their one kernel grows with
    # the kernel's size (8-15% of a large convolution or matrix product here), not with any count of operators.
    kernel_fraction: float = Field(default=0.0, ge=0)

    def xnnpack_op(self, op_class: str) -> float:
        """One XNNPACK operator's overhead, by its class's family."""
        return self.xnnpack_op_us_by_class.get(op_family(op_class), self.xnnpack_op_us)

    def counted_us(self, ops: list[PredictedOp], delegates: int, io_kib: float) -> float:
        """What a run of `ops` costs beyond its kernels by count: the call, each of its `delegates`, each XNNPACK
        operator and each CPU kernel, and its `io_kib` of inputs and outputs (not the thread pool's wake-ups nor
        the share in proportion to the kernels)."""
        return (self.call_us + self.delegate_us * delegates + self.io_us_per_kib * io_kib
                + sum(self.xnnpack_op(op.op_class) if op.in_delegate else self.cpu_op_us for op in ops))  # fmt: skip


def op_family(op_class: str) -> str:
    """An op class without its variant: "dwconv:9" -> "dwconv", "conversion:block" -> "conversion"."""
    return op_class.split(":")[0].split("@")[0]


class Measurement(_Strict):
    """One timed conversion: its logical shape, element size, physical permutation, thread count, class and
    the median of its per-run ETDump times."""

    shape: list[int]
    elem_bytes: int
    perm: list[int]
    threads: int
    kind: str
    us: float = Field(ge=0)
    # Whether the probe was made to read the transpose kernel's tiles (a transposed dim a few elements long), not
    # its class's curve.
    tile_probe: bool = False


class GemmShape(NamedTuple):
    """The matrix product XNNPACK runs a convolution or fully-connected op as: `rows` of output (pixels, each group
    apart), `taps` kernel taps, `k` input channels per tap and group, `n` output channels per group."""

    rows: int
    taps: int
    k: int
    n: int


# XNNPACK packs a GEMM's weights in tiles of its microkernel: each tap's input channels rounded up to a multiple of
# kr, the output channels to one of nr, and the kernel runs the padding as work. Which microkernel a CPU gets (so
# kr and nr) is measured (`XnnpackProfile.packing`): on this EPYC an int8 convolution of 3 input channels runs at
# 3.5x below its neighbours' rate per multiply-add, as if it had 8.
PACKED_FAMILIES = ("conv", "gemm")


def packed_work(gemm: GemmShape, tiles: tuple[int, int] | list[int]) -> float:
    """The multiply-adds a GEMM's kernel runs with its weights packed in `tiles` (kr, nr)."""
    kr, nr = tiles
    return float(gemm.rows * gemm.taps * -(-gemm.k // kr) * kr * -(-gemm.n // nr) * nr)


def work_packed(op_class: str, work: float, gemm: GemmShape | None, tiles: tuple[int, int] | None) -> float:
    """The work an op of `op_class` is priced by on its curve: its GEMM's packed multiply-adds where it runs as one
    and the tiles are known, else `work`."""
    if gemm is not None and tiles and op_family(op_class) in PACKED_FAMILIES:
        return packed_work(gemm, tiles)
    return work


class OpMeasurement(_Strict):
    """One timed probe op: its class, work, element size, thread count and ETDump's microseconds for it."""

    op_class: str
    work: float
    elem_bytes: int
    threads: int
    us: float = Field(ge=0)
    probe: str = ""
    units: float = Field(default=0.0, ge=0)  # its OP_UNITS count (rows, matrices), where its class has one
    # Whether the probe was made to measure the per-unit cost (many short rows / small matrices), not the curve.
    unit_probe: bool = False
    gemm: GemmShape | None = None  # the GEMM it runs as (a convolution or matrix product); `work` is unpacked
    # Whether the probe was made to read the GEMM packing tiles (channels off any tile), not its class's curve.
    tile_probe: bool = False
    # Where the probe is a chain of products that reads its weights from wherever a program's weights of this
    # many KiB sit (`streaming`), not a point of its class's curve: the chain's weights in all. 0 otherwise.
    footprint_kib: float = Field(default=0.0, ge=0)


class XnnpackProfile(_Strict):
    """A CPU's conversion costs and (schema 2) its op costs and overheads, measured (`measured`) by `command` on
    `device`."""

    schema_version: int = 2
    device: str
    measured: bool
    command: str = ""
    # threads -> element bytes -> class -> curve (JSON keys are strings)
    curves: dict[str, dict[str, dict[str, Curve]]]
    measurements: list[Measurement] = Field(default_factory=list)
    # threads -> element bytes -> op class -> curve; threads -> overheads. Empty in a schema-1 profile, which
    # prices conversions only.
    op_curves: dict[str, dict[str, dict[str, WorkCurve]]] = Field(default_factory=dict)
    overheads: dict[str, Overheads] = Field(default_factory=dict)
    op_measurements: list[OpMeasurement] = Field(default_factory=list)
    # threads -> the reference program's microseconds (the speed every op time is stated at;
    # layout_solver.targets.xnnpack.runtime.reference_program)
    reference_us: dict[str, float] = Field(default_factory=dict)
    # threads -> element bytes -> class -> microseconds per unit of its OP_UNITS count, beyond its curve; a class
    # without one (or a profile measured before it) pays its curve alone.
    unit_us: dict[str, dict[str, dict[str, float]]] = Field(default_factory=dict)
    # threads -> element bytes -> (kr, nr): the tiles XNNPACK packs a GEMM's weights in, fitted on the probes
    # (`cost_models.xnnpack_fit.packing`); the conv and gemm curves are by packed work. Empty in a profile measured
    # before the tile probes, which prices every GEMM unpacked.
    packing: dict[str, dict[str, tuple[int, int]]] = Field(default_factory=dict)
    # threads -> what a run spends reading a program's weights of the curve's KiB in all from where they sit
    # between two runs, beyond reading them from cache as the op probes did (`cost_models.xnnpack_fit.streaming`).
    # Empty in a profile measured before the weight-streaming probes, which prices every op's weights as cached.
    streaming: dict[str, Curve] = Field(default_factory=dict)
    # threads -> element bytes -> (tile along the output's innermost dim, tile along the input's): XNNPACK's
    # transpose kernel moves whole tiles, so a transpose is priced at its bytes with its two transposed dims
    # rounded up to them (`tiled_kib`; fitted by `cost_models.xnnpack_fit.transpose_tiles`). Empty in a profile
    # measured before the narrow transpose probes, which prices every transpose by its bytes.
    transpose_tiles: dict[str, dict[str, tuple[int, int]]] = Field(default_factory=dict)

    @property
    def predicts_run_time(self) -> bool:
        """Whether the profile has op curves and overheads (schema 2, measured by `calibrate xnnpack`)."""
        return bool(self.op_curves and self.overheads)

    def op_us(
        self,
        op_class: str,
        work: float,
        elem_bytes: int,
        threads: int,
        units: float = 0.0,
        gemm: GemmShape | None = None,
    ) -> float:
        """Microseconds of one op of `op_class` doing `work` (its kernel alone) over `units` of its OP_UNITS count,
        run as `gemm` where it is a convolution or product (its work then packed as the profile's table says),
        at the nearest measured thread count: the class's curve at the nearest measured element size, else its
        fp32 curve (an int8 program's softmax or batched product runs in float), its variant nearest a numeric one
        ("dwconv:25" -> "dwconv:49") first, its order dropped for a CPU kernel, plus that table's `unit_us` per
        unit; a class without any curve is priced as CPU_FALLBACK (a CPU kernel) or "elementwise"."""
        threads_key = _nearest(self.op_curves, threads)
        by_threads = self.op_curves[threads_key]
        elem_keys = [_nearest(by_threads, elem_bytes), _nearest(by_threads, 4)]
        fallback = CPU_FALLBACK if op_class.startswith(CPU_PREFIX) else "elementwise"
        for wanted in (op_class, fallback):
            for elem_key in elem_keys:
                by_class = by_threads[elem_key]
                for name in (wanted, wanted.split("@")[0], _nearest_variant(by_class, wanted)):
                    if name in by_class:
                        per_unit = self.unit_us.get(threads_key, {}).get(elem_key, {}).get(name, 0.0)
                        tiles = self.packing.get(threads_key, {}).get(elem_key)
                        return by_class[name].at(work_packed(name, work, gemm, tiles)) + per_unit * units
        raise ValueError(f"profile {self.device!r} has no {fallback!r} curve to price {op_class!r}")

    def streaming_us_per_kib(self, threads: int, footprint_kib: float) -> float:
        """What reading one KiB of an op's weights costs beyond the cache, in a program whose weights are
        `footprint_kib` in all (0 without a streaming curve)."""
        if not self.streaming or footprint_kib <= 0:
            return 0.0
        return self.streaming[_nearest(self.streaming, threads)].at(footprint_kib) / footprint_kib

    def tiles(self, threads: int, elem_bytes: int) -> tuple[int, int] | None:
        """The transpose tiles at the nearest measured thread count and element size (None where not measured)."""
        if not self.transpose_tiles:
            return None
        by_elem = self.transpose_tiles[_nearest(self.transpose_tiles, threads)]
        return by_elem[_nearest(by_elem, elem_bytes)]

    def overhead(self, threads: int) -> Overheads:
        """The overheads at the nearest measured thread count."""
        return self.overheads[_nearest(self.overheads, threads)]

    def curve(self, threads: int, elem_bytes: int, kind: str) -> Curve:
        """The curve of the nearest measured thread count and element size (ValueError if the class is missing)."""
        by_threads = self.curves[_nearest(self.curves, threads)]
        by_kind = by_threads[_nearest(by_threads, elem_bytes)]
        if kind not in by_kind:
            raise ValueError(f"profile {self.device!r} has no {kind!r} conversions")
        return by_kind[kind]

    @property
    def thread_counts(self) -> list[int]:
        """The thread counts the profile was measured at, ascending."""
        return sorted(int(t) for t in self.curves)


def _nearest_variant(by_class: dict[str, object], op_class: str) -> str:
    """For a class with a numeric variant ("dwconv:25"), the measured variant nearest it ("dwconv:49")."""
    base, _, variant = op_class.partition(":")
    if not variant.isdigit():
        return op_class
    measured = {
        int(k.partition(":")[2]): k for k in by_class if k.startswith(f"{base}:") and k.partition(":")[2].isdigit()
    }
    return measured[min(measured, key=lambda v: (abs(v - int(variant)), v))] if measured else op_class


def _nearest(table: dict[str, object], wanted: int) -> str:
    return min(table, key=lambda k: (abs(int(k) - wanted), int(k)))


def normalized(shape: list[int] | tuple[int, ...], perm: list[int] | tuple[int, ...]) -> tuple[list[int], list[int]]:
    """The (input shape, permutation) a transpose reduces to: size-1 dims dropped, input dims that stay adjacent
    and in order in the output merged. `perm[k]` is the input dim output dim k reads."""
    keep = [d for d in range(len(shape)) if shape[d] != 1]
    order = [d for d in perm if d in keep]
    groups: list[list[int]] = []
    for d in order:
        if groups and keep.index(d) == keep.index(groups[-1][-1]) + 1:
            groups[-1].append(d)
        else:
            groups.append([d])
    by_start = sorted(groups, key=lambda g: g[0])
    merged_shape = [_product(shape[d] for d in g) for g in by_start]
    merged_perm = [by_start.index(g) for g in groups]
    return merged_shape, merged_perm


def conversion_kind(shape, perm) -> str:
    """The class ("copy", "block" or "transpose") of a physical permutation of a tensor of `shape`."""
    _, merged_perm = normalized(shape, perm)
    if len(merged_perm) <= 1 or merged_perm == list(range(len(merged_perm))):
        return "copy"
    return "block" if merged_perm[-1] == len(merged_perm) - 1 else "transpose"


def transposed_dims(shape, perm) -> tuple[int, int]:
    """A transpose's two transposed dims as XNNPACK's kernel tiles them, after `normalized`: (the length of the
    input dim that becomes the output's innermost, the length of the input's innermost)."""
    merged_shape, merged_perm = normalized(shape, perm)
    return merged_shape[merged_perm[-1]], merged_shape[-1]


def tiled_kib(shape, elem_bytes: int, perm, tiles: tuple[int, int] | None) -> float:
    """The KiB a conversion of stored `shape` (by `perm`) is priced at: its bytes; for a transpose whose kernel's
    `tiles` are known, with each of its two transposed dims (`transposed_dims`) rounded up to a multiple of its
    tile (an NCHW image of 3 channels to NHWC: each pixel's 3 bytes moved as a 16-byte tile row)."""
    kib = _product(shape) * elem_bytes / 1024
    if not tiles or conversion_kind(shape, perm) != "transpose":
        return kib
    (out_inner, in_inner), (out_tile, in_tile) = transposed_dims(shape, perm), tiles
    padded = -(-out_inner // out_tile) * out_tile * -(-in_inner // in_tile) * in_tile
    return kib * padded / (out_inner * in_inner)


def conversion_kernel_us(profile: XnnpackProfile, shape, elem_bytes: int, perm, threads: int) -> float:
    """Microseconds of XNNPACK's kernel permuting a tensor of stored `shape` by `perm`: its class's curve at its
    tiled KiB (`tiled_kib`)."""
    curve = profile.curve(threads, elem_bytes, conversion_kind(shape, perm))
    return curve.at(tiled_kib(shape, elem_bytes, perm, profile.tiles(threads, elem_bytes)))


def conversion_us(profile: XnnpackProfile, shape, dtype: str | int, perm, threads: int = 1) -> float:
    """Microseconds for XNNPACK to permute a tensor of stored `shape` (by `perm`) of `dtype` (a name in
    DTYPE_BYTES, or the element size in bytes) on `threads` threads, never under OP_FLOOR_US."""
    elem = dtype if isinstance(dtype, int) else element_bytes(str(dtype).removeprefix("torch."))
    return max(OP_FLOOR_US, conversion_kernel_us(profile, shape, elem, perm, threads))


class PredictedOp(NamedTuple):
    """One op a program runs, as the run-time model sees it: its class (a layout conversion's is "conversion:"
    and its conversion class, its work the KiB it moves), work, element size, and whether it runs inside an
    XNNPACK delegate (else it is a CPU kernel)."""

    op_class: str
    work: float
    elem_bytes: int
    in_delegate: bool
    key: str = ""  # a CPU kernel call's digest, where its time was measured (`run_us`'s `measured`)
    units: float = 0.0  # its class's OP_UNITS count (a softmax's rows, a batched product's matrices)
    gemm: GemmShape | None = None  # the GEMM a convolution or product runs as
    weight_kib: float = 0.0  # the constant weights it reads (a convolution's or fully-connected product's)
    # A conversion's stored shape and physical permutation, which its tiles are read by (`conversion_kernel_us`);
    # without them it is priced by its KiB (`work`) alone.
    moved: tuple[tuple[int, ...], tuple[int, ...]] | None = None
    # Its place in the program: how many delegate calls run before it (a delegate's operator: before its own
    # call; -1: not known).
    segment: int = -1


CONVERSION_PREFIX = "conversion:"


def run_us(
    profile: XnnpackProfile,
    ops: list[PredictedOp],
    delegates: int,
    threads: int,
    io_kib: float = 0.0,
    measured: dict[str, float] | None = None,
) -> dict[str, float]:
    """A program's predicted microseconds per run, by part: each op class's kernels ("conversion" for every
    layout conversion and permute; a kernel call whose time was `measured`, by its key, at that time; an op with
    weights also its share of the program's weight streaming, `XnnpackProfile.streaming_us_per_kib`), "overhead"
    (the call, each of its `delegates`, the thread pool's wake-ups (`pool_wakes`, from what runs on the calling
    thread alone between two operators that split across the pool, by each op's `segment`), each XNNPACK
    operator and each CPU kernel, its `io_kib` of inputs and outputs, the share of its kernels' time that runs
    beyond them) and "total"."""
    overheads = profile.overhead(threads)
    measured = measured or {}
    # Each op's weights were last read a whole run ago, every other op's since: where a program's weights outgrow the
    # cache, each op reads its own from memory, where the probes that priced it read them from cache.
    streaming = profile.streaming_us_per_kib(threads, sum(op.weight_kib for op in ops))
    out: dict[str, float] = {}
    steps: list[PoolStep] = []  # what each op holds the calling thread for, for `pool_wakes`
    for op in ops:
        if op.key in measured:
            part, us = op.op_class, measured[op.key]
        elif op.op_class.startswith(CONVERSION_PREFIX):
            part = "conversion"
            if op.moved is not None:
                us = conversion_kernel_us(profile, op.moved[0], op.elem_bytes, op.moved[1], threads)
            else:
                us = profile.curve(threads, op.elem_bytes, op.op_class.removeprefix(CONVERSION_PREFIX)).at(op.work)
        else:
            part, us = op.op_class, profile.op_us(op.op_class, op.work, op.elem_bytes, threads, op.units, op.gemm)
            us += streaming * op.weight_kib
        out[part] = out.get(part, 0.0) + us
        per_op = overheads.xnnpack_op(op.op_class) if op.in_delegate else overheads.cpu_op_us
        steps.append(PoolStep(op.segment, op.in_delegate, us + per_op, splits_across_pool(op)))
    kernels = sum(out.values())
    out["overhead"] = (overheads.counted_us(ops, delegates, io_kib)
                       + overheads.pool_wake_us * pool_wakes(overheads, steps, delegates)
                       + overheads.kernel_fraction * kernels)  # fmt: skip
    out["total"] = sum(out.values())
    return out


# XNNPACK runs an elementwise operator (unary, binary, Convert) of at most this many bytes of output on the
# calling thread, without the thread pool: on ci-x86 at 2 threads, after 200 us of a CPU kernel, an add of one
# row of 16 to 4,096 fp32 elements, or of 2-64 rows (a bias), read no wake-up and the product after it paid it;
# an add of 8,192 elements paid it itself (ETDump per event: benchmarks/results/xnnpack_pool_inline.md).
INLINE_ELEMENTWISE_BYTES = 16 * 1024
INLINE_FAMILIES = ("elementwise", "transcendental", "convert")


def splits_across_pool(op: PredictedOp) -> bool:
    """Whether XNNPACK hands `op` to the thread pool, waking its workers where they fell asleep: not a CPU kernel
    or a small elementwise operator (`INLINE_ELEMENTWISE_BYTES`); any other, a reshape too (llama_decode's first
    Static Reshape of a delegate read 1.5-7 us at 2 threads against 0 at 1, `benchmarks.xnnpack.event_timeline`)."""
    if not op.in_delegate:
        return False
    return not (op_family(op.op_class) in INLINE_FAMILIES and op.work * op.elem_bytes <= INLINE_ELEMENTWISE_BYTES)


class PoolStep(NamedTuple):
    """What one op holds the calling thread for: its place (`PredictedOp.segment`), whether it runs in a
    delegate, its microseconds with its overhead, and whether it splits across the pool (`splits_across_pool`)."""

    segment: int
    in_delegate: bool
    us: float
    splits: bool


def pool_wakes(overheads: Overheads, steps: list[PoolStep], delegates: int) -> int:
    """How many of a run's operators find the thread pool's workers asleep: each that splits across the pool
    after more than `pool_spin_us` of the run on the calling thread alone since the last one did (CPU kernels,
    operators run without the pool, delegate calls), the first after the previous run's tail and the call's own
    overhead too (the paired timings run a program after its twin, whose tail is its own). Where a delegate's
    operators have no `segment` (its call's place not known), each delegate call counts as one operator that
    splits. Every call pays, where the profile has no spin time."""
    if delegates == 0 or overheads.pool_wake_us == 0:
        return 0
    if overheads.pool_spin_us is None:
        return delegates
    placed = all(step.segment >= 0 for step in steps if step.in_delegate)
    cpu: dict[int, list[PoolStep]] = defaultdict(list)
    inside: dict[int, list[PoolStep]] = defaultdict(list)
    for step in steps:
        (inside if step.in_delegate else cpu)[step.segment].append(step)
    run: list[tuple[float, bool]] = []  # (microseconds, splits) in the order the program runs them
    for segment in range(delegates + 1):
        run += [(step.us, False) for step in cpu[segment]]
        if segment < delegates:
            run.append((overheads.delegate_us, False))
            run += [(step.us, step.splits) for step in inside[segment]] if placed else [(0.0, True)]
    last = max((i for i, (_, splits) in enumerate(run) if splits), default=None)
    if last is None:
        return 0
    idle, wakes = sum(us for us, _ in run[last + 1 :]) + overheads.call_us, 0
    for us, splits in run:
        if splits:
            wakes, idle = wakes + (idle > overheads.pool_spin_us), 0.0
        else:
            idle += us
    return wakes


def element_bytes(dtype: str) -> int:
    """Bytes per element of a dtype name ("float32", "int8", "bfloat16"); 4 for a name numpy does not know."""
    if dtype == "bfloat16":
        return 2
    try:
        return int(np.dtype(dtype).itemsize)
    except TypeError:
        return 4


def _product(dims) -> int:
    out = 1
    for d in dims:
        out *= int(d)
    return out


@cache
def _built_in(name: str) -> XnnpackProfile:
    return XnnpackProfile.model_validate_json(
        resources.files("cost_models").joinpath("data", BUILT_IN[name]).read_text()
    )


@lru_cache(maxsize=16)
def _load_file(path: str, stamp: float) -> XnnpackProfile:
    return XnnpackProfile.model_validate_json(Path(path).read_text())


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else the platform's word for it."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def measured_on(profile: XnnpackProfile, cpu: str) -> bool:
    """Whether `profile` was measured on a CPU of model `cpu` (`calibrate` writes "<machine> (<cpu model>)")."""
    return profile.device.endswith(f"({cpu})")


def host_profile_name(cpu: str | None = None) -> str:
    """The built-in profile measured on `cpu` (default: this machine's). OSError names the CPU where none was,
    and the command that measures one."""
    cpu = cpu or cpu_model()
    for name in BUILT_IN:
        if measured_on(load_profile(name), cpu):
            return name
    raise OSError(f"no built-in XNNPACK profile was measured on this CPU ({cpu}); measure one with "
                  f"`layout-solver calibrate xnnpack --out FILE` and name the file")  # fmt: skip


def profile_name(profile: str | Path | None) -> str:
    """What `load_profile` reads for `profile`: a built-in's name ("host" resolved to this CPU's) or a file's path."""
    name = str(profile or DEFAULT_PROFILE)
    return host_profile_name() if name == HOST else name


def load_profile(profile: str | Path | XnnpackProfile | None = None) -> XnnpackProfile:
    """A profile: a built-in name ("ci-x86"), "host" (the built-in measured on this CPU), a file written by
    `layout-solver calibrate xnnpack`, or None (the default). OSError names a file that does not exist or does not
    hold a profile, or a host no built-in profile was measured on."""
    if isinstance(profile, XnnpackProfile):
        return profile
    name = profile_name(profile)
    if name in BUILT_IN:
        return _built_in(name)
    path = Path(name)
    if not path.is_file():
        raise OSError(f"XNNPACK cost profile {name!r}: no such file (built-in: {', '.join(BUILT_IN)})")
    try:
        return _load_file(str(path.resolve()), path.stat().st_mtime)
    except ValueError as exc:
        raise OSError(f"XNNPACK cost profile {name!r} is not a profile: {exc}") from exc


def remeasured(base: XnnpackProfile, new: XnnpackProfile) -> XnnpackProfile:
    """`base` with every thread count `new` measured taken from `new` (each thread count's curves, overheads and
    measurements are stated at its own reference speed, so the others stay valid); `base`'s command and `new`'s
    both recorded. ValueError where the two were measured on different CPUs."""
    if base.device != new.device:
        raise ValueError(f"cannot merge profiles of two CPUs: {base.device!r} and {new.device!r}")
    fresh = set(new.reference_us) | set(new.curves)

    def merged(old: dict, newer: dict) -> dict:
        return {**{t: v for t, v in old.items() if t not in fresh}, **newer}

    def kept(items: list) -> list:
        return [m for m in items if str(m.threads) not in fresh]

    return new.model_copy(update={
        "command": f"{base.command}; then threads {','.join(sorted(fresh))} re-measured by: {new.command}",
        "curves": merged(base.curves, new.curves),
        "measurements": kept(base.measurements) + new.measurements,
        "op_curves": merged(base.op_curves, new.op_curves),
        "overheads": merged(base.overheads, new.overheads),
        "op_measurements": kept(base.op_measurements) + new.op_measurements,
        "reference_us": merged(base.reference_us, new.reference_us),
        "unit_us": merged(base.unit_us, new.unit_us),
        "packing": merged(base.packing, new.packing),
        "streaming": merged(base.streaming, new.streaming),
        "transpose_tiles": merged(base.transpose_tiles, new.transpose_tiles),
    })  # fmt: skip


def profile_digest(profile: XnnpackProfile) -> str:
    """What a cache key records of the profile that priced a result."""
    return hashlib.sha256(profile.model_dump_json().encode()).hexdigest()[:16]
