"""Vulkan costs: layout transitions (clone dispatches) and op modes, in microseconds.

A representation is (storage, memory layout), written "TEXTURE_3D:TENSOR_CHANNELS_PACKED".
Pure functions of shapes, dtypes and representations. The numbers come from a
*profile* (a JSON file, `VulkanProfile`):

* `data/vulkan_v1.json`, "mobile-gpu": a parametric model of a mid-range mobile
  GPU whose parameters are assumptions, not measurements (`measured: false`);
* `data/vulkan_lavapipe.json`: measured on Mesa lavapipe by
  `layout-solver calibrate vulkan` (the device and the command are in the file);
* any file the user writes with that command on their own device.

A measured profile prices a transition by its (source, target) pair and an op
mode by the op's class and its output representation, each as a fixed
overhead plus a rate per MiB; what it did not measure falls back to the
parametric model.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
from collections.abc import Iterator
from functools import lru_cache
from importlib import resources
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy.optimize import nnls

MIB = 1024 * 1024
DTYPE_BYTES = {
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int32": 4,
    "int64": 8,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "bool": 1,
}

_PACKED_DIM = {
    "TENSOR_WIDTH_PACKED": 0,
    "TENSOR_HEIGHT_PACKED": 1,
    "TENSOR_CHANNELS_PACKED": 2,
    "PACKED_INT8_4W4C": 2,
    "PACKED_INT8_4H4W": 0,
    "PACKED_INT8_4W": 0,
    "PACKED_INT8_4C1W": 2,
    "PACKED_INT8_CONV2D": 2,
}
BUILT_IN = {"mobile-gpu": "vulkan_v1.json", "lavapipe": "vulkan_lavapipe.json"}
# The one profile that prices a report or a query when none is named. The solver's default objective is
# not this profile but every profile (`default_profiles`, `layout_solver.core.robust`).
DEFAULT_PROFILE = "mobile-gpu"
# The name that asks for every profile at once (the solver's default), and where users add their own.
ALL_PROFILES = "default"
PROFILES_DIR_ENV = "LAYOUT_SOLVER_VULKAN_PROFILES"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Parameter(_Strict):
    """One parameter of the parametric fallback, with what it means."""

    value: float = Field(ge=0)
    meaning: str = ""


class Linear(_Strict):
    """overhead_us + us_per_mib * MiB + us_per_slice * texture depth + us_per_mflop * MFLOP
    + us_per_operand_mib * operand MiB + us_per_krow * thousand rows + us_per_flat_slice * flat slices,
    fitted on `points` measurements.

    Thousand rows only for row-wise reductions over the last dim (`ROW_REDUCTIONS`): their shaders give a
    row to an invocation, so they pay per row more than per byte (measured on lavapipe: a layer_norm over
    [1, 256, 48] takes three times one over [1, 64, 256], which holds more bytes).
    MFLOP and operand MiB only for contractions (linear, matmul): they do work the output size hides, and a
    product with few rows (a classifier head, one decode token) is bound by reading its weight or second
    operand, not by its arithmetic (measured on lavapipe: a [1, 512] x [512, 1000] linear runs at a tenth
    of the MFLOP rate of a square one).
    Flat slices only for a texture one texel high (`flat_slices`): lavapipe pays ten times as much per
    slice there as in a taller texture of as many slices.
    """

    overhead_us: float = Field(ge=0)
    us_per_mib: float = Field(ge=0)
    us_per_slice: float = Field(0.0, ge=0)
    us_per_mflop: float = Field(0.0, ge=0)
    us_per_operand_mib: float = Field(0.0, ge=0)
    us_per_krow: float = Field(0.0, ge=0)
    us_per_flat_slice: float = Field(0.0, ge=0)
    points: int = 0

    def at(
        self,
        nbytes: float,
        slices: float = 0.0,
        mflop: float = 0.0,
        operand_bytes: float = 0.0,
        krows: float = 0.0,
        flat_slices: float = 0.0,
    ) -> float:
        """Modelled microseconds for `nbytes` bytes written, `slices` texture slices, `mflop` MFLOP,
        `operand_bytes` bytes of weight / second operand read, `krows` thousand rows of a row-wise
        reduction and `flat_slices` slices of a texture one texel high: overhead plus rates."""
        return (
            self.overhead_us
            + self.us_per_mib * nbytes / MIB
            + self.us_per_slice * slices
            + self.us_per_mflop * mflop
            + self.us_per_operand_mib * operand_bytes / MIB
            + self.us_per_krow * krows
            + self.us_per_flat_slice * flat_slices
        )


class VulkanProfile(_Strict):
    """One device's costs. `parameters` is the parametric fallback; the tables are measurements."""

    version: int
    name: str = "custom"
    device: str = "unspecified"
    measured: bool = False
    command: str = ""
    description: str = ""
    parameters: dict[str, Parameter]
    transitions: dict[str, Linear] = Field(default_factory=dict)  # "SRC->DST"
    op_modes: dict[str, dict[str, Linear]] = Field(default_factory=dict)  # op class -> output label -> cost
    # The measurements behind the fits: key -> [bytes, texture slices, microseconds] per probe, then (where
    # not 0) MFLOP and operand bytes of a contraction, thousand rows of a row reduction, flat texture slices
    # (the order of `dispatch_terms`, with the microseconds third)
    samples: dict[str, list[tuple[float, ...]]] = Field(default_factory=dict)
    # How far the prices stray on the ops of whole programs: the median |log(price / device time)| over the
    # operators of programs lowered with this profile (`benchmarks.vulkan.rescale_rules`); 0 where not measured.
    # The fits are judged on their own probe chains (`mode_resolution`); an op in a program strays further.
    program_error: float = Field(0.0, ge=0)
    notes: list[str] = Field(default_factory=list)

    def param(self, key: str) -> float:
        """The value of parameter `key`; raises KeyError if the profile has none."""
        return self.parameters[key].value

    # Identity hashing: profiles key the cost caches, and two loads are two profiles.
    def __hash__(self) -> int:
        return id(self)

    def __eq__(self, other: object) -> bool:
        return self is other


