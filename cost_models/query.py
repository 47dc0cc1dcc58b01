"""One priced layout change, as asked by `layout-solver cost transpose` and `POST /v1/cost/transpose`.

`TransposeQuery` validates the question up front (rank, dims, element count,
dtype, a permutation where one is meant and none where it is not), so both
front ends give the same clear message and the models never see a shape they
cannot price in constant memory.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_RANK = 8
# TOSA addresses tensors with 32-bit offsets; a larger shape is not a real tensor.
MAX_ELEMENTS = 1 << 31
ETHOS_DTYPES = ("int8", "uint8", "int16", "int32", "bool")
VULKAN_DTYPES = ("float32", "float16", "int32", "int8", "uint8", "bool")


class TransposeQuery(BaseModel):
    """Price of one transpose (Ethos-U, TOSA) or representation change (Vulkan). What every target's price
    needs is checked here; what one target's needs (dtype, perm or src/dst) is checked by its pricing below,
    which the target (`layout_solver.targets`) picks.

    >>> TransposeQuery(target="ethos-u55-128", shape=[1, 8, 8, 16], perm=[0, 2, 3, 1]).perm
    [0, 2, 3, 1]
    """

    model_config = ConfigDict(extra="forbid")

    target: str = "ethos-u55-128"  # a registered target: "vulkan", "tosa-int", an Ethos-U configuration
    shape: list[int] = Field(min_length=1, max_length=MAX_RANK)
    perm: list[int] | None = None  # transposes (Ethos-U, TOSA)
    dtype: str | None = None  # default: int8 (Ethos-U, TOSA), float32 (Vulkan)
    form: Literal["cheapest", "as_given"] = "cheapest"  # Ethos-U only
    exact: bool = False  # Ethos-U: also ask Vela
    src: str = "TEXTURE_3D:TENSOR_CHANNELS_PACKED"  # Vulkan only
    dst: str = "TEXTURE_3D:TENSOR_WIDTH_PACKED"
    cost_profile: str | None = None  # Vulkan, XNNPACK: built-in name or profile file
    threads: int | None = Field(None, ge=1, le=1024)  # XNNPACK: the thread count the program runs with

    @model_validator(mode="after")
    def _check(self) -> TransposeQuery:
        bad = [d for d in self.shape if d < 1]
        if bad:
            raise ValueError(f"shape {self.shape}: every dimension must be >= 1")
        if math.prod(self.shape) > MAX_ELEMENTS:
            raise ValueError(
                f"shape {self.shape} has {math.prod(self.shape):,} elements, above the limit "
                f"{MAX_ELEMENTS:,} (32-bit tensor addressing)"
            )
        if self.perm is not None and sorted(self.perm) != list(range(len(self.shape))):
            raise ValueError(f"perm {self.perm} is not a permutation of the {len(self.shape)} axes of {self.shape}")
        return self


def _transpose_fields(query: TransposeQuery, dtypes, family: str) -> str:
    """The dtype of a transpose query (default int8), checked against `dtypes`, with its permutation."""
    dtype = query.dtype or "int8"
    if dtype not in dtypes:
        raise ValueError(f"dtype {dtype!r}: a transpose on {family} takes one of {tuple(dtypes)}")
    if query.perm is None:
        raise ValueError(f"a transpose on {family} needs a permutation (perm)")
    return dtype


def ethos_u_transpose(query: TransposeQuery, vela_flags: tuple[str, ...] | None = None) -> dict:
    """An Ethos-U transpose's cycles, JSON-ready. With no `vela_flags` (ethos-u55-128 as executorch compiles for
    it), `cycles` is the calibrated model (no Vela run; `exact` adds Vela's own figure); with a configuration's
    flags, Vela prices the transpose for that configuration."""
    from cost_models import ethos_u55, vela

    dtype = _transpose_fields(query, ETHOS_DTYPES, "Ethos-U")
    if vela_flags is None:
        predicted = ethos_u55.transpose_cost(query.shape, query.perm, dtype, form=query.form)
    else:
        predicted = vela.transpose_cost(query.shape, query.perm, dtype, query.form, vela.vela_config(vela_flags))
    result = {
        "target": query.target,
        "shape": query.shape,
        "perm": query.perm,
        "dtype": dtype,
        "form": query.form,
        "cycles": round(predicted.cycles, 1),
        "npu_ops": predicted.npu_ops,
        "source": predicted.source,
        "priced_shape": list(predicted.shape),
        "priced_perm": list(predicted.perm),
        "canonical_shape": list(predicted.canonical_shape),
        "canonical_perm": list(predicted.canonical_perm),
    }
    if query.exact and vela_flags is None:
        exact = vela.transpose_cost(query.shape, query.perm, dtype, query.form)
        result.update(vela_cycles=exact.cycles, vela_npu_ops=exact.npu_ops)
    elif query.exact:
        result.update(vela_cycles=predicted.cycles, vela_npu_ops=predicted.npu_ops)
    return result


def moved_bytes_transpose(query: TransposeQuery, dtype_bytes: dict[str, int]) -> dict:
    """A TOSA transpose priced target-neutrally: the bytes it moves (none for the identity), JSON-ready."""
    dtype = _transpose_fields(query, dtype_bytes, "TOSA")
    moves = query.perm != sorted(query.perm)
    return {
        "target": query.target,
        "shape": query.shape,
        "perm": query.perm,
        "dtype": dtype,
        "cycles": None,
        "bytes_moved": math.prod(query.shape) * dtype_bytes[dtype] if moves else 0,
    }


def vulkan_transition(query: TransposeQuery) -> dict:
    """A Vulkan representation change's microseconds under the query's cost profile, JSON-ready."""
    from cost_models import vulkan

    dtype = query.dtype or "float32"
    if dtype not in VULKAN_DTYPES:
        raise ValueError(f"dtype {dtype!r} is not a Vulkan dtype; expected one of {VULKAN_DTYPES}")
    if query.perm is not None:
        raise ValueError(
            "perm means nothing for Vulkan: a transition changes storage and packing (src, dst), not the dim order"
        )
    if query.exact or query.form != "cheapest":
        raise ValueError("exact and form are Ethos-U options")
    profile = vulkan.load_profile(query.cost_profile)
    for representation in (query.src, query.dst):
        vulkan.split_repr(representation)
    microseconds = vulkan.transition_cost(query.shape, dtype, query.src, query.dst, profile)
    return {
        "target": query.target,
        "shape": query.shape,
        "dtype": dtype,
        "src": query.src,
        "dst": query.dst,
        "profile": profile.name,
        "cycles": None,
        "microseconds": round(microseconds, 3),
    }
