"""Vulkan costs: layout transitions (clone dispatches) and op modes.

A representation is (storage, memory layout), written "TEXTURE_3D:TENSOR_CHANNELS_PACKED".
Pure functions of shapes, dtypes and representations; parameters come from
`data/vulkan_v<N>.json`, where each one's meaning is written down.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

MIB = 1024 * 1024
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "int64": 8, "int8": 1, "uint8": 1,
               "int16": 2, "bool": 1}

_PACKED_DIM = {
    "TENSOR_WIDTH_PACKED": 0, "TENSOR_HEIGHT_PACKED": 1, "TENSOR_CHANNELS_PACKED": 2,
    "PACKED_INT8_4W4C": 2, "PACKED_INT8_4H4W": 0, "PACKED_INT8_4W": 0, "PACKED_INT8_4C1W": 2,
    "PACKED_INT8_CONV2D": 2,
}


@dataclass(frozen=True)
class VulkanParams:
    version: int
    dispatch_overhead_us: float
    read_us_per_mib: float
    write_us_per_mib: float
    storage_change_factor: float
    packed_dim_change_factor: float
    int8_repack_factor: float
    buffer_op_penalty_per_mib: float


@lru_cache(maxsize=None)
def load_params(version: int = 1) -> VulkanParams:
    text = (resources.files("cost_models") / "data" / f"vulkan_v{version}.json").read_text()
    data = json.loads(text)
    return VulkanParams(version=data["version"], **{k: float(v["value"]) for k, v in data["parameters"].items()})


def split_repr(representation: str) -> tuple[str, str]:
    storage, _, layout = representation.partition(":")
    if layout not in _PACKED_DIM or storage not in ("BUFFER", "TEXTURE_3D"):
        raise ValueError(f"not a Vulkan representation: {representation!r}")
    return storage, layout


def tensor_bytes(shape: tuple[int, ...] | list[int], dtype: str) -> int:
    return math.prod(shape) * DTYPE_BYTES.get(dtype, 4)


def transition_cost(shape, dtype: str, src: str, dst: str, params: VulkanParams | None = None) -> float:
    """Microseconds for one clone from representation `src` to `dst` (0 if equal)."""
    if src == dst:
        return 0.0
    return _transition_cost(tuple(shape), dtype, src, dst, params or load_params())


@lru_cache(maxsize=65536)
def _transition_cost(shape: tuple[int, ...], dtype: str, src: str, dst: str, p: VulkanParams) -> float:
    s_storage, s_layout = split_repr(src)
    d_storage, d_layout = split_repr(dst)
    mib = tensor_bytes(shape, dtype) / MIB
    factor = 1.0
    if s_storage != d_storage:
        factor *= p.storage_change_factor
    if _PACKED_DIM[s_layout] != _PACKED_DIM[d_layout]:
        factor *= p.packed_dim_change_factor
    if s_layout.startswith("PACKED_INT8") or d_layout.startswith("PACKED_INT8"):
        factor *= p.int8_repack_factor
    return p.dispatch_overhead_us + factor * mib * (p.read_us_per_mib + p.write_us_per_mib)


def op_mode_cost(output_bytes: int, output_storage: str, params: VulkanParams | None = None) -> float:
    """Extra microseconds for running an op with its output in `output_storage` (textures are the baseline)."""
    p = params or load_params()
    return p.buffer_op_penalty_per_mib * output_bytes / MIB if output_storage == "BUFFER" else 0.0
