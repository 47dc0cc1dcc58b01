"""XNNPACK (CPU) costs: what a layout conversion costs the delegate, in microseconds.

Inside an XNNPACK delegate every layout conversion (stock's `_to_copy(memory_format=...)` stub, or a
`permute_copy` written in its physical form) runs as one XNNPACK `Transpose (ND)` operator over the tensor's
bytes; every other op costs the same in either dim order (its kernel is NHWC-only, NCHW-only, or layout-blind),
so a program's layout cost is the sum of its conversions.

A conversion is priced by its *class*, read off its physical permutation once size-1 dims are dropped and
runs of dims that stay adjacent are merged (what XNNPACK's transpose does itself before it picks a kernel):

* "copy": nothing moves (a permute whose physical form is the identity: a plain copy);
* "block": the innermost dim stays innermost (contiguous runs are moved whole);
* "transpose": the innermost dim changes (an element-wise gather).

Each class costs what its measured curve says at the tensor's KiB, per element size (1 byte: int8, 4: fp32) and
thread count: linear between measured sizes (made non-decreasing), from zero below the smallest, proportional
above the largest. A curve, not one rate: the cost per byte steps up as a tensor leaves each cache level. No conversion
costs less than `OP_FLOOR_US`, one more operator's run. The
numbers are a *profile* (`XnnpackProfile`, JSON): the shipped one was measured on the project's own CPU by
`layout-solver calibrate xnnpack` (per-op times from ETDump); a user's device gets its own file from the same
command, never an assumption.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

KINDS = ("copy", "block", "transpose")
# Every conversion is one more XNNPACK operator, whose run (dispatch included) costs at least the one tick ETDump
# resolves: a curve reads 0 below it (measured: swapping block moves for "free" small transposes and adding "free"
# copies made ViT-like programs 2-6% slower), so no conversion is priced under it.
OP_FLOOR_US = 1.0
# The profile `solver_layouts()` and the reports use when none is named: measured on the project's CI machine.
DEFAULT_PROFILE = "ci-x86"
BUILT_IN = {"ci-x86": "xnnpack_ci_x86.json"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Curve(_Strict):
    """Microseconds at measured sizes (KiB ascending, us non-decreasing), interpolated between them."""

    kib: list[float] = Field(min_length=1)
    us: list[float] = Field(min_length=1)

    def at(self, kib: float) -> float:
        """Microseconds at `kib` KiB: interpolated between measured sizes, from 0 below, proportional above."""
        if kib >= self.kib[-1]:
            return self.us[-1] * kib / self.kib[-1]
        return float(np.interp(kib, [0.0, *self.kib], [0.0, *self.us]))


class Measurement(_Strict):
    """One timed conversion: its logical shape, element size, physical permutation, thread count, class and
    the median of its per-run ETDump times."""

    shape: list[int]
    elem_bytes: int
    perm: list[int]
    threads: int
    kind: str
    us: float = Field(ge=0)


class XnnpackProfile(_Strict):
    """A CPU's conversion costs, measured (`measured`) by `command` on `device`."""

    schema_version: int = 1
    device: str
    measured: bool
    command: str = ""
    # threads -> element bytes -> class -> curve (JSON keys are strings)
    curves: dict[str, dict[str, dict[str, Curve]]]
    measurements: list[Measurement] = Field(default_factory=list)

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


def conversion_us(profile: XnnpackProfile, shape, dtype: str | int, perm, threads: int = 1) -> float:
    """Microseconds for XNNPACK to permute a tensor of logical `shape` (physically, by `perm`) of `dtype` (a
    name in DTYPE_BYTES, or the element size in bytes) on `threads` threads."""
    elem = dtype if isinstance(dtype, int) else element_bytes(str(dtype).removeprefix("torch."))
    curve = profile.curve(threads, elem, conversion_kind(shape, perm))
    return max(OP_FLOOR_US, curve.at(_product(shape) * elem / 1024))


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


@lru_cache(maxsize=16)
def _load_file(path: str, stamp: float) -> XnnpackProfile:
    return XnnpackProfile.model_validate_json(Path(path).read_text())


def load_profile(profile: str | Path | XnnpackProfile | None = None) -> XnnpackProfile:
    """A profile: a built-in name ("ci-x86"), a file written by `layout-solver calibrate xnnpack`, or None (the
    default). OSError names a file that does not exist or does not hold a profile."""
    if isinstance(profile, XnnpackProfile):
        return profile
    name = str(profile or DEFAULT_PROFILE)
    if name in BUILT_IN:
        text = resources.files("cost_models").joinpath("data", BUILT_IN[name]).read_text()
        return XnnpackProfile.model_validate_json(text)
    path = Path(name)
    if not path.is_file():
        raise OSError(f"XNNPACK cost profile {name!r}: no such file (built-in: {', '.join(BUILT_IN)})")
    try:
        return _load_file(str(path.resolve()), path.stat().st_mtime)
    except ValueError as exc:
        raise OSError(f"XNNPACK cost profile {name!r} is not a profile: {exc}") from exc


def profile_digest(profile: XnnpackProfile) -> str:
    """What a cache key records of the profile that priced a result."""
    return hashlib.sha256(profile.model_dump_json().encode()).hexdigest()[:16]
