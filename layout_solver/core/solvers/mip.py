"""SCIP (through OR-Tools' linear solver) on the shared 0-1 formulation (formulation.py).

Its LP relaxation bound is what closes gaps on irregular graphs, where CP-SAT's
own bound leaves them open (benchmarks/results/solver.md). Returns None when
SCIP is not in the OR-Tools build or the model cannot be built before the
deadline (the caller falls back to CP-SAT or the incumbent).
"""

from __future__ import annotations

import threading
import time

from ortools.linear_solver import pywraplp

from layout_solver.core.solvers.budget import MODEL_NONZEROS_PER_UNIT, NODES_PER_UNIT, WorkBudget
from layout_solver.core.solvers.cpsat import Trace
from layout_solver.core.solvers.formulation import formulate
from layout_solver.core.solvers.subproblem import Subproblem, SubResult, stopped_by

# Building the model is Python work that scales with the piece; check the deadline this often.
_CHECK_EVERY = 2000


def solve_mip(
    sub: Subproblem,
    hint: SubResult,
    deadline: float,
    trace: Trace | None = None,
    stop_event: threading.Event | None = None,
    budget: WorkBudget | None = None,
) -> SubResult | None:
    """Solve a subproblem with OR-Tools' SCIP MIP until `deadline` (or `stop_event`), warm-started from `hint`;
    returns its best answer and proven bound, or None when SCIP is unavailable or finds nothing. Given a
    `budget`, SCIP also stops at its node limit (`WorkBudget.nodes`), which it counts the same on any machine, and
    the solve is charged its nodes and its model's size (MODEL_NONZEROS_PER_UNIT)."""
    lm = formulate(sub)
    # What building the model and SCIP's root LP cost grows with the model, and SCIP's node count misses it: a
    # block DP that solves hundreds of small pieces spends seconds at one node each (charged below).
    nonzeros = lm.nonzeros
    if budget is not None and not budget.affords_model(nonzeros):
        # Building and root-solving this model alone costs more than is left (a 5,600-variable irregular piece
        # given 0.2 units ran 8 s and spent 2): not started, the caller keeps its answer.
        return None
    solver = pywraplp.Solver.CreateSolver("SCIP")
    if solver is None:
        return None
    b = [solver.BoolVar("") for _ in range(lm.n_bools)]
    for k, lits in enumerate(lm.choose):
        solver.Add(solver.Sum([b[i] for i in lits]) == 1)
        if k % _CHECK_EVERY == 0 and time.perf_counter() > deadline:
            return None
    for k, (pay, lits) in enumerate(lm.implies_any):
        solver.Add(b[pay] <= solver.Sum([b[i] for i in lits]))
        if k % _CHECK_EVERY == 0 and time.perf_counter() > deadline:
            return None
    for k, (lits, x) in enumerate(lm.covers):
        solver.Add(solver.Sum([b[i] for i in lits]) >= b[x])
        if k % _CHECK_EVERY == 0 and time.perf_counter() > deadline:
            return None
    objective = solver.Objective()
    for i, c in lm.objective.items():
        objective.SetCoefficient(b[i], c)
    objective.SetMinimization()
    hinted = [b[i] for v, o in enumerate(hint.options) for i in lm.choose[v]]
    solver.SetHint(hinted, [float(k == o) for v, o in enumerate(hint.options) for k in range(len(lm.choose[v]))])
    remaining = deadline - time.perf_counter()
    if remaining <= 0.01:
        return None
    solver.SetTimeLimit(max(1, int(remaining * 1000)))
    if budget is not None:
        solver.SetSolverSpecificParametersAsString(f"limits/totalnodes = {budget.nodes()}\n")
    with stopped_by(stop_event, solver.InterruptSolve):
        status = solver.Solve()
    if budget is not None:
        budget.spend(solver.nodes() / NODES_PER_UNIT + nonzeros / MODEL_NONZEROS_PER_UNIT)
    if status not in (pywraplp.Solver.OPTIMAL, pywraplp.Solver.FEASIBLE):
        return None
    options = [max(range(len(lits)), key=lambda k: b[lits[k]].solution_value()) for lits in lm.choose]
    value = sub.total(options)
    bound = lm.constant + objective.BestBound()
    if status == pywraplp.Solver.OPTIMAL:
        bound = value  # proven within SCIP's tolerances; the value itself is recomputed exactly
    method = "mip" if status == pywraplp.Solver.OPTIMAL else "mip-timeout"
    if hint.value < value:
        options, value = list(hint.options), hint.value
    bound = min(max(bound, hint.bound), value)
    if trace is not None:
        trace("mip", value, bound)
    return SubResult(options=options, value=value, bound=bound, method=method)