def load_profile(profile: str | Path | VulkanProfile | None = None) -> VulkanProfile:
    """A profile by built-in name ("mobile-gpu", "lavapipe"), by path, or as given; None (or "default",
    where one profile is wanted: a report's prices, a query) is DEFAULT_PROFILE."""
    if isinstance(profile, VulkanProfile):
        return profile
    if profile is None or profile == ALL_PROFILES:
        profile = DEFAULT_PROFILE
    return _load(str(profile))


def profile_files() -> list[Path]:
    """The `*.json` files in the directories listed in $LAYOUT_SOLVER_VULKAN_PROFILES (os.pathsep-separated),
    sorted within each; a listed path that is not a directory is an error."""
    files = []
    for folder in filter(None, os.environ.get(PROFILES_DIR_ENV, "").split(os.pathsep)):
        if not Path(folder).expanduser().is_dir():
            raise ValueError(f"${PROFILES_DIR_ENV}: {folder!r} is not a directory")
        files.extend(sorted(Path(folder).expanduser().resolve().glob("*.json")))
    return files


def profiles_digest() -> str:
    """A digest of the user's profile files (names and bytes): results priced by the default objective depend
    on them."""
    digest = hashlib.sha1()
    for path in profile_files():
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def default_profiles() -> dict[str, VulkanProfile]:
    """Every profile the default objective weighs, by label: the built-ins by name, then each of
    `profile_files()` (e.g. `layout-solver calibrate vulkan` outputs) by file stem (its path where two stems
    clash). A file there that is not a profile is an error naming it, not skipped."""
    profiles = {name: load_profile(name) for name in BUILT_IN}
    for path in profile_files():
        try:
            profile = load_profile(path)
        except Exception as exc:  # re-raised with the file's name
            raise ValueError(f"${PROFILES_DIR_ENV}: {path} is not a Vulkan cost profile: {exc}") from exc
        profiles[path.stem if path.stem not in profiles else str(path)] = profile
    return profiles


