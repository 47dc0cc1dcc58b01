"""Calibrate the Ethos-U55 transpose model against Vela and measure how well it predicts.

    python -m cost_models.calibration.fit_ethos_u55 [--per-perm N] [--rank5 N] [--write]

Calibration runs TOSA graphs through Vela (seeds and shapes disjoint from the held-out sweep):
  * every NPU transpose op class the model distinguishes (which axes swap, the
    input's innermost dim 1..32 or wider, the output's innermost dim 4, 8, 16 or
    other, a middle axis of at most 2 or more), in several 3D views each, giving
    cycles per element;
  * random transposes with unit dims, whose decompositions contain op classes
    a one-op probe cannot produce (a swap that moves no data is a MemoryCopy
    on its own), each Vela row attributed to the replayed op;
  * a RESCALE followed by a TRANSPOSE (it cannot fuse into either side), giving
    the cost of a standalone RESCALE per element;
  * transposes that move no data (Vela makes them MemoryCopy ops), giving the
    copy cost per byte and its fixed part.
The held-out sweep is independent of all of that: random transposes of ranks
2-5 (every permutation up to rank 4, a sample at rank 5, 1K-1M elements), each
compiled by Vela both as given and in its canonical form, against the model's
prediction for the same form.
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

from cost_models.ethos_u55 import (
    DTYPE_BYTES,
    PARAMS_VERSION,
    SWAP_HC,
    SWAP_HW,
    SWAP_WC,
    WIDEST_INNER,
    DtypeRates,
    EthosU55Params,
    NpuTranspose,
    UnsupportedTranspose,
    canonical_transpose,
    is_identity,
    moves_no_data,
    npu_transposes,
    rate_key,
    transpose_cost,
)
from cost_models.vela import (
    VelaUnsupported,
    measure_transpose,
    rescale_then_transpose_probe,
    run_vela,
    vela_version,
)

DIMS = [2, 3, 4, 7, 8, 12, 16, 24, 32, 48, 64, 96, 128, 196, 256]
PARAMS_FILE = Path(__file__).resolve().parents[1] / "data" / f"ethos_u55_v{PARAMS_VERSION}.json"
_PERM_OF_SWAP = {SWAP_HW: (1, 0, 2), SWAP_WC: (0, 2, 1), SWAP_HC: (2, 1, 0)}
WIDE_INNER = (40, 64, 196)  # stand-ins for "wider than WIDEST_INNER"
OTHER_OUTER = (2, 3, 12, 24, 48, 64, 96, 196)  # stand-ins for an output innermost dim that is not 4, 8 or 16


def _noop(*_):
    pass


# --- calibration sweeps --------------------------------------------------------------------------------------------


@dataclass
class OpCase:
    """One calibration case: an NPU transpose op measured alone through Vela."""

    op: NpuTranspose
    dtype: str
    cycles: int


def _fill(view: list[int], free: int, min_elements: int = 2048) -> tuple[int, int, int]:
    """Grow axis `free` of a 3D view until the op moves at least min_elements."""
    view = list(view)
    view[free] *= max(1, -(-min_elements // math.prod(view)))
    return tuple(view)


def op_views(inner_in: int, out: int | None, swap: str) -> list[tuple[int, int, int]]:
    """3D views of one op class, with the axes outside the key varied.

    The other axes still matter a little: they steer Vela's block search, whose
    block width sets the read burst when the input's innermost dim exactly
    fills a block (int8 8, int16 2). Where its candidates tie, float rounding
    decides, so both outcomes must be seen; the views vary widely for that.
    """
    if swap == SWAP_HW:
        return [
            _fill([h, w, inner_in], 0) for h, w in ((12, 32), (64, 7), (3, 96), (5, 48), (196, 2), (1000, 2), (64, 1))
        ]
    if swap == SWAP_WC:
        return [_fill([h, out, inner_in], 0, n) for h, n in ((24, 2048), (196, 8192), (5, 1024), (288, 0), (2688, 0))]
    return [
        _fill([out, w, inner_in], 1, n)
        for w, n in ((24, 2048), (196, 8192), (3, 4096), (96, 2048), (2, 1024), (2, 8192), (1, 2048))
    ]


def op_sweep(dtypes=("int8", "int16"), progress=_noop, inners=None) -> list[OpCase]:
    """One-op Vela runs covering every rate key of the model (or only the given input innermost dims)."""
    inners = list(inners or list(range(1, WIDEST_INNER + 1)) + list(WIDE_INNER))
    jobs = []
    for dtype, inner in itertools.product(dtypes, inners):
        jobs += [(dtype, view, SWAP_HW) for view in op_views(inner, None, SWAP_HW)]
        for out, swap in itertools.product((4, 8, 16) + OTHER_OUTER, (SWAP_WC, SWAP_HC)):
            jobs += [(dtype, view, swap) for view in op_views(inner, out, swap)]
    # Tiny ops, where Vela's per-op floor shows.
    jobs += [
        (dtype, view, swap)
        for dtype in dtypes
        for view in ((1, 2, 2), (2, 2, 2), (2, 1, 2), (1, 2, 3))
        for swap in (SWAP_HW, SWAP_WC, SWAP_HC)
    ]
    cases = []
    for i, (dtype, view, swap) in enumerate(jobs):
        progress(i + 1, len(jobs))
        try:
            m = measure_transpose(view, _PERM_OF_SWAP[swap], dtype)
        except VelaUnsupported:
            continue
        if m.npu_ops == 1 and m.rows[0][0] == "Transpose":
            cases.append(OpCase(NpuTranspose(view, swap), dtype, m.cycles))
    return cases


def decomposed_sweep(
    seed: int = 1, count: int = 3000, dtypes=("int8", "int16", "int32"), progress=_noop
) -> list[OpCase]:
    """Ops seen inside Vela's decompositions of random transposes, unit dims included.

    Some op classes only occur there: a swap that moves no data (e.g. W<->C
    with C = 1) compiles to a MemoryCopy when probed alone, but is a
    Transpose op inside a decomposition. Each Vela row is attributed to the
    op the replayed decomposition puts at that position.
    """
    rng = random.Random(seed)
    dims = (1, 2, 3, 4, 7, 8, 12, 16, 24, 64, 196)
    cases = []
    for i in range(count):
        progress(i + 1, count)
        rank = rng.randint(2, 5)
        shape = tuple(rng.choice(dims) for _ in range(rank))
        perm = tuple(rng.sample(range(rank), rank))
        dtype = rng.choice(dtypes)
        if math.prod(shape) > 1_000_000 or moves_no_data(shape, perm):
            continue
        try:
            ops = npu_transposes(shape, perm, dtype)
            m = measure_transpose(shape, perm, dtype)
        except (UnsupportedTranspose, VelaUnsupported):
            continue
        if len(ops) == m.npu_ops:
            cases += [OpCase(op, dtype, cycles) for op, (kind, cycles) in zip(ops, m.rows) if kind == "Transpose"]
    return cases


@dataclass
class CopyCase:
    """One calibration case: a memory copy (identity transpose) measured through Vela."""

    elements: int
    dtype: str
    cycles: int


def copy_sweep(dtypes=("int8", "int16"), progress=_noop) -> list[CopyCase]:
    """Transposes that only move unit dims; Vela emits one MemoryCopy for each."""
    jobs = [
        (dtype, (1, a, b, 1))
        for dtype in dtypes
        for a, b in ((64, 64), (256, 64), (96, 196), (1024, 64), (4096, 64), (3136, 96), (2048, 256))
    ]
    cases = []
    for i, (dtype, shape) in enumerate(jobs):
        progress(i + 1, len(jobs))
        m = measure_transpose(shape, (0, 3, 1, 2), dtype)
        if m.npu_ops == 1 and m.rows[0][0] == "MemoryCopy":
            cases.append(CopyCase(math.prod(shape), dtype, m.cycles))
    return cases


RESCALE_SHAPES = ((1, 8, 8, 64), (1, 16, 16, 16), (1, 14, 14, 96), (1, 36, 1, 192), (1, 64, 8, 8), (1, 28, 28, 24))


def rescale_sweep(
    pairs=(("int8", "int32"), ("int32", "int8"), ("int16", "int32"), ("int32", "int16")), progress=_noop
) -> dict[str, float]:
    """Median cycles per element of a standalone RESCALE (Vela's rows other than the probe's Transpose)."""
    import tempfile

    rates = {}
    for i, (din, dout) in enumerate(pairs):
        progress(i + 1, len(pairs))
        per_element = []
        for shape in RESCALE_SHAPES:
            with tempfile.TemporaryDirectory() as tmp:
                rows = run_vela(rescale_then_transpose_probe(shape, din, dout).serialize(), Path(tmp))
            cycles = sum(
                int(float(r["Op Cycles"])) for r in rows if r["Target"] == "NPU" and r["NNG Operator"] != "Transpose"
            )
            per_element.append(cycles / math.prod(shape))
        rates[f"{din}->{dout}"] = round(statistics.median(per_element), 4)
    return rates


def minimax_rate(observed: list[float]) -> float:
    """The rate whose worst relative error over the observed rates is smallest.

    Within one key Vela's rate can still take two values (its block search
    breaks cost ties on float rounding); this splits the difference so neither
    is missed by much.
    """
    low, high = min(observed), max(observed)
    return 2 * low * high / (low + high)


def fit(
    single: list[OpCase],
    decomposed: list[OpCase],
    copy_cases: list[CopyCase],
    standalone_rescale: dict[str, float] | None = None,
) -> EthosU55Params:
    """Cycles per element for each rate key (minimax_rate), least squares for the copy line.

    Keys come from the one-op probes; rows attributed inside decompositions
    only fill the keys a probe cannot reach, with their median (they also
    carry the context of their neighbours, so they are the noisier source).
    """
    import numpy as np

    tables = {}
    for dtype in sorted({c.dtype for c in single}):

        def rates_from(cases, summary, min_elements, dtype=dtype):
            per_key = defaultdict(list)
            for c in cases:
                if c.dtype == dtype and c.op.elements >= min_elements:
                    per_key[rate_key(c.op)].append(c.cycles / c.op.elements)
            return {k: round(summary(v), 5) for k, v in per_key.items()}

        # Small ops sit on Vela's per-op floor, so they say nothing about the rate.
        rates = {**rates_from(decomposed, statistics.median, 512), **rates_from(single, minimax_rate, 9)}
        tiny = [c.cycles for c in single if c.dtype == dtype and c.op.elements <= 8]
        copies = [c for c in copy_cases if c.dtype == dtype]
        nbytes = np.array([c.elements * DTYPE_BYTES[dtype] for c in copies], dtype=float)
        (slope, fixed), *_ = np.linalg.lstsq(
            np.stack([nbytes, np.ones_like(nbytes)], 1), np.array([c.cycles for c in copies], dtype=float), rcond=None
        )
        tables[dtype] = DtypeRates(
            dict(sorted(rates.items())),
            round(statistics.median(rates.values()), 5),
            float(statistics.median(tiny)),
            round(float(slope), 5),
            round(float(fixed), 1),
        )
    return EthosU55Params(PARAMS_VERSION, vela_version(), tables, dict(standalone_rescale or {}))


# --- held-out sweep ------------------------------------------------------------------------------------------------


@dataclass
class Case:
    """One whole transpose measured through Vela, to check the model's prediction."""

    shape: tuple[int, ...]
    perm: tuple[int, ...]
    dtype: str
    form: str  # "as_given" or "canonical"
    vela_cycles: int
    vela_ops: int


