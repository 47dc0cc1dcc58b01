"""Ethos-U55: measure the stock executorch lowering of the zoo (the baseline the solver must beat).

Run: .venv/bin/python -m benchmarks.arm.stock [--models a,b]
Per model: TOSA transposes, Vela transpose rows and cycles, total cycles, NPU/CPU ops, lowering time,
and the cost model's prediction of Vela's Transpose rows from the same TOSA files.
"""

from __future__ import annotations

import argparse

from layout_solver.lowering.quiet import quiet
from layout_solver.targets.ethos_u.measure import lower_ethos_u
from layout_solver.zoo.models import ARM_ZOO, ZOO, build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default=",".join(ARM_ZOO))
    args = parser.parse_args()
    cols = [
        "tosa_transposes",
        "vela_transpose_rows",
        "vela_transpose_cycles",
        "vela_total_cycles",
        "npu_ops",
        "cpu_ops",
        "lower_seconds",
        "predicted_transpose_cycles",
    ]
    print("| model | " + " | ".join(cols) + " | transpose % |")
    print("|" + "---|" * (len(cols) + 2), flush=True)
    for name in args.models.split(","):
        if name not in ZOO:
            raise SystemExit(f"unknown model {name}")
        module, inputs = build(name)
        try:
            m = lower_ethos_u(module, inputs).metrics()
        except Exception as exc:  # noqa: BLE001 - recorded, the rest go on
            print(f"| {name} | failed: {type(exc).__name__}: {str(exc)[:200]} |", flush=True)
            continue
        share = m["vela_transpose_cycles"] / m["vela_total_cycles"] if m["vela_total_cycles"] else 0
        print(f"| {name} | " + " | ".join(f"{m[c]:,}" for c in cols) + f" | {share:.1%} |", flush=True)


if __name__ == "__main__":
    with quiet():
        main()
