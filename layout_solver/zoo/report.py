"""The zoo's outputs: results.csv (one row per model x target), report.md and PNG plots.

Per target the report gives the failure taxonomy (`verdict`: export failed, stock lowering failed, solver
lowering failed, program failed to run, not equivalent, not checked, dearer than stock, better, unchanged), the
solver-to-stock ratio of every model (Ethos-U: Vela's total cycles; Vulkan: the run time on the device where the
programs ran, else the modelled cost), sorted and plotted on a log scale, the total against the transposes, and
the models where the solver is dearer with the operator classes that made the difference.
"""

from __future__ import annotations

import csv
import json
import math
from collections import Counter
from pathlib import Path

from layout_solver._moved import moved_attributes
from layout_solver.targets import get_target

VERDICTS = (
    "job crashed",
    "export failed",
    "stock lowering failed",
    "solver lowering failed",
    "program failed to run",
    "not equivalent",
    "not checked",
    "dearer than stock",
    "better",
    "unchanged",
)
THIRD_PARTY_LOG = "third_party.log"  # where the zoo's workers send what native libraries print


def ratio(result: dict, stock: dict | None = None, solver: dict | None = None) -> float | None:
    """Solver over stock, in the target's headline measure (`Target.headline`: Ethos-U Vela total cycles;
    Vulkan run time where both ran timed, else modelled cost; TOSA the bytes its transposes move). For the whole
    program of a timed Vulkan pair: 1 where the two programs are the same bytes (their times differ by noise
    alone), else the paired ratio (the median of the rounds' own ratios, as the runtime benchmark reads it)."""
    if stock is None and solver is None:
        if result.get("same_program"):
            return 1.0
        if isinstance(result.get("run_ratio_paired"), (int, float)):
            return result["run_ratio_paired"]
    stock = result.get("stock", {}) if stock is None else stock
    solver = result.get("solver", {}) if solver is None else solver
    for key in get_target(result["target"]).headline:
        a, b = stock.get(key), solver.get(key)
        if isinstance(a, (int, float)) and isinstance(b, (int, float)):
            return b / a if a > 0 else (1.0 if b == 0 else None)
    return None


def verdict(result: dict, stock: dict | None = None, solver: dict | None = None, equivalent=None) -> str:
    """Where a model x target lands in the failure taxonomy (VERDICTS)."""
    if result.get("status") == "crashed":  # the job killed its worker process (a native abort in a compiler)
        return "job crashed"
    if result.get("status") == "error":  # the job itself raised: the model could not be built or exported
        return "export failed"
    whole_program = stock is None and solver is None  # not one method's pair of a multi-method model
    stock = result.get("stock", {}) if stock is None else stock
    solver = result.get("solver", {}) if solver is None else solver
    if stock.get("error"):
        return "stock lowering failed"
    if solver.get("error"):
        return "solver lowering failed"
    before_price = get_target(result["target"]).verdict_before_price(result, stock, solver, equivalent)
    if before_price:
        return before_price
    x = ratio(result) if whole_program else ratio(result, stock, solver)
    if x is None:
        return "not checked"
    tolerance = get_target(result["target"]).tolerance
    return "dearer than stock" if x > 1 + tolerance else "better" if x < 1 - tolerance else "unchanged"


def solved_by(notes: list[str]) -> str:
    """Who answered the solver side, from the pass reports' notes (see layout_solver/lowering/client.py)."""
    if any(n.startswith("solved by service") for n in notes):
        return "service"
    failed = next((n for n in notes if n.startswith("service ") and "solved in-process" in n), None)
    return f"in-process ({failed})" if failed else "in-process"


def _equivalent(result: dict) -> object:
    # None from compare means "not checked" (the reference model rejected a side): say so in the table.
    if result.get("equivalent", "") is None:
        on_examples = result.get("equivalent_on_example_inputs")
        return "not checked" if on_examples is None else f"{on_examples} (example inputs)"
    return result.get("equivalent", "")