def sweep(
    seed: int, per_perm: int = 4, rank5: int = 40, dtypes=("int8",), progress=_noop, unit_dims: bool = False
) -> list[Case]:
    """Random transposes, each compiled as given and in canonical form (unit_dims: batch-1 style shapes too)."""
    rng = random.Random(seed)
    dims = DIMS + [1] * 4 if unit_dims else DIMS

    def shape_for(rank: int) -> tuple[int, ...]:
        while True:
            shape = tuple(rng.choice(dims) for _ in range(rank))
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
        progress(i + 1, len(jobs))
        dtype = rng.choice(dtypes)
        cshape, cperm = canonical_transpose(shape, perm)
        for form, (s, p) in (("as_given", (shape, perm)), ("canonical", (cshape, cperm))):
            if is_identity(p) or (form == "canonical" and (s, p) == (shape, perm)):
                continue  # nothing to move, or the same graph as the as-given case
            try:
                m = measure_transpose(s, p, dtype)
            except VelaUnsupported:
                continue  # executorch would chunk it first (DecomposePermuteForU55Pass)
            cases.append(Case(tuple(s), tuple(p), dtype, form, m.cycles, m.npu_ops))
    return cases


def errors(cases: list[Case], params: EthosU55Params) -> list[float]:
    """Relative error of the model against Vela, per case, for the form Vela compiled."""
    return [
        abs(transpose_cost(c.shape, c.perm, c.dtype, params=params, form="as_given").cycles - c.vela_cycles)
        / c.vela_cycles
        for c in cases
    ]


