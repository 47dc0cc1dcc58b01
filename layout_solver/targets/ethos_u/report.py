"""How the zoo report renders Ethos-U results: the Vela table of one configuration, and the operator classes whose
cycles grew. Rendering only: no zoo worker imports it."""

from __future__ import annotations

from collections import Counter


def dearer_op_classes(result: dict, top: int = 3) -> list[tuple[str, int]]:
    """The operator classes whose Vela cycles grew most from stock to solver, largest first."""
    stock = Counter(result.get("stock", {}).get("vela_cycles_by_op") or {})
    solver = Counter(result.get("solver", {}).get("vela_cycles_by_op") or {})
    grew = {op: solver[op] - stock[op] for op in set(stock) | set(solver) if solver[op] > stock[op]}
    return sorted(grew.items(), key=lambda kv: -kv[1])[:top]


def section(target: str, rows: list[dict]) -> list[str]:
    """The Vela table of report.md for the configuration `target`, one line per model."""
    lines = [
        f"## {target} (Vela cycle estimates of the whole delegate)",
        "",
        (
            "| model | status | TOSA transposes stock / solver | transpose cycles stock | solver | total cycles stock "
            "| solver | change | predicted (solver) | lower s stock / solver | solve s | equivalent |"
        ),
        "|" + "---|" * 12,
    ]
    for r in rows:
        stock, solver = r["stock_vela_total_cycles"], r["solver_vela_total_cycles"]
        change = f"{solver / stock - 1:+.1%}" if isinstance(stock, int) and isinstance(solver, int) and stock else ""
        lines.append(
            f"| {r['model']} | {r['status']} | {r['stock_tosa_transposes']} / {r['solver_tosa_transposes']} "
            f"| {r['stock_vela_transpose_cycles']} | {r['solver_vela_transpose_cycles']} | "
            f"{stock} | {solver} | {change} | {r['solver_predicted_total_cycles']} | "
            f"{r['stock_lower_seconds']} / {r['solver_lower_seconds']} | {r['solve_seconds']} | "
            f"{r['equivalent']} |"
        )
    return [*lines, ""]
