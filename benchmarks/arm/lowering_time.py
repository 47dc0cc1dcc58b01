"""Ethos-U lowering wall time: stock executorch versus the solver's stage, same process, same int8 program.

Run: .venv/bin/python -m benchmarks.arm.lowering_time [--models a,b] [--target ethos-u55-128] [--rounds 3]
     [--min-seconds 60] [--out F.md]
(a model is a zoo name or path/to/file.py:factory, e.g. layout_solver/zoo/outside.py:levit)

Per model the module is quantized once; then stock and solver lowerings of copies of that program alternate
for at least --rounds rounds, and until each side has lowered for --min-seconds (stock first in odd rounds,
solver first in even ones, so drift and warm caches fall on both sides), each from a collected heap with the
cyclic collector paused (as timeit does) and timed around `to_edge_transform_and_lower` (Vela's compilation of
every delegate included).
The stage's own time is the solver pass (its canonical-transpose rewrite and the recompile the pass manager
does after it included), timed inside the same lowerings.
The solver side is `solver_layouts()` as shipped (verify="vela"), timed with warm caches: before the rounds,
one untimed solver lowering stores the Vela probes, the stage's answer and the delegate's verification decision, as any earlier
lowering of the same model on the machine would. The cold cost is measured once per model before that: a
solver lowering with empty caches (its probes compiled, the delegate lowered both ways) next to a stock one.
Prints, and writes to --out, the medians and the acceptance checks of the Arm issue: lowering with the
solver no slower than stock on every model, and its stage at most 5% of the lowering. Besides the ratio of the
two sides' medians, each round's own ratio (its solver lowering over its stock lowering, run back to back) is
summarised by its median and a bootstrap 95% confidence interval: pairing cancels the drift between rounds
(±5-7% on the small CNNs), which the ratio of medians does not.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import io
import os
import statistics
import tempfile
import time

import numpy as np
from scipy import stats

from benchmarks import harness
from cost_models.vela import CACHE_ENV
from layout_solver.arm.hooks import solver_layouts
from layout_solver.arm.passes import SolverLayoutPass
from layout_solver.core.solve import gc_paused
from layout_solver.lowering.quiet import quiet
from layout_solver.targets.ethos_u.measure import lower_ethos_u, quantize_for
from layout_solver.zoo.models import ARM_ZOO, build


@contextlib.contextmanager
def timing(pass_types, sink: list[float]):
    """Adds the seconds each run of these passes takes to `sink`, as the Arm pass manager runs it: the pass and
    the recompile of the graph module it modified (benchmark instrumentation)."""
    from executorch.backends.arm._passes import arm_pass_manager

    adapter = arm_pass_manager._ExportedProgramGraphPassAdapter  # wraps each pass of the Arm pipeline (1.5.1)
    original = adapter.call

    def call(self, exported_program):
        if not isinstance(self.graph_pass, pass_types):
            return original(self, exported_program)
        start = time.perf_counter()
        try:
            return original(self, exported_program)
        finally:
            sink.append(time.perf_counter() - start)

    adapter.call = call
    try:
        yield sink
    finally:
        adapter.call = original


def lower_once(module, inputs, quantized, side: str, target: str = "ethos-u55-128") -> tuple[float, float, float]:
    """(lowering wall seconds, its CPU seconds, seconds in the solver's pass) of one lowering of a copy of
    `quantized`."""
    stage: list[float] = []
    # The cyclic collector is paused during each timed lowering, as timeit does: a full collection of the large
    # lowering heap takes ~0.4 s and falls on one side or the other by chance (a profile of both sides of
    # mobilenet_v1_025 found the same calls, and 0.3 s of collection inside one typing helper on one side only).
    gc.collect()
    with quiet(), contextlib.redirect_stdout(io.StringIO()), gc_paused():
        if side == "stock":
            lowered = lower_ethos_u(module, inputs, target, quantized=copy.deepcopy(quantized))
        else:
            with timing((SolverLayoutPass,), stage), solver_layouts():
                lowered = lower_ethos_u(module, inputs, target, quantized=copy.deepcopy(quantized))
    return lowered.lower_seconds, lowered.lower_cpu_seconds, sum(stage)


def paired_ratio(stock: list[float], solver: list[float]) -> tuple[float, float, float]:
    """Median of the per-round ratios solver / stock (each round lowers both sides back to back) and the
    bootstrap 95% confidence interval of that median (seeded, so a re-run of the same times prints the same);
    with fewer than 3 rounds, their range instead."""
    ratios = np.asarray(solver) / np.asarray(stock)
    if len(ratios) < 3:
        median = float(np.median(ratios))
        return median, float(ratios.min()), float(ratios.max())
    ci = stats.bootstrap((ratios,), np.median, confidence_level=0.95, rng=np.random.default_rng(0)).confidence_interval
    return float(np.median(ratios)), float(ci.low), float(ci.high)


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--models", default=",".join(ARM_ZOO))
    parser.add_argument("--target", default="ethos-u55-128", help="an Ethos-U configuration")
    parser.add_argument("--rounds", type=int, default=3, help="at least this many rounds per model")
    parser.add_argument(
        "--min-seconds",
        type=float,
        default=60.0,
        help="and more rounds until each side has lowered for this long (small models: their round-to-round "
        "spread is larger than the difference being measured)",
    )
    args = parser.parse_args()
    lines = [
        harness.provenance(
            f"{args.target}; medians of interleaved rounds, warm caches, each from a collected heap with the cyclic "
            "collector paused"
        ),
        "",
        (
            "| model | stock s (median) | solver s (median) | ratio | CPU s stock / solver | CPU ratio | stage s | "
            "stage share | rounds | stock s min-max | solver s min-max | paired ratio (95% CI) | cold: solver s / "
            "stock s |"
        ),
        "|" + "---|" * 13,
    ]
    print("\n".join(lines), flush=True)
    ratios, cpu_ratios, shares, paired, cold = {}, {}, {}, {}, {}
    for name in args.models.split(","):
        module, inputs = build(name)
        quantized = quantize_for(module, inputs, args.target)
        with tempfile.TemporaryDirectory() as empty:  # cold: no probe answered, no decision stored
            os.environ[CACHE_ENV], saved = empty, os.environ.get(CACHE_ENV)
            try:
                cold[name] = (lower_once(module, inputs, quantized, "solver", args.target)[0],
                              lower_once(module, inputs, quantized, "stock", args.target)[0])  # fmt: skip
            finally:
                os.environ.pop(CACHE_ENV) if saved is None else os.environ.__setitem__(CACHE_ENV, saved)
        lower_once(module, inputs, quantized, "solver", args.target)  # warms this machine's caches
        times: dict[str, list[float]] = {"stock": [], "solver": []}
        cpu: dict[str, list[float]] = {"stock": [], "solver": []}
        stage: list[float] = []
        k = 0
        while k < args.rounds or min(sum(t) for t in times.values()) < args.min_seconds:
            for side in ("stock", "solver") if k % 2 == 0 else ("solver", "stock"):
                seconds, cpu_seconds, in_stage = lower_once(module, inputs, quantized, side, args.target)
                times[side].append(seconds)
                cpu[side].append(cpu_seconds)
                if side == "solver":
                    stage.append(in_stage)
            k += 1
        stock, solver = statistics.median(times["stock"]), statistics.median(times["solver"])
        ratios[name], shares[name] = solver / stock, statistics.median(stage) / solver
        cpu_stock, cpu_solver = statistics.median(cpu["stock"]), statistics.median(cpu["solver"])
        cpu_ratios[name] = cpu_solver / cpu_stock
        paired[name] = paired_ratio(times["stock"], times["solver"])
        row = (
            f"| {name.rpartition(':')[2]} | {stock:.2f} | {solver:.2f} | {ratios[name]:.3f} | "
            f"{cpu_stock:.2f} / {cpu_solver:.2f} | {cpu_ratios[name]:.3f} | {statistics.median(stage):.3f} | "
            f"{shares[name]:.1%} | {k} | {min(times['stock']):.2f}-{max(times['stock']):.2f} | "
            f"{min(times['solver']):.2f}-{max(times['solver']):.2f} | "
            f"{paired[name][0]:.3f} ({paired[name][1]:.3f}-{paired[name][2]:.3f}) | "
            f"{cold[name][0]:.2f} / {cold[name][1]:.2f} ({cold[name][0] / cold[name][1]:.2f}x) |"
        )
        lines.append(row)
        print(row, flush=True)
    worst_ratio, worst_share = max(ratios, key=ratios.get), max(shares, key=shares.get)
    summary = [
        "",
        (
            f"- lowering with the solver no slower than stock (median ratio <= 1.00) on every model: "
            f"{all(r <= 1.0 for r in ratios.values())} (worst {ratios[worst_ratio]:.3f}, {worst_ratio})"
        ),
        (
            f"- the same in CPU time (less exposed to other load on the machine): "
            f"{all(r <= 1.0 for r in cpu_ratios.values())} (worst {max(cpu_ratios.values()):.3f})"
        ),
        (
            f"- the same on each round's paired ratio (median): {all(p[0] <= 1.0 for p in paired.values())} "
            f"(worst {max(p[0] for p in paired.values()):.3f}); upper end of its 95% CI below 1.00 (faster beyond "
            f"noise) on {sum(p[2] < 1.0 for p in paired.values())} of {len(paired)} models; its lower end above "
            f"1.00 (slower beyond noise) on none: {all(p[1] <= 1.0 for p in paired.values())}"
        ),
        (
            f"- solver stage (solve + passes) <= 5% of the lowering on every model: "
            f"{all(s <= 0.05 for s in shares.values())} (worst {shares[worst_share]:.1%}, {worst_share})"
        ),
        (
            "- cold caches (the first lowering of a model on a machine: every probe compiled, the delegate lowered "
            "with and without the stage): solver / stock "
            + ", ".join(f"{n.rpartition(':')[2]} {c[0] / c[1]:.2f}x" for n, c in cold.items())
        ),
    ]
    lines += summary
    print("\n".join(summary))
    harness.write(lines, args.out)


if __name__ == "__main__":
    main()
