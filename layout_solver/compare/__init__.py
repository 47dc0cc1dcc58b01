"""Stock versus solver lowering of one model, side by side, in one run.

`layout_solver.targets.compare(module, inputs, target)` has the target lower the module twice from fresh exports
(stock layout stage, then the solver's) and returns a typed `Comparison` (`result.py`); a `MultiMethodModel`
gets three sides (stock, per-method, joint) in a `MethodsComparison`. A side that fails is recorded with its error. Names of zoo
models are turned into modules by the CLI and the zoo (`layout_solver.zoo.runner.compare_named`).

Each target's own comparison is in its module of `layout_solver.targets` (`ethos_u.py`, `vulkan.py`, `tosa.py`);
here are the schema they all return (`result.py`), the side-by-side table, and multi-method programs
(`methods.py`).
"""

from __future__ import annotations

from layout_solver.compare.methods import PROGRAM_FIGURES, WEIGHTED_FIGURES, MultiMethodModel
from layout_solver.compare.result import Comparison, MethodsComparison, MethodsSide, Side

__all__ = ["Comparison", "MethodsComparison", "MethodsSide", "MultiMethodModel", "Side", "format_table"]


def format_table(result: Comparison | MethodsComparison) -> str:
    """The comparison as a side-by-side text table."""
    if isinstance(result, MethodsComparison):
        return _methods_table(result.to_json())
    return _single_table(result.to_json())


def _single_table(result: dict) -> str:
    """Side-by-side table of the scalar fields both sides report."""
    stock, solver = result.get("stock", {}), result.get("solver", {})
    lines = [f"{result['model']} on {result['target']}", f"{'':24} {'stock':>16} {'solver':>16} {'ratio':>8}"]
    keys = [
        k
        for k in dict.fromkeys([*stock, *solver])
        if isinstance(stock.get(k, solver.get(k)), (int, float)) and not isinstance(stock.get(k), bool)
    ]
    for key in keys:
        a, b = stock.get(key), solver.get(key)
        ratio = f"{b / a:.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a else ""
        fmt = lambda v: "" if v is None else f"{v:,.4g}" if isinstance(v, float) else f"{v:,}"
        lines.append(f"{key:24} {fmt(a):>16} {fmt(b):>16} {ratio:>8}")
    for side, record in (("stock", stock), ("solver", solver)):
        if "error" in record:
            lines.append(f"{side} failed: {record['error']}")
        if record.get("eager_check"):
            verdict = {True: "within", False: "outside", None: ""}[record.get("eager_within_tolerance")]
            lines.append(
                f"{side} vs quantized eager: {record['eager_check']}"
                + (
                    f", {verdict} executorch's INT tolerance ({record.get('eager_quant_steps')} quant steps)"
                    if verdict
                    else ""
                )
            )
        if record.get("transpose_cycles_by_cause"):
            lines.append(
                f"{side} transpose cycles by cause: "
                + ", ".join(f"{k} {v:,.0f}" for k, v in record["transpose_cycles_by_cause"].items())
            )
        if record.get("tensors_by_repr"):
            lines.append(
                f"{side} tensors by representation: "
                + ", ".join(f"{k} {v}" for k, v in record["tensors_by_repr"].items())
            )
    for key in (
        "equivalent",
        "max_abs_diff",
        "stock_reference",
        "solver_reference",
        "equivalent_on_example_inputs",
        "max_abs_diff_on_example_inputs",
        "same_program",
        "run_ratio",
        "run_ratio_paired",
        "run_ratio_timings",
        "measured_delta_us",
        "predicted_delta_us",
        "max_abs_diff_stock_vs_solver",
    ):
        if key in result:
            shown = (
                "not checked (the reference model rejected a side)"
                if key == "equivalent" and result[key] is None
                else result[key]
            )
            lines.append(f"{key}: {shown}")
    return "\n".join(lines)


def _methods_table(result: dict) -> str:
    """Per method and weighted, the three sides side by side."""
    lines = [f"{result['model']} on {result['target']}: methods {result['methods']}, weights {result['weights']}"]
    sides = [s for s in ("stock", "per_method", "joint") if s in result]
    lines.append(f"{'':34}" + "".join(f"{s:>16}" for s in sides))
    metrics = [
        k
        for k in dict.fromkeys(k for s in sides for m in result[s].get("per_method", {}).values() for k in m)
        if isinstance(next(iter(result[sides[0]].get("per_method", {}).values()), {}).get(k), (int, float))
    ]
    for method in result["methods"]:
        for key in metrics:
            cells = [result[s].get("per_method", {}).get(method, {}).get(key) for s in sides]
            lines.append(f"{method + ' ' + key:34}" + "".join(f"{'' if c is None else f'{c:,.6g}':>16}" for c in cells))
    for key in (*WEIGHTED_FIGURES, *PROGRAM_FIGURES):
        cells = [result[s].get(key) for s in sides]
        if any(c is not None for c in cells):
            lines.append(f"{key:34}" + "".join(f"{'' if c is None else f'{c:,.6g}':>16}" for c in cells))
    for side in sides:
        if "error" in result[side]:
            lines.append(f"{side} failed: {result[side]['error']}")
    for key in ("per_method_equivalent", "joint_equivalent", "stock_reference", "max_abs_diff_solver_vs_stock"):
        if key in result:
            lines.append(f"{key}: {result[key]}")
    return "\n".join(lines)
