"""Ethos-U55: stock executorch lowering versus the solver's memory-format stage, on the zoo.

Run: .venv/bin/python -m benchmarks.arm.zoo [--models a,b] [--input-order nchw|nhwc]
Per model, both lowerings in one run (layout-solver compare MODEL --target ethos-u55-128), Vela 5.1
cycle estimates for ethos-u55-128, equivalence through the TOSA reference model, and each program against
the quantized eager model (max quantization steps off). Then the
acceptance checks of the Arm issue.
"""

from __future__ import annotations

import argparse

from layout_solver.zoo.models import ARM_TRANSFORMERS, ARM_ZOO, CNNS
from layout_solver.zoo.runner import compare_named


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--models", default=",".join(ARM_ZOO))
    parser.add_argument(
        "--input-order",
        default="nchw",
        choices=["nchw", "nhwc"],
        help="graph-input contract of both sides (layout-solver compare --input-order)",
    )
    args = parser.parse_args()
    print(
        "| model | TOSA transposes stock / solver | Vela transpose rows | transpose cycles stock | solver | change "
        "| total cycles stock | solver | change | lower s stock | solver | solve s | gap | equivalent "
        "| vs quantized eager stock / solver |"
    )
    print("|" + "---|" * 15, flush=True)
    results = {}
    for name in args.models.split(","):
        r = compare_named(name, "ethos-u55-128", input_order=args.input_order).to_json()
        results[name] = r
        s, o = r.get("stock", {}), r.get("solver", {})
        if "error" in s or "error" in o:
            print(f"| {name} | stock: {s.get('error', 'ok')} | solver: {o.get('error', 'ok')} |", flush=True)
            continue
        tc = o["vela_transpose_cycles"] / s["vela_transpose_cycles"] - 1 if s["vela_transpose_cycles"] else 0.0
        tot = o["vela_total_cycles"] / s["vela_total_cycles"] - 1
        print(
            f"| {name} | {s['tosa_transposes']} / {o['tosa_transposes']} | {s['vela_transpose_rows']} / "
            f"{o['vela_transpose_rows']} | {s['vela_transpose_cycles']:,} | {o['vela_transpose_cycles']:,} | {tc:+.0%} "
            f"| {s['vela_total_cycles']:,} | {o['vela_total_cycles']:,} | {tot:+.1%} | {s['lower_seconds']:.1f} | "
            f"{o['lower_seconds']:.1f} | {o['solve_seconds']:.3f} | {o['gap']:.2%} | {r['equivalent']} | "
            f"{_eager(s)} / {_eager(o)} |",
            flush=True,
        )
    ok = {n: r for n, r in results.items() if "error" not in r.get("stock", {}) and "error" not in r.get("solver", {})}
    group = [n for n in ok if n in ARM_TRANSFORMERS]
    stock_t = sum(ok[n]["stock"]["vela_transpose_cycles"] for n in group)
    solver_t = sum(ok[n]["solver"]["vela_transpose_cycles"] for n in group)
    print()
    print(
        "- Vela total cycles <= stock on every model:",
        all(r["solver"]["vela_total_cycles"] <= r["stock"]["vela_total_cycles"] for r in ok.values()),
    )
    if stock_t:
        print(
            f"- transpose cycles over {', '.join(group)}: stock {stock_t:,}, solver {solver_t:,} "
            f"({solver_t / stock_t - 1:+.0%})"
        )
    print(
        "- CNN TOSA transposes (stock -> solver):",
        ", ".join(
            f"{n} {ok[n]['stock']['tosa_transposes']}->{ok[n]['solver']['tosa_transposes']}" for n in ok if n in CNNS
        ),
    )
    print(
        f"- worst lowering-time ratio: "
        f"{max(r['solver']['lower_seconds'] / r['stock']['lower_seconds'] for r in ok.values()):.2f}"
    )
    print("- equivalent on every model:", all(r["equivalent"] for r in ok.values()))
    print(
        "- every program within executorch's INT tolerance of the quantized eager model:",
        all(r[side].get("eager_within_tolerance") for r in ok.values() for side in ("stock", "solver")),
    )
    failed = sorted(set(results) - set(ok))
    if failed:
        print("- failed:", ", ".join(failed))


def _eager(side: dict) -> str:
    """The eager check in a cell: "ok (0.0)" (max quantization steps off), or why it could not run."""
    if side.get("eager_check") != "ok":
        return str(side.get("eager_check"))
    verdict = "" if side.get("eager_within_tolerance") else ", outside tolerance"
    return f"ok ({side.get('eager_quant_steps')}{verdict})"


if __name__ == "__main__":
    main()
