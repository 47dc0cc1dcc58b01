"""Vulkan: stock TagMemoryMetaPass versus the solver pass on the built-in zoo.

Run: .venv/bin/python -m benchmarks.vulkan.zoo [--models a,b] [--repeat N]
Prints a markdown table (transitions, their modelled cost, pass and lowering
times, gap) and the acceptance checks of the Vulkan issue:
transitions <= stock on every model; >= 50% fewer summed over the transformer
and ConvNeXt models; gap 0; solver pass <= 3x the stock pass on each model.
Pass times are the median over --repeat lowerings.
"""

from __future__ import annotations

import argparse
import statistics

from layout_solver.zoo.models import TRANSFORMERS, ZOO
from layout_solver.zoo.runner import compare_named


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    header = (
        "model",
        "stock transitions",
        "solver transitions",
        "stock cost us",
        "solver cost us",
        "stock pass ms",
        "solver pass ms",
        "pass ratio",
        "stock lower s",
        "solver lower s",
        "gap",
    )
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header), flush=True)
    rows = {}
    for model in args.models.split(","):
        runs = [compare_named(model, "vulkan").to_json() for _ in range(args.repeat)]
        first = runs[0]
        if "error" in first.get("stock", {}) or "error" in first.get("solver", {}):
            print(
                f"| {model} | stock: {first['stock'].get('error', 'ok')} | solver: {first['solver'].get('error', 'ok')} |"
            )
            rows[model] = None
            continue
        s_pass = statistics.median(r["stock"]["pass_seconds"] for r in runs)
        o_pass = statistics.median(r["solver"]["pass_seconds"] for r in runs)
        s, o = first["stock"], first["solver"]
        rows[model] = (s, o, s_pass, o_pass)
        print(
            f"| {model} | {s['transitions']} | {o['transitions']} | {s['transition_cost']:.1f} | "
            f"{o['transition_cost']:.1f} | {s_pass * 1e3:.1f} | {o_pass * 1e3:.1f} | {o_pass / s_pass:.2f} | "
            f"{s['lower_seconds']:.1f} | {o['lower_seconds']:.1f} | {o['gap']:.2%} |",
            flush=True,
        )
    ok = {m: r for m, r in rows.items() if r}
    group = [m for m in ok if m in TRANSFORMERS]
    stock_t = sum(ok[m][0]["transitions"] for m in group)
    solver_t = sum(ok[m][1]["transitions"] for m in group)
    print()
    print(
        f"- transitions <= stock on every model: {all(r[1]['transitions'] <= r[0]['transitions'] for r in ok.values())}"
    )
    print(
        f"- transformer + ConvNeXt models ({', '.join(group)}): stock {stock_t}, solver {solver_t}, "
        f"reduction {1 - solver_t / stock_t if stock_t else 0:.0%}"
    )
    print(f"- gap 0 on every model: {all(r[1]['gap'] == 0 for r in ok.values())}")
    print(f"- worst pass-time ratio: {max(r[3] / r[2] for r in ok.values()):.2f}")
    failed = [m for m, r in rows.items() if r is None]
    if failed:
        print(f"- failed to lower: {', '.join(failed)}")


if __name__ == "__main__":
    main()
