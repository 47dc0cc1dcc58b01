"""How the zoo report renders Vulkan results: the detail table (transitions, modelled cost, pass time, the run on
the device) and what one timing process's ratio strays by. Rendering only: no zoo worker imports it."""

from __future__ import annotations

import statistics


def section(rows: list[dict]) -> list[str]:
    """The Vulkan table of report.md, one line per model."""
    lines = [
        "## Vulkan (transitions = clone dispatches; cost in modelled microseconds)",
        "",
        (
            "| model | status | transitions stock / solver | cost stock / solver | pass ms stock / solver | "
            "lower s stock / solver | gap | ran stock / solver | max abs diff vs eager stock / solver | "
            "run ms stock / solver | run ratio |"
        ),
        "|" + "---|" * 11,
    ]
    for r in rows:
        ms = lambda v: f"{v * 1000:.1f}" if isinstance(v, (int, float)) else ""
        lines.append(
            f"| {r['model']} | {r['status']} | {r['stock_transitions']} / {r['solver_transitions']} | "
            f"{r['stock_transition_cost']} / {r['solver_transition_cost']} | "
            f"{ms(r['stock_pass_seconds'])} / {ms(r['solver_pass_seconds'])} | "
            f"{r['stock_lower_seconds']} / {r['solver_lower_seconds']} | {r['gap']} | "
            f"{r['stock_executed']} / {r['solver_executed']} | "
            f"{r['stock_max_abs_diff_vs_eager']} / {r['solver_max_abs_diff_vs_eager']} | "
            f"{r['stock_run_ms']} / {r['solver_run_ms']} | {r['run_ratio']} |"
        )
    return [*lines, ""]


def timing_noise(rows: list[dict], target: str, tolerance: float) -> list[str]:
    """What one timing process's paired ratio strays by in this run, read off the byte-identical pairs (their
    true ratio is 1), and which changed programs were judged on the median of fresh timing processes."""
    same = sorted(r["run_ratio_paired"] for r in rows if r.get("same_program") is True and r.get("run_ratio_paired"))
    again = [r for r in rows if r.get("run_ratio_timings")]
    if not same and not again:
        return []
    lines = [""]
    if same:
        lines.append(
            f"{target}, timing noise: {len(same)} byte-identical pairs read paired ratios {same[0]:.3f} - "
            f"{same[-1]:.3f} (median {statistics.median(same):.3f}) in one timing process each; their ratio counts as 1."
        )
    if again:
        lines.append(
            f"{target}, changed programs first read outside +-{tolerance:.0%} and so timed again in "
            "fresh processes (the verdict reads the median): "
            + "; ".join(f"{r['model']} {r['run_ratio_timings']} -> {r['ratio']}" for r in again)
        )
    return lines
