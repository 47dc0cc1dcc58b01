"""Ethos-U55 cost model on whole lowerings: predicted transpose cycles versus Vela's Transpose rows.

Run: .venv/bin/python -m benchmarks.core.cost_model [--models a,b]
Per model, the stock lowering and the solver's (layout-solver compare): every delegate's TOSA file is
read back, the cost model prices its TRANSPOSE ops as Vela compiles them and the transposes Vela
inserts for REDUCE_SUM and MATMUL, and the sum is set against the cycles of the Transpose rows in
Vela 5.1's per-layer table (ethos-u55-128).
"""

from __future__ import annotations

import argparse

from layout_solver.zoo.models import ZOO
from layout_solver.zoo.runner import compare_named


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default=",".join(ZOO))
    args = parser.parse_args()
    print(
        "| model | lowering | TOSA transposes | Vela Transpose rows | Vela transpose cycles | predicted | error "
        "| Vela total cycles |"
    )
    print("|" + "---|" * 8, flush=True)
    worst = 0.0
    for name in args.models.split(","):
        result = compare_named(name, "ethos-u55-128").to_json()
        for side in ("stock", "solver"):
            m = result[side]
            if "error" in m:
                print(f"| {name} | {side} | failed: {m['error'][:200]} |", flush=True)
                continue
            vela, predicted = m["vela_transpose_cycles"], m["predicted_transpose_cycles"]
            error = abs(predicted - vela) / vela if vela else float(predicted > 0)
            worst = max(worst, error)
            print(
                f"| {name} | {side} | {m['tosa_transposes']} | {m['vela_transpose_rows']} | {vela:,} | "
                f"{predicted:,.0f} | {error:.1%} | {m['vela_total_cycles']:,} |",
                flush=True,
            )
    print(f"\nworst relative error: {worst:.1%} (target: within 10%)")


if __name__ == "__main__":
    main()
