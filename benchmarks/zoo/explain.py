"""`explain` on every zoo model: does it draw each one, and do the overlays' prices add up to what `compare`
reports for the same lowering?

Run: .venv/bin/python -m benchmarks.zoo.explain [--targets ethos-u55-128,ethos-u85-256,vulkan] [--models a,b]
     [--out zoo-out/explain-bench] [--jobs 2] [--report benchmarks/results/explain.md]

The zoo runs with --explain (`layout-solver zoo --explain`: each job lowers its model once each way with the passes
keeping their graphs, and draws both sides into OUT/explain/MODEL-TARGET); this reads every explain.json and
tabulates, per model and target: graphs and ops drawn, conversions stock / solver, the overlay's total against the
comparison's figure (`vela_total_cycles` on Ethos-U, `modelled_us` on Vulkan and XNNPACK) on both sides.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from layout_solver.zoo.models import ZOO
from layout_solver.zoo.runner import explain_dir, run_zoo


def _agrees(total: dict) -> bool:
    reported = total.get("reported")
    return reported is not None and abs(total["overlay"] - reported) <= max(1e-3, 1e-6 * abs(reported))


def table(out: Path, models: list[str], targets: list[str], results: list[dict]) -> list[str]:
    """The markdown rows of the run in `out`."""
    status = {(r["model"], r["target"]): r["status"] for r in results}
    lines = [("| model | target | status | graphs stock / solver | ops stock / solver | conversions stock / solver | "
             "total stock (overlay = compare) | total solver (overlay = compare) | adds up |"),
             "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for target in targets:
        for model in models:
            path = explain_dir(out, model, target) / "explain.json"
            if not path.exists():
                lines.append(f"| {model} | {target} | {status.get((model, target), 'not run')} | not drawn |||||")
                continue
            drawn = json.loads(path.read_text())
            graphs = {}
            for side in ("stock", "solver"):
                collection = json.loads(Path(drawn["files"][side]["graphs"]).read_text())["graphs"]
                graphs[side] = (len(collection), sum(len(g["nodes"]) for g in collection))
            totals = drawn["totals"]
            shown = {s: f"{totals[s]['overlay']:,.6g} = {totals[s]['reported']:,.6g}" for s in ("stock", "solver")}
            adds_up = all(_agrees(totals[s]) for s in ("stock", "solver"))
            lines.append(
                f"| {model} | {target} | {status.get((model, target), 'cached')} | "
                f"{graphs['stock'][0]} / {graphs['solver'][0]} | {graphs['stock'][1]} / {graphs['solver'][1]} | "
                f"{len(drawn['conversions']['stock'])} / {len(drawn['conversions']['solver'])} | "
                f"{shown['stock']} | {shown['solver']} | {'yes' if adds_up else 'NO'} |"
            )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="ethos-u55-128,ethos-u85-256,vulkan")
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--out", default="zoo-out/explain-bench")
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--report", default="benchmarks/results/explain.md")
    args = parser.parse_args(argv)
    models, targets, out = args.models.split(","), args.targets.split(","), Path(args.out)
    started = time.perf_counter()
    results = run_zoo(models, targets, out, jobs=args.jobs, explain=True)
    lines = table(out, models, targets, results)
    rows = lines[2:]
    added_up = sum(line.endswith("| yes |") for line in rows)
    report = [
        "# explain on the zoo: every model drawn, the overlays adding up to compare's totals",
        "",
        (
            f"`.venv/bin/python -m benchmarks.zoo.explain --targets {args.targets} --jobs {args.jobs}` "
            f"({time.strftime('%Y-%m-%d')}, {time.perf_counter() - started:,.0f} s): {added_up} of {len(rows)} "
            "model x target drawings add up on both sides (overlay total = the comparison's figure: Vela's "
            "`vela_total_cycles` on Ethos-U, `modelled_us` on Vulkan and XNNPACK)."
        ),
        "",
        *lines,
        "",
    ]
    Path(args.report).write_text("\n".join(report))
    print("\n".join(report))
    return 0 if added_up == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