def op_count_matches(cases: list[Case]) -> float:
    """Fraction of cases where the replayed decomposition has Vela's op count (data-free ones are one MemoryCopy)."""
    return statistics.mean(
        (1 if moves_no_data(c.shape, c.perm) else len(npu_transposes(c.shape, c.perm, c.dtype))) == c.vela_ops
        for c in cases
    )


def accuracy(cases: list[Case], params: EthosU55Params) -> dict:
    """The model's relative error on measured cases (median, 90th percentile, worst) and how often its op count
    matches Vela's."""
    errs = sorted(errors(cases, params))
    return {
        "cases": len(errs),
        "median_rel_error": round(statistics.median(errs), 4),
        "p90_rel_error": round(errs[int(0.9 * (len(errs) - 1))], 4),
        "max_rel_error": round(errs[-1], 4),
        "op_count_match": round(op_count_matches(cases), 4),
    }


def write_params(params: EthosU55Params, path: Path = PARAMS_FILE, notes: dict | None = None) -> None:
    """Write fitted parameters (and `notes`) as JSON to `path`."""
    data = {
        "version": params.version,
        "vela_version": params.vela_version,
        "accelerator": "ethos-u55-128",
        "description": "One table per dtype. op_rates: cycles per element of one U55 transpose op, keyed "
        "'<keep_inner|move_inner>:<input innermost dim, 33 = wider than 32>:<output innermost dim: "
        "4, 8, 16 or other>:<narrow if the 3D view's middle axis is 1-2, else wide>'. keep_inner is the H<->W swap; move_inner swaps the innermost axis "
        "(W<->C or H<->C). default_rate prices a key the calibration did not reach; min_op_cycles is the "
        "floor of one op (tiny ops are not memory bound). A transpose "
        "that moves no data is a MemoryCopy: bytes * copy_cycles_per_byte + copy_fixed_cycles. "
        "standalone_rescale: cycles per element of a per-tensor RESCALE Vela cannot fuse into a "
        "neighbouring compute op (a transpose sits between), by '<input dtype>-><output dtype>'. "
        "Measured with one-op Vela runs (ethos-u55-128, Ethos_U55_High_End_Embedded, Shared_Sram).",
        "tables": {
            dtype: {
                "default_rate": t.default_rate,
                "min_op_cycles": t.min_op_cycles,
                "copy_cycles_per_byte": t.copy_cycles_per_byte,
                "copy_fixed_cycles": t.copy_fixed_cycles,
                "op_rates": t.op_rates,
            }
            for dtype, t in params.tables.items()
        },
        "standalone_rescale": params.standalone_rescale,
        **({"fit": notes} if notes else {}),
    }
    path.write_text(json.dumps(data, indent=1) + "\n")


