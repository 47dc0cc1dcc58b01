"""Ethos-U55: stock lowering versus stock + canonical transpose write-back, with equivalence.

Run: .venv/bin/python -m benchmarks.arm.canonical [--models a,b]
Both sides are measured in one run on the same quantized model. Equivalence: every delegate's .tosa
of both sides runs on the same random int8 inputs in the TOSA reference model; outputs must be identical.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
from pathlib import Path

from layout_solver.arm.hooks import canonical_transposes
from layout_solver.lowering.quiet import quiet
from layout_solver.targets.ethos_u.equivalence import compare_lowerings
from layout_solver.targets.ethos_u.measure import lower_ethos_u
from layout_solver.zoo.models import ARM_ZOO, build


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default=",".join(ARM_ZOO))
    args = parser.parse_args()
    print(
        "| model | stock transposes (TOSA / Vela rows) | canonical | stock transpose cycles | canonical | "
        "change | stock total cycles | canonical | stock lower s | canonical | equivalent |"
    )
    print("|" + "---|" * 11, flush=True)
    totals = {"stock": 0, "canonical": 0}
    for name in args.models.split(","):
        module, inputs = build(name)
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(io.StringIO()):
            stock = lower_ethos_u(module, inputs, keep_tosa=Path(tmp) / "stock")
            with canonical_transposes():
                canon = lower_ethos_u(module, inputs, keep_tosa=Path(tmp) / "canonical")
            same = compare_lowerings(stock.tosa_files, canon.tosa_files)
        s, c = stock.metrics(), canon.metrics()
        totals["stock"] += s["vela_transpose_cycles"]
        totals["canonical"] += c["vela_transpose_cycles"]
        change = c["vela_transpose_cycles"] / s["vela_transpose_cycles"] - 1 if s["vela_transpose_cycles"] else 0
        print(
            f"| {name} | {s['tosa_transposes']} / {s['vela_transpose_rows']} | {c['tosa_transposes']} / "
            f"{c['vela_transpose_rows']} | {s['vela_transpose_cycles']:,} | {c['vela_transpose_cycles']:,} | "
            f"{change:+.0%} | {s['vela_total_cycles']:,} | {c['vela_total_cycles']:,} | {s['lower_seconds']:.1f} | "
            f"{c['lower_seconds']:.1f} | {same.equivalent} (max diff {same.max_abs_diff:g}) |",
            flush=True,
        )
    print()
    print(
        f"- transpose cycles summed over the zoo: stock {totals['stock']:,}, canonical {totals['canonical']:,} "
        f"({totals['canonical'] / totals['stock'] - 1:+.0%})"
    )


if __name__ == "__main__":
    with quiet():
        main()