def _method_rows(r: dict) -> list[dict]:
    """A multi-method result as one row per method (`model:method`): stock against the joint solve."""
    out = []
    for method in r.get("methods", []):
        row = {
            "model": f"{r['model']}:{method}",
            "target": r["target"],
            "status": r["status"],
            "error": r.get("error") or r.get("stock", {}).get("error") or r.get("joint", {}).get("error") or "",
            "method_weight": r["weights"].get(method, ""),
        }
        for side, source in (("stock", "stock"), ("solver", "joint")):
            for key in get_target(r["target"]).row_fields:
                row[f"{side}_{key}"] = r.get(source, {}).get("per_method", {}).get(method, {}).get(key, "")
        joint = r.get("joint", {})
        # Per method there is no gap, run ratio or problem size of its own: the joint solve has one for all.
        row.update(
            solve_seconds=joint.get("solve_seconds", ""),
            problem_ops="",
            gap="",
            run_ratio="",
            solved_by="",
            cache_hits=joint.get("cache_hits", ""),
            equivalent=r.get("joint_equivalent", ""),
        )
        pair = (r.get("stock", {}).get("per_method", {}).get(method, {}), joint.get("per_method", {}).get(method, {}))
        pair = ({**pair[0], "error": r.get("stock", {}).get("error")}, {**pair[1], "error": joint.get("error")})
        ratio_ = ratio(r, *pair)
        row.update(ratio=round(ratio_, 4) if ratio_ else "", verdict=verdict(r, *pair, r.get("joint_equivalent")))
        out.append(row)
    return out


def rows(results: list[dict]) -> list[dict]:
    """The zoo records as table rows, one per model x target (multi-method models: one per method)."""
    out = []
    for r in results:
        source = r.get("provenance", {}).get("source", "")  # the code's digest (records before it: none)
        if "methods" in r:
            out += [{**row, "source": source} for row in _method_rows(r)]
            continue
        row = {
            "model": r["model"],
            "target": r["target"],
            "status": r["status"],
            "error": r.get("error") or r.get("stock", {}).get("error") or r.get("solver", {}).get("error") or "",
        }
        for side in ("stock", "solver"):
            for key in get_target(r["target"]).row_fields:
                row[f"{side}_{key}"] = r.get(side, {}).get(key, "")
        solver = r.get("solver", {})
        row.update(
            solve_seconds=solver.get("solve_seconds", ""),
            problem_ops=solver.get("problem_ops", ""),
            gap=solver.get("gap", ""),
            equivalent=_equivalent(r),
            run_ratio=r.get("run_ratio", ""),
            solved_by=solved_by(solver.get("solver_notes", [])),
        )
        row.update(get_target(r["target"]).report_fields(r))
        ratio_ = ratio(r) if r["status"] not in ("error", "crashed") else None
        row.update(ratio=round(ratio_, 4) if ratio_ else "", verdict=verdict(r), source=source)
        out.append(row)
    return out


