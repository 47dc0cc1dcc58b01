"""`layout-solver compare MODEL --target ethos-u55-128`: stock versus solver, one run, same model."""

from __future__ import annotations

import contextlib
import io
import tempfile
import traceback
from pathlib import Path

from layout_solver.arm.equivalence import compare_lowerings
from layout_solver.arm.measure import lower_ethos_u
from layout_solver.arm.passes import solver_layouts


def compare_ethos_u(model: str, time_limit: float = 10.0, target: str = "ethos-u55-128",
                    service: str | None = None) -> dict:
    from layout_solver.compare import quiet
    from layout_solver.zoo.models import build

    quiet()
    module, inputs = build(model)
    result: dict = {"model": model, "target": target}
    with tempfile.TemporaryDirectory() as tmp:
        lowerings = {}
        for side in ("stock", "solver"):
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # Vela prints its summaries
                    if side == "stock":
                        lowerings[side] = lower_ethos_u(module, inputs, target, keep_tosa=Path(tmp) / side)
                        reports = []
                    else:
                        with solver_layouts(time_limit, service=service) as reports:
                            lowerings[side] = lower_ethos_u(module, inputs, target, keep_tosa=Path(tmp) / side)
            except Exception as exc:  # noqa: BLE001 - recorded, not fatal
                result[side] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
                                "traceback": traceback.format_exc(limit=4)}
                continue
            metrics = lowerings[side].metrics()
            if side == "solver":
                metrics.update(
                    solve_seconds=round(sum(r.solve_seconds for r in reports), 4),
                    pass_seconds=round(sum(r.pass_seconds for r in reports), 4),
                    objective=round(sum(r.objective for r in reports), 1),
                    bound=round(sum(r.bound for r in reports), 1),
                    gap=max((r.gap for r in reports), default=0.0),
                    pinned_unknown=[p for r in reports for p in r.pinned_unknown],
                    problem_ops=sum(r.problem_ops for r in reports),
                    solver_notes=[n for r in reports for n in r.notes],
                )
            result[side] = metrics
        if len(lowerings) == 2:
            same = compare_lowerings(lowerings["stock"].tosa_files, lowerings["solver"].tosa_files)
            result["equivalent"], result["max_abs_diff"] = same.equivalent, same.max_abs_diff
        else:
            result["equivalent"], result["max_abs_diff"] = False, None
    return result