def profile_set(cost_profile) -> dict[str, VulkanProfile] | None:
    """`default_profiles()` where `cost_profile` asks for every profile (None or "default"), else None."""
    return default_profiles() if cost_profile is None or cost_profile == ALL_PROFILES else None


@lru_cache(maxsize=16)
def _load(key: str) -> VulkanProfile:
    if key in BUILT_IN:
        text = (resources.files("cost_models") / "data" / BUILT_IN[key]).read_text()
    else:
        path = Path(key).expanduser()
        if not path.is_file():
            raise ValueError(f"no Vulkan cost profile {key!r}: not a built-in ({', '.join(BUILT_IN)}) nor a file")
        text = path.read_text()
    data = json.loads(text)
    data.setdefault("name", key if key in BUILT_IN else Path(key).stem)
    return VulkanProfile.model_validate(data)


def split_repr(representation: str) -> tuple[str, str]:
    """(storage, layout) of a "STORAGE:LAYOUT" label; raises ValueError for anything else."""
    storage, _, layout = representation.partition(":")
    if layout not in _PACKED_DIM or storage not in ("BUFFER", "TEXTURE_3D"):
        raise ValueError(f"not a Vulkan representation: {representation!r}")
    return storage, layout


def tensor_bytes(shape: tuple[int, ...] | list[int], dtype: str) -> int:
    """Bytes of a dense tensor (unknown dtypes count 4 bytes per element).

    >>> tensor_bytes((2, 3), "float16")
    12
    """
    return math.prod(shape) * DTYPE_BYTES.get(dtype, 4)