def calibrate(
    dtypes=("int8", "int16", "int32"), progress=_noop, inners=None, decomposed_count: int = 3000
) -> tuple[EthosU55Params, dict]:
    """Run the calibration sweeps and fit. `inners` / `decomposed_count` shrink it (e.g. for a quick look)."""
    single = op_sweep(dtypes, progress, inners)
    decomposed = decomposed_sweep(count=decomposed_count, dtypes=dtypes, progress=progress)
    copies = copy_sweep(dtypes, progress)
    rescales = rescale_sweep(progress=progress)
    return fit(single, decomposed, copies, rescales), {
        "single_op_cases": len(single),
        "decomposed_op_cases": len(decomposed),
        "copy_cases": len(copies),
    }


def main() -> None:
    """Measure the calibration cases with Vela, fit the rates and report accuracy."""
    from tqdm import tqdm

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--per-perm", type=int, default=12)
    parser.add_argument("--rank5", type=int, default=150)
    parser.add_argument("--seed", type=int, default=2, help="held-out sweep seed")
    parser.add_argument("--write", action="store_true", help="write the fitted parameters file")
    args = parser.parse_args()
    dtypes = ("int8", "int16")
    bar = tqdm(desc="vela", unit="run")

    def progress(done, total):
        bar.total = total
        bar.n = done
        bar.refresh()

    params, notes = calibrate(progress=progress)  # int32 too: Vela's reductions transpose int32 accumulators
    held = [
        c
        for dt in dtypes
        for c in sweep(seed=args.seed, per_perm=args.per_perm, rank5=args.rank5, dtypes=(dt,), progress=progress)
    ]
    with_units = [
        c
        for dt in dtypes
        for c in sweep(
            seed=args.seed,
            per_perm=args.per_perm // 4,
            rank5=args.rank5 // 4,
            dtypes=(dt,),
            progress=progress,
            unit_dims=True,
        )
    ]
    bar.close()
    summary = {
        **notes,
        **{
            f"held_out_{dt}_{form}": accuracy([c for c in held if c.dtype == dt and c.form == form], params)
            for dt in dtypes
            for form in ("as_given", "canonical")
        },
        "held_out_all": accuracy(held, params),
        "held_out_with_unit_dims_moving_data": accuracy(
            [c for c in with_units if not moves_no_data(c.shape, c.perm)], params
        ),
        # Data-free transposes left in a graph compile to MemoryCopy ops, priced by a coarse line.
        "held_out_with_unit_dims_memory_copies": accuracy(
            [c for c in with_units if moves_no_data(c.shape, c.perm)], params
        ),
    }
    print(json.dumps(summary, indent=1))
    if args.write:
        write_params(params, notes=summary)
        print(f"wrote {PARAMS_FILE}")


if __name__ == "__main__":
    main()
