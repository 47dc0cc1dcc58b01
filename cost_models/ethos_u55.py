"""Ethos-U55 transpose costs, fitted to Vela 5.1 (ethos-u55-128).

Vela lowers one TOSA TRANSPOSE into 1-14 NPU ops, each of which streams the
whole tensor once. So the model is

    cycles(shape, perm, dtype) = bytes * sum over the ops of (cycles per byte of that op)

evaluated on the transpose's *canonical* form: unit dims dropped and input
axes that stay adjacent in the output merged. A transpose whose canonical
permutation is the identity moves no data and is materialised as a RESHAPE
(free); Vela itself would still spend a full op on it.

The op count depends only on the canonical permutation. Cycles per byte
follow the innermost dims: one NPU transpose op costs g(c) cycles per byte,
where c is its innermost dim in bytes, in four classes (8-byte multiples of
16+, exactly 8, other multiples of 4, the rest). Per permutation, cycles per
byte = w_in*g(innermost input) + w_out*g(innermost output) + w_const. Both come from the versioned
parameter file `data/ethos_u55_v<N>.json`, written by
`cost_models.calibration.fit_ethos_u55`. Permutations the file does not
know fall back to an inversion-count estimate, or to Vela itself with
`exact=True`.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

DTYPE_BYTES = {"int8": 1, "uint8": 1, "int16": 2, "int32": 4, "bool": 1}


def canonical_transpose(shape, perm) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Cheapest equivalent transpose: unit dims dropped, adjacent-staying axes merged."""
    shape, perm = list(shape), list(perm)
    if sorted(perm) != list(range(len(shape))):
        raise ValueError(f"{perm} is not a permutation of {len(shape)} axes")
    keep = [a for a in range(len(shape)) if shape[a] != 1]
    rank = {a: i for i, a in enumerate(keep)}
    perm = [rank[a] for a in perm if a in rank]
    shape = [shape[a] for a in keep]
    # Merge runs of output axes that read consecutive input axes.
    groups: list[list[int]] = []
    for a in perm:
        if groups and groups[-1][-1] + 1 == a:
            groups[-1].append(a)
        else:
            groups.append([a])
    order = sorted(range(len(groups)), key=lambda g: groups[g][0])  # groups in input order
    new_index = {g: i for i, g in enumerate(order)}
    merged_shape = tuple(math.prod(shape[a] for a in groups[g]) for g in order)
    merged_perm = tuple(new_index[g] for g in range(len(groups)))
    return merged_shape, merged_perm


def is_identity(perm) -> bool:
    return list(perm) == sorted(perm)


@dataclass(frozen=True)
class PermParams:
    ops: int
    # cycles per byte = w_in * g(innermost input dim) + w_out * g(innermost output dim) + w_const
    w_in: float
    w_out: float
    w_const: float


@dataclass(frozen=True)
class DtypeTable:
    per_perm: dict[tuple[int, ...], PermParams]
    fallback_rate_per_op: float
    # g(c): cycles per byte of one NPU transpose op whose innermost dim is c bytes, by class
    brick_rates: dict[str, float]


@dataclass(frozen=True)
class EthosU55Params:
    version: int
    vela_version: str
    tables: dict[str, DtypeTable]  # int8 and int16 behave differently on the NPU: one table each


def brick_class(innermost_bytes: int) -> str:
    """The NPU moves 8-byte-aligned rows fastest; narrow or unaligned rows go element by element."""
    if innermost_bytes % 8 == 0:
        return "x8" if innermost_bytes == 8 else "x8+"
    if innermost_bytes % 4 == 0 and innermost_bytes > 4:
        return "x4"
    return "other"


@lru_cache(maxsize=None)
def load_params(version: int = 1) -> EthosU55Params:
    data = json.loads((resources.files("cost_models") / "data" / f"ethos_u55_v{version}.json").read_text())
    tables = {
        dtype: DtypeTable({tuple(int(x) for x in k.split(",")): PermParams(**v) for k, v in t["per_perm"].items()},
                          t["fallback_rate_per_op"], t["brick_rates"])
        for dtype, t in data["tables"].items()
    }
    return EthosU55Params(data["version"], data["vela_version"], tables)


def _inversions(perm) -> int:
    return sum(1 for i in range(len(perm)) for j in range(i + 1, len(perm)) if perm[i] > perm[j])


def features(cshape, cperm, dtype: str, table: DtypeTable) -> tuple[float, float]:
    """g(innermost input dim), g(innermost output dim) in cycles per byte."""
    width = DTYPE_BYTES[dtype]
    g = table.brick_rates
    return g[brick_class(cshape[-1] * width)], g[brick_class(cshape[cperm[-1]] * width)]


@dataclass(frozen=True)
class TransposeCost:
    cycles: float
    npu_ops: int
    canonical_shape: tuple[int, ...]
    canonical_perm: tuple[int, ...]
    source: str  # "model", "fallback", "reshape" or "vela"


def transpose_cost(shape, perm, dtype: str = "int8", params: EthosU55Params | None = None,
                   exact: bool = False) -> TransposeCost:
    """Predicted (or, with exact=True, Vela's) cycles of the cheapest materialisation."""
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unsupported dtype {dtype!r} for Ethos-U55 transposes")
    cshape, cperm = canonical_transpose(shape, perm)
    if is_identity(cperm):
        return TransposeCost(0.0, 0, cshape, cperm, "reshape")
    nbytes = math.prod(cshape) * DTYPE_BYTES[dtype]
    if exact:
        from cost_models.calibration.vela_runner import measure_transpose

        m = measure_transpose(cshape, cperm, dtype)
        return TransposeCost(float(m.cycles), m.npu_ops, cshape, cperm, "vela")
    p = params or load_params()
    table = p.tables.get(dtype) or p.tables["int8"]
    entry = table.per_perm.get(cperm)
    if entry is None:
        ops = max(1, _inversions(cperm))
        return TransposeCost(nbytes * ops * table.fallback_rate_per_op, ops, cshape, cperm, "fallback")
    g_in, g_out = features(cshape, cperm, dtype, table)
    rate = entry.w_in * g_in + entry.w_out * g_out + entry.w_const
    return TransposeCost(nbytes * rate, entry.ops, cshape, cperm, "model")

