"""The LP relaxation of a wide piece: a proven bound in one simplex solve, and an answer rounded from it.

The shared 0-1 formulation (formulation.py) relaxed to 0 <= b <= 1 is tight on layout problems: on irregular
graphs its optimum lies within half a percent of the integer one (benchmarks/results/solver.md), and all but a few
percent of its Booleans come out integral. HiGHS's dual simplex (scipy's `linprog`, no extra dependency) solves a
piece of 25,000 variables in about 3 s, where SCIP spends its whole time limit on root processing and LNS has
only a separable bound.

1. Bound: not HiGHS's objective but the Lagrangian value of its row duals, recomputed here,
   L(y) = sum_rows y_i * (active side of row i) + sum_cols min(0, c_j - A_j^T y), valid for any duals, so the
   bound never overstates whatever the solver's tolerances did.
2. Answer: each variable takes the option its LP value favours; the variables the LP left fractional (and no
   others) are then re-solved exactly together, everything else held fixed. (Single-variable moves after that
   found nothing on irregular graphs of 6,000-19,000 variables, at 0.2-0.6 s a piece: not run.)

Under a work budget the simplex stops at an iteration limit (ITERATIONS_PER_UNIT), which it counts the same on any
machine; a relaxation cut short gives no bound and no answer (None), never a different one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
from ortools.pdlp import solvers_pb2
from ortools.pdlp.python import pdlp
from scipy.optimize import linprog
from scipy.sparse import csr_array, vstack

from layout_solver.core.solvers.budget import ITERATIONS_PER_UNIT, NONZEROS_PER_UNIT, RELAXATION_SHARE, WorkBudget
from layout_solver.core.solvers.formulation import LinearModel, formulate
from layout_solver.core.solvers.greedy import improve
from layout_solver.core.solvers.subproblem import Subproblem, SubResult, proven, restrict

# An LP value this close to 1 counts as integral: the option is the LP's, and the variable stays fixed.
INTEGRAL = 1.0 - 1e-6
# A first-order point is only near a vertex: a share this large settles the variable.
NEAR_INTEGRAL = 0.9
# Above this many Booleans the dual simplex takes longer than a first-order method needs for a bound within 0.2% of
# the LP optimum (62,800 variables, 339,000 Booleans: HiGHS 13.6 s, PDLP 2 s on 2 threads).
FIRST_ORDER_BOOLS = 100_000
# More undecided variables than this are not re-solved exactly (SCIP on 7,700 of them: 7 s).
REPAIR_VARS = 3000


def _rows(lm: LinearModel) -> tuple[csr_array, csr_array]:
    """The choice rows (sum = 1) and the implication / cover rows (b - sum(lits) <= 0) as sparse matrices."""
    eq_rows = np.repeat(np.arange(len(lm.choose)), [len(lits) for lits in lm.choose])
    eq_cols = np.fromiter((i for lits in lm.choose for i in lits), dtype=np.int64, count=len(eq_rows))
    a_eq = csr_array((np.ones(len(eq_rows)), (eq_rows, eq_cols)), shape=(len(lm.choose), lm.n_bools))
    heads = [pay for pay, _ in lm.implies_any] + [x for _, x in lm.covers]
    tails = [lits for _, lits in lm.implies_any] + [lits for lits, _ in lm.covers]
    lengths = np.fromiter((len(t) for t in tails), dtype=np.int64, count=len(tails))
    rows = np.concatenate([np.arange(len(heads)), np.repeat(np.arange(len(heads)), lengths)])
    cols = np.concatenate([np.asarray(heads, dtype=np.int64), np.fromiter((i for t in tails for i in t), np.int64)])
    values = np.concatenate([np.ones(len(heads)), -np.ones(int(lengths.sum()))])
    a_ub = csr_array((values, (rows, cols)), shape=(len(heads), lm.n_bools))
    return a_eq, a_ub


def relax(
    sub: Subproblem,
    lm: LinearModel | None = None,
    deadline: float | None = None,
    budget: WorkBudget | None = None,
    workers: int = 1,
    first_order: bool = False,
) -> tuple[float, np.ndarray, bool] | None:
    """The LP relaxation's proven lower bound on `sub`'s optimum, its (near-)optimal point (one value per Boolean
    of `lm`) and whether that point is a simplex vertex. HiGHS's dual simplex up to FIRST_ORDER_BOOLS Booleans
    (None when it stops short: iteration limit from `budget`, or the `deadline`); above, or where `first_order`
    is asked for, OR-Tools' PDLP, a first-order method on `workers` threads that has a valid bound wherever it
    stops (passes over the matrix from `budget`, or the `deadline`)."""
    lm = lm or formulate(sub)
    cost = np.zeros(lm.n_bools)
    for i, c in lm.objective.items():
        cost[i] = c
    a_eq, a_ub = _rows(lm)
    left = None if deadline is None else deadline - time.perf_counter()
    if left is not None and left <= 0.01:
        return None
    if first_order or lm.n_bools > FIRST_ORDER_BOOLS:
        matrix = vstack([a_eq, a_ub]).tocsc()
        y, x = _first_order(cost, matrix, a_eq.shape[0], left, budget, workers)
        y_eq, y_ub = y[: a_eq.shape[0]], y[a_eq.shape[0] :]
        vertex = False
    else:
        options: dict[str, float | int] = {"presolve": True}
        if budget is not None:
            options["maxiter"] = max(1, int(budget.left * ITERATIONS_PER_UNIT))
        if left is not None:
            options["time_limit"] = left
        result = linprog(
            cost,
            A_ub=a_ub if a_ub.shape[0] else None,
            b_ub=np.zeros(a_ub.shape[0]) if a_ub.shape[0] else None,
            A_eq=a_eq,
            b_eq=np.ones(a_eq.shape[0]),
            bounds=(0.0, 1.0),
            method="highs-ds",
            options=options,
        )
        if budget is not None:
            budget.spend((result.nit or 0) / ITERATIONS_PER_UNIT)
        if result.status != 0:
            return None
        y_eq = np.asarray(result.eqlin.marginals)
        y_ub = np.asarray(result.ineqlin.marginals) if a_ub.shape[0] else np.zeros(0)
        x = np.asarray(result.x)
        vertex = True
    # The bound from the duals, not from the solver's objective: valid for any duals (<= rows need y <= 0).
    y_ub = np.minimum(y_ub, 0.0)
    reduced = cost - a_eq.T @ y_eq - (a_ub.T @ y_ub if a_ub.shape[0] else 0.0)
    bound = lm.constant + float(y_eq.sum()) + float(np.minimum(reduced, 0.0).sum())
    return bound, np.clip(x, 0.0, 1.0), vertex


def _first_order(
    cost: np.ndarray, matrix, n_eq: int, left: float | None, budget: WorkBudget | None, workers: int
) -> tuple[np.ndarray, np.ndarray]:
    """PDLP on min cost.x, rows [0, n_eq) == 1, the rest <= 0, 0 <= x <= 1: its last duals and primal point.
    Deterministic for a given pass limit and thread count (its shards reduce in a fixed order)."""
    n_rows, n_cols = matrix.shape
    qp = pdlp.QuadraticProgram()
    qp.resize_and_initialize(n_cols, n_rows)
    qp.objective_vector = cost
    qp.constraint_matrix = matrix
    qp.constraint_lower_bounds = np.concatenate([np.ones(n_eq), np.full(n_rows - n_eq, -np.inf)])
    qp.constraint_upper_bounds = np.concatenate([np.ones(n_eq), np.zeros(n_rows - n_eq)])
    qp.variable_lower_bounds = np.zeros(n_cols)
    qp.variable_upper_bounds = np.ones(n_cols)
    params = solvers_pb2.PrimalDualHybridGradientParams()
    params.num_threads = max(1, workers)
    params.termination_criteria.eps_optimal_relative = 1e-4
    params.termination_criteria.eps_optimal_absolute = 1e-4
    if left is not None:  # half the time left: the rounding, the other pieces and the report need the rest
        params.termination_criteria.time_sec_limit = 0.5 * left
    if budget is not None:
        params.termination_criteria.kkt_matrix_pass_limit = max(1.0, budget.left * NONZEROS_PER_UNIT / matrix.nnz)
    result = pdlp.primal_dual_hybrid_gradient(qp, params)
    if budget is not None:
        budget.spend(result.solve_log.solution_stats.cumulative_kkt_matrix_passes * matrix.nnz / NONZEROS_PER_UNIT)
    return np.asarray(result.dual_solution), np.asarray(result.primal_solution)


def solve_by_relaxation(
    sub: Subproblem,
    start: SubResult | None,
    deadline: float,
    exact: Callable[[Subproblem, list[int]], SubResult],
    budget: WorkBudget | None = None,
    workers: int = 1,
    first_order: bool = False,
) -> SubResult | None:
    """The relaxation's bound, and the better of `start` (if any) and the answer rounded from the LP's point (its fractional
    variables re-solved by `exact(piece, hint options)`), or None when the relaxation stops short (`first_order`:
    see `relax`)."""
    lm = formulate(sub)
    share = budget
    if budget is not None and (first_order or lm.n_bools > FIRST_ORDER_BOOLS):
        # A first-order point is rounded by local search, which needs its share of the units.
        share = WorkBudget(RELAXATION_SHARE * budget.left)
    relaxed = relax(sub, lm, deadline, share, workers, first_order)
    if share is not budget:
        budget.spend(share.spent)
    if relaxed is None:
        return None
    bound, point, vertex = relaxed
    settled_share = INTEGRAL if vertex else NEAR_INTEGRAL
    options, fractional = [], []
    for v, lits in enumerate(lm.choose):
        shares = point[lits]
        best = int(np.argmax(shares))
        options.append(best)
        if shares[best] < settled_share:
            fractional.append(v)
    if len(fractional) > REPAIR_VARS:
        # Too many undecided for one exact solve in time: single-variable moves over the whole piece instead.
        options = improve(sub, options, deadline=deadline, budget=budget)
    elif fractional:
        touching = sub.var_factors()
        inside = set(fractional)
        factors = [sub.factors[fi] for fi in sorted({fi for v in fractional for fi in touching[v]})]
        fixed = {v: options[v] for f in factors for v in f.scope if v not in inside}
        repaired = exact(restrict(sub, fractional, factors, fixed), [options[v] for v in fractional])
        for v, o in zip(fractional, repaired.options):
            options[v] = o
    value = sub.total(options)
    if start is not None and start.value < value:
        options, value = list(start.options), start.value
    # A first-order method stopped early can leave a Lagrangian bound below the plain one: keep the better.
    bound = max(bound, sub.plain_bound)
    bound = min(bound if start is None else max(bound, start.bound), value)
    result = SubResult(options, value, bound, "lp-round")
    if proven(result):
        result.method = "lp"
    return result