def write_outputs(results: list[dict], out: Path) -> None:
    """Write results.csv, report.md and the plots into `out`."""
    table = rows(results)
    fields = list(dict.fromkeys(k for row in table for k in row))
    with (out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(table)
    report = report_markdown(table)
    log = out / THIRD_PARTY_LOG  # the zoo workers' own output (the runner writes it)
    if log.exists() and log.stat().st_size:
        lines = log.read_text(errors="replace").splitlines()
        report += (f"\nThe workers' own output (native libraries' warnings, {len(lines)} lines, "
                   f"{len(set(lines))} distinct) is in `{log}`, not on the console.\n")  # fmt: skip
    report += explained_section(out)
    (out / "report.md").write_text(report)
    plot(table, out)


def explained_section(out: Path) -> str:
    """report.md's links to the Model Explorer files a run with --explain drew (`out/explain/*/explain.json`)."""
    drawn = sorted((out / "explain").glob("*/explain.json"))
    if not drawn:
        return ""
    lines = ["", "## Layouts in Model Explorer", "",
             ("Each model's stock and solver programs, drawn by `layout-solver explain`: one graph per delegate, each "
             "tensor's layout, each conversion and its price (overlays). Open one with Model Explorer's own command, "
             "e.g. `model-explorer DIR/solver.graphs.json --node_data_paths=DIR/solver.cost.json,"
             "DIR/solver.layout.json,DIR/solver.conversions.json`, or `layout-solver explain MODEL --target T --open`."),
             "", "| model | target | unit | conversions stock / solver | total stock / solver | files |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    for path in drawn:
        explained = json.loads(path.read_text())
        count = {side: len(explained["conversions"].get(side, [])) for side in ("stock", "solver")}
        total = {side: (explained["totals"].get(side) or {}).get("overlay") for side in ("stock", "solver")}
        shown = " / ".join("" if total[s] is None else f"{total[s]:,.6g}" for s in ("stock", "solver"))
        lines.append(f"| {explained['model']} | {explained['target']} | {explained['unit']} | "
                     f"{count['stock']} / {count['solver']} | {shown} | [{path.parent.name}]({path.parent.relative_to(out)}) |")  # fmt: skip
    return "\n".join(lines) + "\n"


def console_summary(results: list[dict], out: Path) -> str:
    """What a zoo run prints at its end: per target one line of verdicts and one per model (verdict, ratio,
    the headline measure both ways, conversions both ways), then where the report and the files are."""
    table = rows(results)
    lines = []
    for target in dict.fromkeys(r["target"] for r in table):
        mine = [r for r in table if r["target"] == target]
        counts = Counter(r["verdict"] for r in mine)
        ratios = [r["ratio"] for r in mine if isinstance(r["ratio"], (int, float)) and r["ratio"] > 0]
        geomean = f", geomean ratio {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f}" if ratios else ""
        described = get_target(target)
        lines.append(f"{target} ({described.headline_name}): "
                     + ", ".join(f"{n} {v}" for v, n in counts.most_common()) + geomean)  # fmt: skip
        explained = _explained_conversions(out, target)
        for r in mine:
            ratio_ = f"{r['ratio']:.3f}" if isinstance(r["ratio"], (int, float)) else "-"
            conversions = explained.get(r["model"], "")
            changed = equal_price_change(r)
            at_equal_price = f"; the program differs from stock's at an equal price ({changed})" if changed else ""
            lines.append(f"  {r['model']:28} {r['verdict']:22} ratio {ratio_:>6}{conversions}{at_equal_price}")
    lines.append(f"report: {out / 'report.md'}; table: {out / 'results.csv'}; plots in {out}")
    if (out / "explain").is_dir():
        lines.append(f"layouts per op (Model Explorer files): {out / 'explain'} (report.md says how to open them)")
    return "\n".join(lines)


def _explained_conversions(out: Path, target: str) -> dict[str, str]:
    """ ", conversions N -> M" per model a run with --explain drew on `target`."""
    found = {}
    for path in (out / "explain").glob(f"*-{target}/explain.json"):
        explained = json.loads(path.read_text())
        if explained["target"] == target:
            counts = [len(explained["conversions"].get(side, [])) for side in ("stock", "solver")]
            found[explained["model"]] = f", layout conversions {counts[0]} -> {counts[1]}"
    return found


def report_markdown(table: list[dict]) -> str:
    """The zoo table as Markdown, one section per target."""
    lines = ["# Zoo report: stock executorch versus layout-solver", ""]
    targets = list(dict.fromkeys(r["target"] for r in table))
    lines += [
        "## Verdicts per target",
        "",
        (
            "Ratio: solver / stock (Ethos-U: Vela total cycles; Vulkan: the paired run-time ratio where both ran, "
            "1 where the two programs are the same bytes, else modelled cost); "
            "`ratio_<target>.png` plots every model's on a log scale, `totals_vs_transposes_<target>.png` the total "
            "against the transposes."
        ),
        "",
        "| target | models | " + " | ".join(VERDICTS) + " | geomean ratio | worst | code (source digest: rows) |",
        "|" + "---|" * (len(VERDICTS) + 5),
    ]
    for target in targets:
        mine = [r for r in table if r["target"] == target]
        counts = Counter(r["verdict"] for r in mine)
        ratios = [(r["ratio"], r["model"]) for r in mine if isinstance(r["ratio"], (int, float)) and r["ratio"] > 0]
        geomean = math.exp(sum(math.log(x) for x, _ in ratios) / len(ratios)) if ratios else None
        worst = max(ratios) if ratios else None
        lines.append(
            f"| {target} | {len(mine)} | "
            + " | ".join(str(counts[v]) for v in VERDICTS)
            + f" | {f'{geomean:.3f}' if geomean else ''} | {f'{worst[0]:.3f} ({worst[1]})' if worst else ''} | "
            + ", ".join(f"{d or 'unrecorded'}: {n}" for d, n in Counter(r.get("source", "") for r in mine).items())
            + " |"
        )
    lines += [line for target in targets for line in get_target(target).report_notes(_of(table, target))]
    lines += [line for target in targets for line in _changed_at_equal_price(table, target)]
    dearer = [r for r in table if r["verdict"] == "dearer than stock"]
    if dearer:
        lines += ["", "Dearer than stock (and the operator classes whose cycles grew most, Ethos-U):", ""]
        lines += [
            f"- {r['model']} on {r['target']}: ratio {r['ratio']}"
            + (f"; {r['dearer_ops']}" if r.get("dearer_ops") else "")
            for r in dearer
        ]
    lines.append("")
    for target in targets:
        lines += get_target(target).report_section(_of(table, target))
    failures = [r for r in table if r["status"] != "ok"]
    if failures:
        lines += ["## Failures", ""] + [f"- {r['model']} on {r['target']}: {r['error']}" for r in failures] + [""]
    lines += ["Plots: `total_cycles*.png`, `transpose_cycles*.png`, `transitions.png`, `solve_time_vs_size.png`.", ""]
    return "\n".join(lines)


def equal_price_change(row: dict) -> str | None:
    """What changed in an "unchanged" row whose solver program is not stock's ("transitions 1 -> 0", or other
    bytes with the same transitions), else None: a change at a price within the target's tolerance."""
    if row["verdict"] != "unchanged":
        return None
    a, b = row.get("stock_transitions", ""), row.get("solver_transitions", "")
    counted = isinstance(a, (int, float)) and isinstance(b, (int, float))
    if counted and a != b:
        return f"transitions {a} -> {b}"
    return "other bytes, the same transitions" if row.get("same_program") is False else None


def _changed_at_equal_price(table: list[dict], target: str) -> list[str]:
    """The "unchanged" models whose solver program is not stock's: a transition added or dropped (or other bytes)
    at a price within the target's tolerance. Said, so a reader does not take 1 -> 0 transitions beside
    "unchanged" for a report that missed the change."""
    changed = []
    for r in (r for r in table if r["target"] == target):
        what = equal_price_change(r)
        if what:
            changed.append(f"{r['model']} ({what}, ratio {r['ratio']})")
    if not changed:
        return []
    tolerance = get_target(target).tolerance
    return ["", f"{target}, changed at an equal price (the solver's program differs from stock's, the "
            f"{get_target(target).headline_name} within +-{tolerance:.1%}, so the verdict is unchanged): "
            + "; ".join(changed)]  # fmt: skip


def _of(table: list[dict], target: str) -> list[dict]:
    return [r for r in table if r["target"] == target]


def plot(table: list[dict], out: Path) -> None:
    """Bar charts of stock versus solver (transpose cycles, transitions, run time) and solve time against problem
    size, as PNGs in `out`.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def bars(rows_, stock_key, solver_key, title, ylabel, path):
        rows_ = [r for r in rows_ if isinstance(r[stock_key], (int, float)) and isinstance(r[solver_key], (int, float))]
        values = [v for r in rows_ for v in (r[stock_key], r[solver_key]) if v > 0]
        # A catalog's values span decades: a log axis, and one row per model past a dozen (else 10,000-pixel-wide).
        log = bool(values) and max(values) > 100 * min(values)
        many = len(rows_) > 12
        size = (7, max(2.5, 0.3 * len(rows_) + 1)) if many else (max(6, len(rows_) * 0.9), 4)
        fig, ax = plt.subplots(figsize=size)
        places, labels = range(len(rows_)), [_plot_label(r["model"]) for r in rows_]
        draw = ax.barh if many else ax.bar
        draw([x - 0.2 for x in places], [r[stock_key] for r in rows_], 0.4, label="stock")
        draw([x + 0.2 for x in places], [r[solver_key] for r in rows_], 0.4, label="layout-solver")
        if many:
            ax.set_yticks(list(places), labels, fontsize=7)
            ax.set_xlabel(ylabel)
            ax.set_xscale("log" if log else "linear")
        else:
            ax.set_xticks(list(places), labels, rotation=30, ha="right")
            ax.set_ylabel(ylabel)
            ax.set_yscale("log" if log else "linear")
        ax.set_title(title)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)

    for target in dict.fromkeys(r["target"] for r in table):
        mine = _of(table, target)
        ratio_plot(mine, target, out / f"ratio_{target}.png")
        for chart in get_target(target).plots():
            if chart.kind == "totals_vs_transposes":
                totals_vs_transposes(mine, target, out / chart.filename)
            elif any(isinstance(r.get(chart.stock_key), (int, float)) for r in mine):
                bars(mine, chart.stock_key, chart.solver_key, chart.title, chart.ylabel, out / chart.filename)
    fig, ax = plt.subplots(figsize=(6, 4))
    for target in dict.fromkeys(r["target"] for r in table):
        marker = get_target(target).plot_marker
        pts = [
            (r["problem_ops"], r["solve_seconds"])
            for r in table
            if r["target"] == target and isinstance(r["problem_ops"], int) and isinstance(r["solve_seconds"], float)
        ]
        if pts:
            ax.scatter(*zip(*pts), marker=marker, label=target)
    ax.set_xlabel("ops in the layout problem")
    ax.set_ylabel("solve time (s)")
    ax.set_title("Solve time against graph size")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "solve_time_vs_size.png", dpi=120)
    plt.close(fig)


def _plot_label(model: str) -> str:
    """A model's name on a plot's axis: a catalog entry keeps its architecture and task, a file model its name."""
    return model.removeprefix("transformers:") if model.startswith("transformers:") else Path(model).name


def ratio_plot(table: list[dict], target: str, path: Path) -> None:
    """Every model's solver / stock ratio on `target`, sorted, on a log scale (one bar per model)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    points = sorted((r["ratio"], r["model"]) for r in table if isinstance(r["ratio"], (int, float)) and r["ratio"] > 0)
    if not points:
        return
    fig, ax = plt.subplots(figsize=(7, max(2.5, 0.22 * len(points) + 1)))
    colors = [
        "tab:red" if x > 1 + get_target(target).tolerance else "tab:green" if x < 1 else "tab:gray" for x, _ in points
    ]
    ax.barh(range(len(points)), [x for x, _ in points], color=colors, left=0)
    ax.set_xscale("log")
    ax.axvline(1.0, color="black", lw=0.8)
    ax.set_yticks(range(len(points)), [_plot_label(m) for _, m in points], fontsize=7)
    unit = get_target(target).headline_name
    ax.set_xlabel(f"solver / stock, {unit} (log scale)")
    ax.set_title(f"{target}: {len(points)} models")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def totals_vs_transposes(table: list[dict], target: str, path: Path) -> None:
    """Per model: the change of the transposes' cycles against the change of the total (Ethos-U), both as
    fractions of stock's total: a model on the diagonal gained only what its transposes lost."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = ("stock_vela_total_cycles", "solver_vela_total_cycles", "stock_vela_transpose_cycles",
            "solver_vela_transpose_cycles")  # fmt: skip
    rows_ = [r for r in table if all(isinstance(r.get(k), (int, float)) for k in keys) and r[keys[0]]]
    if not rows_:
        return
    xs = [(r[keys[3]] - r[keys[2]]) / r[keys[0]] for r in rows_]
    ys = [(r[keys[1]] - r[keys[0]]) / r[keys[0]] for r in rows_]
    fig, ax = plt.subplots(figsize=(6, 5))
    ax.scatter(xs, ys, s=14)
    low = min(xs + ys + [0.0])
    ax.plot([low, 0], [low, 0], color="gray", lw=0.8, ls="--", label="total moves only by the transposes")
    ax.axhline(0, color="black", lw=0.6)
    ax.set_xlabel("transpose cycles, solver - stock (fraction of stock's total)")
    ax.set_ylabel("total cycles, solver - stock (fraction of stock's total)")
    ax.set_title(f"{target}: totals against transposes")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# Names that moved elsewhere, kept here one release (with a DeprecationWarning).
__getattr__ = moved_attributes(
    __name__,
    {
        "EAGER_ATOL": "layout_solver.targets.vulkan",
        "EAGER_SLACK": "layout_solver.targets.vulkan",
        "dearer_op_classes": "layout_solver.targets.ethos_u.report",
    },
)
