"""Solver benchmark: synthetic CNN-like and transformer-like graphs, 1k-100k ops, 2-6 labels.

Run: make bench   (or .venv/bin/python benchmarks/bench_solver.py [--quick] [--markdown])
Prints one row per graph: size, decomposition, memo hits, solver methods, timings, gap.
Targets (solver-core issue): 1,200 ops <= 50 ms; 100,000 ops <= 5 s with gap 0; ~linear growth.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from layout_solver import solve  # noqa: E402
from layout_solver.synthetic import cnn_like, transformer_like  # noqa: E402

# ops per block of each generator, to size graphs by op count
CNN_OPS_PER_BLOCK = 6.75
TRANSFORMER_OPS_PER_BLOCK = 15


def graphs(sizes: list[int]):
    for ops in sizes:
        for labels in (2, 4, 6):
            yield f"cnn x{labels}", cnn_like(max(1, round(ops / CNN_OPS_PER_BLOCK)), n_labels=labels)
        for labels in (3, 4, 6):
            yield f"transformer x{labels}", transformer_like(max(1, round(ops / TRANSFORMER_OPS_PER_BLOCK)), labels)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1.2k and 10k ops only")
    parser.add_argument("--time-limit", type=float, default=60.0)
    args = parser.parse_args()
    sizes = [1200, 10_000] if args.quick else [1200, 10_000, 100_000]
    header = ("graph", "ops", "values", "components", "blocks", "memo hits", "methods",
              "compile ms", "solve ms", "total ms", "us/op", "gap")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, problem in graphs(sizes):
        solve(problem, time_limit=args.time_limit) if len(problem.ops) < 2000 else None  # warm imports/caches
        t0 = time.perf_counter()
        solution = solve(problem, time_limit=args.time_limit)
        wall = time.perf_counter() - t0
        methods = ", ".join(f"{k} {v}" for k, v in sorted(solution.components.by_method.items()))
        row = (name, f"{len(problem.ops):,}", f"{len(problem.values):,}", f"{solution.components.count:,}",
               f"{solution.components.blocks:,}", f"{solution.components.memo_hits:,}", methods,
               f"{solution.timings['compile'] * 1e3:.0f}", f"{solution.timings['solve'] * 1e3:.0f}",
               f"{wall * 1e3:.0f}", f"{wall * 1e6 / len(problem.ops):.0f}", f"{solution.gap:.2%}")
        print("| " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
