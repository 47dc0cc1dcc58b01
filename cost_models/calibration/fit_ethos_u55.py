"""Fit the Ethos-U55 transpose model to Vela and measure how well it predicts.

    python -m cost_models.calibration.fit_ethos_u55 [--per-perm N] [--write]

The sweep covers ranks 2-5: every permutation up to rank 4 and a sample at
rank 5, on random shapes of 1K-1M elements. Each case is measured in its
canonical form (the cheapest materialisation, which is what the write-back
emits), so "truth" is Vela's estimate for exactly what would be compiled.
Training and held-out sweeps use different seeds.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import random
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from cost_models.calibration.vela_runner import VelaUnsupported, measure_transpose, vela_version
import numpy as np
from scipy.optimize import nnls

from cost_models.ethos_u55 import (
    DTYPE_BYTES,
    DtypeTable,
    EthosU55Params,
    PermParams,
    brick_class,
    canonical_transpose,
    features,
    is_identity,
    transpose_cost,
)

DIMS = [2, 3, 4, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 196, 256]
PARAMS_FILE = Path(__file__).resolve().parents[1] / "data" / "ethos_u55_v1.json"


@dataclass
class Case:
    shape: tuple[int, ...]
    perm: tuple[int, ...]
    dtype: str
    cshape: tuple[int, ...]
    cperm: tuple[int, ...]
    vela_cycles: int
    vela_ops: int


def sweep(seed: int, per_perm: int = 4, rank5: int = 40, dtypes=("int8",), progress=None) -> list[Case]:
    rng = random.Random(seed)

    def shape_for(rank: int) -> tuple[int, ...]:
        while True:
            shape = tuple(rng.choice(DIMS) for _ in range(rank))
            if 1_000 <= math.prod(shape) <= 1_000_000:
                return shape

    jobs = []
    for rank in (2, 3, 4):
        for perm in itertools.permutations(range(rank)):
            if not is_identity(perm):
                jobs += [(shape_for(rank), perm) for _ in range(per_perm)]
    jobs += [(shape_for(5), tuple(rng.sample(range(5), 5))) for _ in range(rank5)]
    cases = []
    for i, (shape, perm) in enumerate(jobs):
        dtype = rng.choice(dtypes)
        cshape, cperm = canonical_transpose(shape, perm)
        if is_identity(cperm):
            continue
        try:
            m = measure_transpose(cshape, cperm, dtype)
        except VelaUnsupported:
            continue  # U55 cannot run it as one op; executorch decomposes these first
        cases.append(Case(shape, perm, dtype, cshape, cperm, m.cycles, m.npu_ops))
        if progress:
            progress(i + 1, len(jobs))
    return cases


def fit(cases: list[Case]) -> EthosU55Params:
    """One table per dtype (see fit_table)."""
    dtypes = sorted({c.dtype for c in cases})
    return EthosU55Params(1, vela_version(), {dt: fit_table([c for c in cases if c.dtype == dt]) for dt in dtypes})


def fit_table(cases: list[Case]) -> DtypeTable:
    """Class rates g from single-op cases, then per-permutation non-negative least squares."""
    single = defaultdict(list)
    for c in cases:
        if c.vela_ops == 1:
            single[brick_class(c.cshape[-1] * DTYPE_BYTES[c.dtype])].append(
                c.vela_cycles / (math.prod(c.cshape) * DTYPE_BYTES[c.dtype]))
    defaults = {"x8+": 0.375, "x8": 0.25, "x4": 0.5, "other": 1.0}
    brick_rates = {k: round(statistics.median(single[k]), 5) if single[k] else v for k, v in defaults.items()}
    draft = DtypeTable({}, 0.0, brick_rates)
    by_perm: dict[tuple[int, ...], list[Case]] = defaultdict(list)
    for c in cases:
        by_perm[c.cperm].append(c)
    per_perm = {}
    per_op = []
    for cperm, group in by_perm.items():
        ops = statistics.mode(c.vela_ops for c in group)
        rows, target = [], []
        for c in group:
            g_in, g_out = features(c.cshape, c.cperm, c.dtype, draft)
            rate = c.vela_cycles / (math.prod(c.cshape) * DTYPE_BYTES[c.dtype])
            # Relative least squares: weight each case by 1/rate.
            rows.append([g_in / rate, g_out / rate, 1.0 / rate])
            target.append(1.0)
            per_op.append(rate / max(c.vela_ops, 1))
        w, _ = nnls(np.asarray(rows), np.asarray(target))
        per_perm[cperm] = PermParams(ops=ops, w_in=round(float(w[0]), 5), w_out=round(float(w[1]), 5),
                                     w_const=round(float(w[2]), 5))
    return DtypeTable(per_perm, round(statistics.median(per_op), 5), brick_rates)


def errors(cases: list[Case], params: EthosU55Params) -> list[float]:
    """Relative error of the model against Vela, per case."""
    out = []
    for c in cases:
        predicted = transpose_cost(c.shape, c.perm, c.dtype, params=params).cycles
        out.append(abs(predicted - c.vela_cycles) / c.vela_cycles)
    return out


def write_params(params: EthosU55Params, path: Path = PARAMS_FILE, notes: dict | None = None) -> None:
    data = {
        "version": params.version,
        "vela_version": params.vela_version,
        "accelerator": "ethos-u55-128",
        "description": "One table per dtype. brick_rates: cycles per byte of one NPU transpose op by the class of "
                       "its innermost dim (bytes: x8+ = multiple of 8 and >= 16, x8 = 8, x4 = other multiples of 4, "
                       "other). per_perm (canonical permutation): ops = NPU ops Vela emits; cycles per byte = "
                       "w_in*g(innermost input) + w_out*g(innermost output) + w_const. fallback_rate_per_op prices "
                       "permutations not listed, per estimated op (inversion count).",
        "tables": {
            dtype: {
                "brick_rates": t.brick_rates,
                "fallback_rate_per_op": t.fallback_rate_per_op,
                "per_perm": {",".join(map(str, k)): vars(v) for k, v in sorted(t.per_perm.items())},
            }
            for dtype, t in params.tables.items()
        },
        **({"fit": notes} if notes else {}),
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def accuracy(cases: list[Case], params: EthosU55Params) -> dict:
    errs = errors(cases, params)
    ordered = sorted(errs)
    return {"cases": len(errs), "median_rel_error": round(statistics.median(errs), 4),
            "p90_rel_error": round(ordered[int(0.9 * (len(errs) - 1))], 4), "max_rel_error": round(max(errs), 4)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-perm", type=int, default=8)
    parser.add_argument("--rank5", type=int, default=60)
    parser.add_argument("--write", action="store_true", help="write the fitted parameters file")
    args = parser.parse_args()
    dtypes = ("int8", "int16")
    train = [c for dt in dtypes for c in sweep(seed=1, per_perm=args.per_perm, rank5=args.rank5, dtypes=(dt,))]
    held = [c for dt in dtypes
            for c in sweep(seed=2, per_perm=max(2, args.per_perm // 2), rank5=args.rank5 // 2, dtypes=(dt,))]
    params = fit(train)
    summary = {"train_cases": len(train),
               **{f"held_out_{dt}": accuracy([c for c in held if c.dtype == dt], params) for dt in dtypes}}
    print(json.dumps(summary))
    if args.write:
        write_params(params, notes=summary)
        print(f"wrote {PARAMS_FILE}")


if __name__ == "__main__":
    main()