def texture_extents(shape, layout: str) -> tuple[int, int, int]:
    """Texel extents (x, y, z) of a texture holding `shape` in `layout` (x = W, y = H, z = C * N, the packed
    dim in blocks of 4), as the runtime lays textures out."""
    dims = [1] * max(0, 4 - len(shape)) + [int(d) for d in shape[-4:]]
    n, c, h, w = dims
    packed = _PACKED_DIM.get(layout, 0)
    if packed == 0:
        w = -(-w // 4)
    elif packed == 1:
        h = -(-h // 4)
    else:
        c = -(-c // 4)
    return w, h, c * n


def texture_slices(shape, label: str) -> int:
    """Depth (z extent) of the texture a dispatch writes; 0 for a buffer.

    Measured on lavapipe: a dispatch pays per texture slice, so a [1, 1280, 1, 1]
    tensor width-packed (1 x 1 x 1280 texels) costs milliseconds where its
    bytes say microseconds; channels-packed it is 4x shallower."""
    storage, _, layout = label.partition(":")
    return 0 if storage == "BUFFER" else texture_extents(shape, layout)[2]


def flat_slices(shape, label: str) -> int:
    """Depth of the texture a dispatch writes where that texture is one texel high (y extent 1); else 0.

    Measured on lavapipe (2026-11-27, chains of sigmoid and of view_copy): a dispatch over such a texture pays
    per slice ten times what a taller one does. [256, 4, 1, 1] width-packed (1 x 1 x 1024 texels): sigmoid
    1,586 us, view 9,765 us; [256, 4, 2, 2] (1 x 2 x 1024 texels): 110 us and 365 us. Height-packed,
    [256, 4, 2, 2] is 2 x 1 x 1024 texels and runs 1,591 us: the height, not the width or the bytes."""
    storage, _, layout = label.partition(":")
    if storage == "BUFFER":
        return 0
    _, height, depth = texture_extents(shape, layout)
    return depth if height == 1 else 0


def dispatch_terms(
    op_class: str | None, shape, dtype: str, label: str, contraction: int = 0
) -> tuple[float, float, float, float, float, float]:
    """What a dispatch writing `shape` x `dtype` in `label` is priced by, in `Linear.at`'s order: bytes,
    texture slices, MFLOP and operand bytes (contractions), thousand rows (row reductions), flat slices."""
    return (
        float(tensor_bytes(shape, dtype)),
        float(texture_slices(shape, label)),
        mflop(shape, contraction),
        float(operand_bytes(op_class, shape, contraction, dtype)),
        krows(op_class, shape),
        float(flat_slices(shape, label)),
    )


def transition_cost(shape, dtype: str, src: str, dst: str, profile: VulkanProfile | None = None) -> float:
    """Microseconds for one clone from representation `src` to `dst` (0 if equal)."""
    if src == dst:
        return 0.0
    return _transition_cost(tuple(shape), dtype, src, dst, profile or load_profile())


@lru_cache(maxsize=65536)
def _transition_cost(shape: tuple[int, ...], dtype: str, src: str, dst: str, p: VulkanProfile) -> float:
    nbytes = tensor_bytes(shape, dtype)
    measured = p.transitions.get(f"{src}->{dst}")
    if measured is not None:
        # a clone dispatches over its texture side (texture -> buffer included)
        terms = dispatch_terms(None, shape, dtype, dst if dst.startswith("TEXTURE_3D") else src)
        return measured.at(*terms) * near_sample_factor(p, f"transition:{src}->{dst}", *terms)
    s_storage, s_layout = split_repr(src)
    d_storage, d_layout = split_repr(dst)
    factor = 1.0
    if s_storage != d_storage:
        factor *= p.param("storage_change_factor")
    if _PACKED_DIM[s_layout] != _PACKED_DIM[d_layout]:
        factor *= p.param("packed_dim_change_factor")
    if s_layout.startswith("PACKED_INT8") or d_layout.startswith("PACKED_INT8"):
        factor *= p.param("int8_repack_factor")
    return p.param("dispatch_overhead_us") + factor * nbytes / MIB * (
        p.param("read_us_per_mib") + p.param("write_us_per_mib")
    )


@lru_cache(maxsize=65536)
def _view_change_cost(shape: tuple[int, ...], dtype: str, src: str, dst: str, p: VulkanProfile) -> float:
    # Between two buffer layouts there is no clone to measure (Clone.cpp has none): price the route
    # through a texture, an upper bound the device measured, not the parametric guess.
    if src.startswith("BUFFER") and dst.startswith("BUFFER"):
        via = {key.split("->")[1] for key in p.transitions if key.startswith(src + "->")}
        routes = [
            _transition_cost(shape, dtype, src, t, p) + _transition_cost(shape, dtype, t, dst, p)
            for t in via
            if f"{t}->{dst}" in p.transitions
        ]
        if routes:
            return min(routes)
    return _transition_cost(shape, dtype, src, dst, p)


def fit_samples(points: list[tuple[float, ...]]) -> Linear:
    """Non-negative overhead + rate per MiB + rate per slice (+ rates per MFLOP and per operand MiB) through
    (bytes, slices, microseconds[, MFLOP, operand bytes]) points, least squares on relative error (a probe of
    50 us counts as much as one of 5 ms)."""
    terms = [_priced(p) for p in points]
    a = np.array([[1.0, t[0] / MIB, t[1], t[2], t[3] / MIB, t[4], t[5]] for t in terms])
    y = np.array([max(p[2], 1.0) for p in points])
    (overhead, rate, per_slice, per_mflop, per_operand, per_krow, per_flat), _ = nnls(a / y[:, None], np.ones(len(y)))
    return Linear(
        overhead_us=round(float(overhead), 3),
        us_per_mib=round(float(rate), 3),
        us_per_slice=round(float(per_slice), 4),
        us_per_mflop=round(float(per_mflop), 4),
        us_per_operand_mib=round(float(per_operand), 4),
        us_per_krow=round(float(per_krow), 3),
        us_per_flat_slice=round(float(per_flat), 4),
        points=len(points),
    )


# Nearest-sample pricing. A fit is one line through a key's samples, and a device's times do not lie on one
# line: on lavapipe every transition into or out of a one-slice texture of 32 KiB ran 1.2-3x its fit, and a
# one-token row costs what no larger probe says. So a price near measured samples takes their residual: the
# fit times the nearby samples' measured / fitted ratio (geometric, weighted by inverse squared distance in
# doublings of bytes, texture slices and work), shrunk back to the fit as the samples get far: a sample one
# doubling away (in one term) weighs as much as the fit, one at three doublings a ninth of it.
NEAR_DOUBLINGS = 1.0
NEIGHBOURS = 3


def _sample_features(*terms: float) -> np.ndarray:
    # `terms` in `dispatch_terms`' order (those left off 0), as log2(1 + x) with x in units where 1 is small
    # (KiB, slices, kFLOP, KiB of operand, rows, flat slices): doublings above it
    nbytes, slices, mflop_, operand, rows, flat = (*terms, 0.0, 0.0, 0.0, 0.0, 0.0)[:6]
    return np.log2(1.0 + np.array([nbytes / 1024, slices, mflop_ * 1e3, operand / 1024, rows * 1e3, flat]))


@lru_cache(maxsize=1024)
def _residuals(p: VulkanProfile, key: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(features, log measured / fitted) of `key`'s samples ("op:CLASS|LABEL" or "transition:SRC->DST"), or
    None where the key has no samples or no fit."""
    fit, points = _fit_of(p, key), p.samples.get(key)
    if fit is None or not points:
        return None
    features, logs = [], []
    for point in points:
        terms = _priced(point)
        features.append(_sample_features(*terms))
        logs.append(math.log(max(point[2], 1.0) / max(fit.at(*terms), 1.0)))
    return np.array(features), np.array(logs)


@lru_cache(maxsize=65536)
def near_sample_factor(p: VulkanProfile, key: str, *terms: float) -> float:
    """The factor on `key`'s fit at this point from its nearest samples (1.0 where it has none); the point's
    terms in `dispatch_terms`' order.

    >>> near_sample_factor(VulkanProfile(version=3, parameters={}), "op:unary|BUFFER:TENSOR_WIDTH_PACKED", 4096)
    1.0
    """
    residuals = _residuals(p, key)
    if residuals is None:
        return 1.0
    features, logs = residuals
    distance = np.linalg.norm(features - _sample_features(*terms), axis=1)
    nearest = np.argsort(distance)[:NEIGHBOURS]
    weights = 1.0 / np.maximum(distance[nearest], 1e-3) ** 2
    return float(math.exp(float(weights @ logs[nearest]) / (float(weights.sum()) + NEAR_DOUBLINGS**-2)))


UNFIT_FACTOR = 5.0


def _priced(point: tuple[float, ...]) -> tuple[float, ...]:
    """The terms a sample was priced by (`dispatch_terms`' order: bytes, slices, MFLOP, operand bytes, thousand
    rows, flat slices), those it lacks 0; its microseconds are `point[2]`."""
    return (*point[:2], *(*point[3:], 0.0, 0.0, 0.0, 0.0)[:4])


def _fit_of(p: VulkanProfile, key: str) -> Linear | None:
    """The fit behind a sample key ("op:CLASS|LABEL" or "transition:SRC->DST"), or None."""
    kind, _, rest = key.partition(":")
    if kind == "op":
        op_class, _, label = rest.partition("|")
        return p.op_modes.get(op_class, {}).get(label)
    return p.transitions.get(rest)


def _fit_on_samples(p: VulkanProfile) -> Iterator[tuple[str, str, float, float]]:
    """(op class, label, fitted us, measured us) for every op-mode sample of `p` whose class and label have a fit."""
    for key, points in p.samples.items():
        fit = _fit_of(p, key) if key.startswith("op:") else None
        op_class, _, label = key.removeprefix("op:").partition("|")
        for point in points if fit is not None else ():
            yield op_class, label, fit.at(*_priced(point)), point[2]


@lru_cache(maxsize=16)
def unfit_op_modes(p: VulkanProfile) -> frozenset[tuple[str, str]]:
    """(op class, label) pairs whose fit prices one of its own samples more than UNFIT_FACTOR times too
    cheap: the op's time there does not follow the fit's terms (on lavapipe: layer_norm in a channels-packed
    texture, 0.7 to 22 ms at one texture slice), so the fit is not a price."""
    return frozenset(
        (op_class, label) for op_class, label, fitted, us in _fit_on_samples(p) if us > UNFIT_FACTOR * max(fitted, 1.0)
    )


@lru_cache(maxsize=16)
def mode_resolution(p: VulkanProfile) -> float:
    """The smallest relative difference between two modes of one op that `p` resolves: the median relative
    error of its op-mode fits on their own samples (0 for a profile without samples).

    A difference under it is inside the fits' scatter, and on the device such a difference did not survive
    the trip from probe chains into a program: on lavapipe, swin_like's solver bought buffer height-packed
    layer_norms, priced just under width-packed, with transitions, and ran slower than a layout without them
    (`benchmarks/results/vulkan_layout_search.md`).
    """
    errors = [abs(fitted - us) / us for _, _, fitted, us in _fit_on_samples(p) if us > 0]
    return float(statistics.median(errors)) if errors else 0.0


def resolved_mode_costs(costs: list[float], p: VulkanProfile) -> list[float]:
    """An op's mode costs as `p` can tell them apart: each within `mode_resolution(p)` of the cheapest is
    the cheapest, so no transition is bought for a difference the profile does not resolve.

    >>> resolved_mode_costs([100.0, 105.0, 300.0], VulkanProfile(version=3, parameters={}))
    [100.0, 105.0, 300.0]
    """
    if not costs:
        return costs
    cheapest, resolution = min(costs), mode_resolution(p)
    return [cheapest if c <= cheapest * (1.0 + resolution) else c for c in costs]


@lru_cache(maxsize=256)
def _trusted_modes(p: VulkanProfile, op_class: str) -> dict[str, Linear]:
    # The class's measured labels less the unfit ones (all of them if every one is unfit).
    table = p.op_modes[op_class]
    return {lab: c for lab, c in table.items() if (op_class, lab) not in unfit_op_modes(p)} or dict(table)


def mflop(shape, contraction: int) -> float:
    """Millions of multiply-adds x 2 for an output of `shape` whose every element sums `contraction` products."""
    return 2.0 * math.prod(shape) * contraction / 1e6


ROW_REDUCTIONS = ("layer_norm", "softmax")
# The measured classes whose median prices an op a measured profile has no class for (they move data and do
# little arithmetic, as most unmeasured ops do).
COPY_LIKE = ("unary", "binary", "view", "permute", "select")


def priced_results(op_class: str | None, profile: VulkanProfile, results: list) -> list:
    """The results of one op whose representations its price is summed over: only the first where `profile`
    measured the class (calibration timed the op's dispatch against its first result: native_layer_norm's
    mean and rstd are written by the same dispatch, and priced as three layer_norms they tripled the op's
    price), every result otherwise.

    >>> lavapipe = load_profile("lavapipe")
    >>> priced_results("softmax", lavapipe, ["out", "aux"]), priced_results(None, lavapipe, ["a", "b"])
    (['out'], ['a', 'b'])
    """
    return results[:1] if op_class in profile.op_modes else list(results)


def krows(op_class: str | None, shape) -> float:
    """Thousands of rows (elements / last dim) a row-wise reduction of `shape` runs over; 0 for other classes.

    >>> krows("layer_norm", (2, 500, 64)), krows("unary", (2, 500, 64))
    (1.0, 0.0)
    """
    if op_class not in ROW_REDUCTIONS or not len(shape) or not shape[-1]:
        return 0.0
    return math.prod(shape) / int(shape[-1]) / 1000.0


def operand_bytes(op_class: str | None, shape, contraction: int, dtype: str = "float32") -> int:
    """Bytes of the operand a contraction writing `shape` reads besides its input: a linear's weight
    (contraction x out features, shared by every row), a matmul's second operand (one per batch).

    >>> operand_bytes("linear", (1, 36, 768), 192), operand_bytes("matmul", (8, 36, 36), 64)
    (589824, 73728)
    """
    if not contraction or not len(shape):
        return 0
    if op_class == "linear":
        return contraction * int(shape[-1]) * DTYPE_BYTES.get(dtype, 4)
    if op_class == "matmul":
        return math.prod(shape[:-2]) * contraction * int(shape[-1]) * DTYPE_BYTES.get(dtype, 4)
    return 0


def op_mode_cost(
    op_class: str | None,
    shape,
    dtype: str,
    output_label: str,
    profile: VulkanProfile | None = None,
    contraction: int = 0,
    input_label: str | None = None,
    estimate: bool = False,
) -> float:
    """Microseconds for one op of `op_class` writing a `shape` x `dtype` tensor in `output_label`;
    `contraction` is the length of the sums behind each output element (linear, matmul), else 0;
    `input_label` the representation a view reads (a view between two texture packings costs a clone).
    `estimate` prices a label whose fit cannot explain its samples by those samples (the best estimate, for
    predictions) instead of as the class's dearest label (the price the solver decides by).

    Measured where the profile has the (class, label) pair. Otherwise only the
    difference between storages counts (textures are the baseline, a buffer
    pays `buffer_op_penalty_per_mib`): constant terms do not change a choice.
    """
    # Cached, as transitions are: one graph is priced under several profiles and several taggings, and the
    # layers of a model repeat their shapes.
    p = profile or load_profile()
    return _op_mode_cost(op_class, tuple(shape), dtype, output_label, p, contraction, input_label, estimate)


@lru_cache(maxsize=65536)
def _op_mode_cost(
    op_class: str | None,
    shape: tuple[int, ...],
    dtype: str,
    output_label: str,
    p: VulkanProfile,
    contraction: int,
    input_label: str | None,
    estimate: bool,
) -> float:
    output_bytes = tensor_bytes(shape, dtype)
    if op_class == "view" and input_label not in (None, output_label):
        # A view that keeps its representation is priced by the view class (a copy dispatch, 100-2,000 us
        # per view measured on lavapipe); one that changes the packed dim moves every element like a
        # clone between the two (Clone.cpp dispatches the same view shader), so it costs that transition.
        return _view_change_cost(tuple(shape), dtype, input_label, output_label, p)
    table = p.op_modes.get(op_class or "")
    if not table and p.op_modes:
        # A class this measured profile did not probe (expand, slice, cat, ...) is priced as a typical
        # data-movement op writing that tensor in that representation: the median of the classes it measured.
        # Left free, the solver moved such ops anywhere: crnn's expand of a [256, 192] weight to 16 steps ran
        # 4.8 ms in stock's texture and 26 ms in the buffer the solver chose for nothing (lavapipe).
        typical = [op_mode_cost(c, shape, dtype, output_label, p) for c in COPY_LIKE if c in p.op_modes]
        if typical:
            return statistics.median(typical)
    if table:
        terms = dispatch_terms(op_class, shape, dtype, output_label, contraction)
        trusted = _trusted_modes(p, op_class)

        def price(label: str) -> float:
            return table[label].at(*terms) * near_sample_factor(p, f"op:{op_class}|{label}", *terms)

        if output_label in trusted or (estimate and output_label in table):
            return price(output_label)
        # A label the calibration could not run the op in, or could not fit (`unfit_op_modes`), is priced as
        # the dearest one it could: a price the measurements do not support would lure the solver into it.
        # (Priced instead by its own nearest samples, never below the cheapest trusted label, layer_norm's
        # channels-packed texture lured swin_like's solver on lavapipe: its layer_norms, priced 4.6 ms,
        # ran 17.1 ms, and the program 1.42x stock. There a [4, 49, 96] sample ran 0.7 ms and a [1, 196, 192]
        # one 22 ms: one slice each, and no term of the fit tells them apart.)
        return max(price(label) for label in trusted)
    storage = output_label.partition(":")[0]
    return p.param("buffer_op_penalty_per_mib") * output_bytes / MIB if storage == "BUFFER" else 0.0
