"""One priced layout change, as asked by `layout-solver cost transpose` and `POST /v1/cost/transpose`.

`TransposeQuery` validates the question up front (rank, dims, element count,
dtype, a permutation where one is meant and none where it is not), so both
front ends give the same clear message and the models never see a shape they
cannot price in constant memory.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_RANK = 8
# TOSA addresses tensors with 32-bit offsets; a larger shape is not a real tensor.
MAX_ELEMENTS = 1 << 31
ETHOS_DTYPES = ("int8", "uint8", "int16", "int32", "bool")
VULKAN_DTYPES = ("float32", "float16", "int32", "int8", "uint8", "bool")


class TransposeQuery(BaseModel):
    """Price of one transpose (Ethos-U) or representation change (Vulkan).

    >>> TransposeQuery(target="ethos-u55-128", shape=[1, 8, 8, 16], perm=[0, 2, 3, 1]).dtype
    'int8'
    """

    model_config = ConfigDict(extra="forbid")

    target: str = "ethos-u55-128"  # "vulkan" or an Ethos-U configuration Vela accepts ("ethos-u85-256")
    shape: list[int] = Field(min_length=1, max_length=MAX_RANK)
    perm: list[int] | None = None  # Ethos-U55 only
    dtype: str | None = None  # default: int8 (Ethos-U55), float32 (Vulkan)
    form: Literal["cheapest", "as_given"] = "cheapest"  # Ethos-U55 only
    exact: bool = False  # Ethos-U55: also ask Vela
    src: str = "TEXTURE_3D:TENSOR_CHANNELS_PACKED"  # Vulkan only
    dst: str = "TEXTURE_3D:TENSOR_WIDTH_PACKED"
    cost_profile: str | None = None  # Vulkan: built-in name or profile file

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
        if self.target != "vulkan" and self.target not in ethos_u_accelerators():
            raise ValueError(f"unknown target {self.target!r}; expected vulkan or one of {ethos_u_accelerators()}")
        if self.target != "vulkan":
            self.dtype = self.dtype or "int8"
            if self.dtype not in ETHOS_DTYPES:
                raise ValueError(f"dtype {self.dtype!r} is not an Ethos-U dtype; expected one of {ETHOS_DTYPES}")
            if self.perm is None:
                raise ValueError("an Ethos-U transpose needs a permutation (perm)")
            if sorted(self.perm) != list(range(len(self.shape))):
                raise ValueError(f"perm {self.perm} is not a permutation of the {len(self.shape)} axes of {self.shape}")
        else:
            self.dtype = self.dtype or "float32"
            if self.dtype not in VULKAN_DTYPES:
                raise ValueError(f"dtype {self.dtype!r} is not a Vulkan dtype; expected one of {VULKAN_DTYPES}")
            if self.perm is not None:
                raise ValueError(
                    "perm means nothing for Vulkan: a transition changes storage and packing "
                    "(src, dst), not the dim order"
                )
            if self.exact or self.form != "cheapest":
                raise ValueError("exact and form are Ethos-U options")
        return self


@cache
def ethos_u_accelerators() -> tuple[str, ...]:
    """Every Ethos-U configuration Vela compiles for."""
    from ethosu.vela.architecture_features import Accelerator

    return tuple(a.value for a in Accelerator)


def price(query: TransposeQuery) -> dict:
    """The JSON-ready answer; ValueError for a representation or profile the models do not know.

    On ethos-u55-128, `cycles` is the calibrated model (no Vela run; `exact` adds Vela's own figure); on every
    other Ethos-U configuration, Vela prices the transpose for executorch's compile spec of that target."""
    if query.target != "vulkan":
        from cost_models import ethos_u55, vela

        if query.target == "ethos-u55-128":
            predicted = ethos_u55.transpose_cost(query.shape, query.perm, query.dtype, form=query.form)
        else:
            from executorch.backends.arm.ethosu import EthosUCompileSpec

            config = vela.vela_config(tuple(EthosUCompileSpec(query.target).compiler_flags))
            predicted = vela.transpose_cost(query.shape, query.perm, query.dtype, query.form, config)
        result = {
            "target": query.target,
            "shape": query.shape,
            "perm": query.perm,
            "dtype": query.dtype,
            "form": query.form,
            "cycles": round(predicted.cycles, 1),
            "npu_ops": predicted.npu_ops,
            "source": predicted.source,
            "priced_shape": list(predicted.shape),
            "priced_perm": list(predicted.perm),
            "canonical_shape": list(predicted.canonical_shape),
            "canonical_perm": list(predicted.canonical_perm),
        }
        if query.exact and query.target == "ethos-u55-128":
            exact = vela.transpose_cost(query.shape, query.perm, query.dtype, query.form)
            result.update(vela_cycles=exact.cycles, vela_npu_ops=exact.npu_ops)
        elif query.exact:
            result.update(vela_cycles=predicted.cycles, vela_npu_ops=predicted.npu_ops)
        return result
    from cost_models import vulkan

    profile = vulkan.load_profile(query.cost_profile)
    for representation in (query.src, query.dst):
        vulkan.split_repr(representation)
    microseconds = vulkan.transition_cost(query.shape, query.dtype, query.src, query.dst, profile)
    return {
        "target": "vulkan",
        "shape": query.shape,
        "dtype": query.dtype,
        "src": query.src,
        "dst": query.dst,
        "profile": profile.name,
        "cycles": None,
        "microseconds": round(microseconds, 3),
    }
