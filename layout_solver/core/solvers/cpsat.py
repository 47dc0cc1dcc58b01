"""OR-Tools CP-SAT on the shared 0-1 formulation (formulation.py), warm-started from an incumbent.

Stops at the time limit (or when `stop_event` is set, e.g. because the MIP
backend proved optimality first) with the best answer found and the bound it
proved. Costs are scaled to integers (integer_scale); any rounding error
widens the reported bound instead of being hidden.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from ortools.sat.python import cp_model

from layout_solver.core.solvers.budget import WorkBudget
from layout_solver.core.solvers.formulation import formulate
from layout_solver.core.solvers.subproblem import Subproblem, SubResult, integer_scale, stopped_by

_MAX_COEF = 2**40

# trace(event, incumbent, bound): progress of a solve, for `solve --trace`
Trace = Callable[[str, float, float], None]


class _Progress(cp_model.CpSolverSolutionCallback):
    def __init__(self, trace: Trace, constant: float, scale: float, slack: float):
        super().__init__()
        self.trace, self.constant, self.scale, self.slack = trace, constant, scale, slack

    def on_solution_callback(self) -> None:
        self.trace(
            "cpsat",
            self.constant + self.objective_value / self.scale,
            self.constant + self.best_objective_bound / self.scale - self.slack,
        )


def solve_cpsat(
    sub: Subproblem,
    hint: SubResult,
    deadline: float,
    workers: int = 1,
    trace: Trace | None = None,
    stop_event: threading.Event | None = None,
    budget: WorkBudget | None = None,
) -> SubResult:
    """Best answer by `deadline` (a time.perf_counter() instant; model building counts against it), or, given a
    `budget`, within what is left of it in CP-SAT's deterministic time (the deadline then a safety net; several
    workers interleave their search, which keeps it deterministic)."""
    lm = formulate(sub)
    if budget is not None and not budget.affords_model(lm.nonzeros):
        # Building the model and CP-SAT's presolve, which its deterministic time undercounts, alone cost more
        # than is left (a 5,600-variable irregular piece given 0.2 units ran 5.7 s): the hint stands.
        return SubResult(list(hint.options), hint.value, max(hint.bound, lm.constant), "cpsat-timeout")
    model = cp_model.CpModel()
    b = [model.new_bool_var(f"b{i}") for i in range(lm.n_bools)]
    for lits in lm.choose:
        model.add_exactly_one(b[i] for i in lits)
    for pay, lits in lm.implies_any:
        model.add_bool_or([b[i] for i in lits]).only_enforce_if(b[pay])
    for lits, x in lm.covers:
        model.add_bool_or([b[i] for i in lits] + [b[x].Not()])
    scale, slack = integer_scale(list(lm.objective.values()), _MAX_COEF)
    model.minimize(sum(round(c * scale) * b[i] for i, c in lm.objective.items()))
    for v, o in enumerate(hint.options):
        for k, i in enumerate(lm.choose[v]):
            model.add_hint(b[i], k == o)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(deadline - time.perf_counter(), 0.001)
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = 0
    if budget is not None:
        solver.parameters.max_deterministic_time = max(budget.left, 1e-3)
        solver.parameters.interleave_search = workers > 1
    callback = _Progress(trace, lm.constant, scale, slack) if trace is not None else None
    with stopped_by(stop_event, solver.stop_search):
        status = solver.solve(model, callback)
    if budget is not None:
        budget.spend(solver.deterministic_time)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return SubResult(
            options=list(hint.options), value=hint.value, bound=max(hint.bound, lm.constant), method="cpsat-timeout"
        )
    options = [next(k for k, i in enumerate(lits) if solver.boolean_value(b[i])) for lits in lm.choose]
    value = sub.total(options)
    bound = lm.constant + solver.best_objective_bound / scale - slack
    if status == cp_model.OPTIMAL and slack == 0.0:
        bound = value
    method = "cpsat" if status == cp_model.OPTIMAL else "cpsat-timeout"
    if hint.value < value:
        options, value = list(hint.options), hint.value
    return SubResult(options=options, value=value, bound=min(max(bound, hint.bound), value), method=method)
