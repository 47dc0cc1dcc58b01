"""solve(problem) -> Solution: compile, decompose, solve the pieces, report."""

from __future__ import annotations

import contextlib
import gc
import math
import time
from collections.abc import Iterator
from dataclasses import dataclass

from layout_solver.core.evaluate import evaluate
from layout_solver.core.model import CompiledProblem, compile_problem
from layout_solver.core.problem import ComponentStats, Prices, Problem, ProblemError, Solution
from layout_solver.core.solvers.budget import UNITS_PER_SECOND, WorkBudget
from layout_solver.core.solvers.decompose import Decomposer
from layout_solver.core.solvers.greedy import greedy
from layout_solver.core.solvers.portfolio import RELATIVE_GAP
from layout_solver.core.solvers.subproblem import restrict

DEFAULT_TIME_LIMIT = 10.0


@dataclass(frozen=True)
class TraceRow:
    """One step of a solve: seconds since it started, which phase, the size of the piece it
    worked on, and that piece's incumbent and proven bound (`solve --trace` writes these)."""

    seconds: float
    phase: str
    piece_vars: int
    incumbent: float
    bound: float


def check_time_limit(time_limit: float) -> float:
    """`time_limit` if it is a positive finite number of seconds, else a ProblemError."""
    if not isinstance(time_limit, (int, float)) or not math.isfinite(time_limit) or time_limit <= 0:
        raise ProblemError(f"the time limit must be a positive finite number of seconds, got {time_limit!r}")
    return float(time_limit)


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """The solver allocates millions of small acyclic objects; CPython's cyclic
    collector would rescan them over and over (measured: 2x slower at 100k ops).
    Reference counting still frees everything."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def solve(
    problem: Problem,
    time_limit: float = DEFAULT_TIME_LIMIT,
    workers: int = 1,
    trace: list[TraceRow] | None = None,
    deterministic: bool = True,
    work_limit: float | None = None,
    prices: Prices | None = None,
    **tuning,
) -> Solution:
    """Cheapest assignment found within `time_limit` seconds, with a proven bound; at `prices` (checked for
    `problem`: `Problem.checked_prices`) instead of its own, if given (the answer `problem.priced(prices)` gets).

    `deterministic` (the default): the search engines stop on a work budget they count themselves
    (`solvers/budget.py`: `work_limit` units, by default UNITS_PER_SECOND per second of `time_limit`), so the
    same problem gets the same answer on any machine under any load; the time limit is then a safety net, and
    the solution's notes say when it fired (that answer may differ from run to run). Not deterministic: the
    search stops at the time limit itself (the solver benchmark's "gap at 10 s").
    Stopping the engines and decoding and
    checking the answer add a little (under 0.1 s at 1,200 ops, 1.5-3 s at 100k). `workers` threads go to CP-SAT
    and SCIP on pieces too wide for the exact solvers (deterministic either way under a work budget).
    `trace`, if given, receives a TraceRow per step of those pieces and a
    final row for the whole problem. `tuning` goes to the Decomposer
    (enumeration_limit, elimination_limit, use_blocks, memo, engines): tests
    use it to drive every solver path.

    Raises ProblemError / InfeasibleError (naming the ops and values) when the
    problem cannot be solved, or the time limit is not a positive finite number.

    >>> from layout_solver.core.synthetic import cnn_like
    >>> solve(cnn_like(2), time_limit=5).status
    'optimal'
    """
    check_time_limit(time_limit)
    if workers < 1:
        raise ProblemError(f"workers must be at least 1, got {workers}")
    budget = None
    if deterministic:
        units = time_limit * UNITS_PER_SECOND if work_limit is None else work_limit
        if not isinstance(units, (int, float)) or not math.isfinite(units) or units <= 0:
            raise ProblemError(f"the work limit must be a positive finite number of units, got {work_limit!r}")
        budget = WorkBudget(float(units))
    with gc_paused():
        return _solve(problem, time_limit, workers, trace, budget, prices, **tuning)


def _solve(
    problem: Problem,
    time_limit: float,
    workers: int,
    trace: list[TraceRow] | None,
    budget: WorkBudget | None = None,
    prices: Prices | None = None,
    **tuning,
) -> Solution:
    t0 = time.perf_counter()
    deadline = t0 + time_limit
    compiled = compile_problem(problem, prices)
    t1 = time.perf_counter()
    decomposer = Decomposer(compiled, deadline=deadline, workers=workers, budget=budget, **tuning)
    if trace is not None:

        def record(phase: str, incumbent: float, bound: float, piece_vars: int = 0) -> None:
            trace.append(TraceRow(time.perf_counter() - t0, phase, piece_vars, incumbent, bound))

        decomposer.trace = record
    options, bound = decomposer.solve()
    t2 = time.perf_counter()
    notes = []
    stats = decomposer.stats
    out_of_time = time.perf_counter() >= deadline
    stopped = "time limit reached" if budget is None else f"work limit reached ({budget.units:g} units)"
    if budget is not None and out_of_time:
        notes.append(f"time limit reached ({time_limit:g} s, the wall-clock safety net) before the work budget "
                     f"({budget.units:g} units): returning the best answer found, which may differ from run to "
                     "run; see gap")  # fmt: skip
    elif not stats.proven and stats.settled:
        notes.append(f"settled: every piece not proven optimal is proven within {RELATIVE_GAP:.0%} of its optimum "
                     "(the LP relaxation's bound); see gap")  # fmt: skip
    elif not stats.proven and not out_of_time:
        # The search stopped early: never hand back worse than the greedy answer (itself deterministic).
        whole = restrict(compiled, list(range(compiled.n_vars)), compiled.factors, {})
        fallback = greedy(whole)
        current = whole.total(options)
        if fallback.value < current:
            options = fallback.options
            notes.append(f"{stopped}: returning the greedy answer, which beat the partial search")
        else:
            notes.append(f"{stopped}: returning the best answer found; see gap")
    elif not stats.proven:
        notes.append(f"{stopped}: returning the best answer found; see gap")
    modes, free_labels = decode(compiled, options)
    result = evaluate(problem, modes, free_labels, prices)
    t3 = time.perf_counter()
    objective = result.objective
    lower = min(bound + compiled.offset, objective)
    gap = (
        0.0
        if objective - lower <= 1e-9 * max(1.0, abs(objective))
        else (objective - lower) / max(abs(objective), 1e-12)
    )
    if gap == 0.0:
        lower = objective
    if trace is not None:
        trace.append(TraceRow(time.perf_counter() - t0, "final", compiled.n_vars, objective, lower))
    timings = {"compile": t1 - t0, "solve": t2 - t1, "report": t3 - t2, "total": t3 - t0}
    if budget is not None:
        timings["work_units"] = round(budget.spent, 6)
    # Every field is built from validated data; skip re-validating 100k-entry dicts.
    return Solution.model_construct(
        schema_version=problem.schema_version,
        problem=problem.name,
        status="optimal" if gap == 0.0 else "feasible",
        labels=result.labels,
        modes=modes,
        transitions=result.transitions,
        objective=objective,
        bound=lower,
        gap=gap,
        timings=timings,
        components=ComponentStats(
            count=stats.components, blocks=stats.blocks, memo_hits=stats.memo_hits, by_method=dict(stats.by_method)
        ),
        notes=notes,
    )


def decode(compiled: CompiledProblem, options: list[int]) -> tuple[dict[str, str], dict[str, str]]:
    """Variable options back to op mode names and labels of unproduced values."""
    problem = compiled.problem
    modes = {problem.ops[oi].id: problem.ops[oi].modes[mi].name for oi, mi in compiled.op_fixed_mode.items()}
    free = {problem.values[vi].id: compiled.labels[label] for vi, label in compiled.value_fixed_label.items()}
    for var, option in enumerate(options):
        choice = compiled.var_choices[var][option]
        if compiled.var_op[var] >= 0:
            op = problem.ops[compiled.var_op[var]]
            modes[op.id] = op.modes[choice].name
        else:
            free[problem.values[compiled.var_value[var]].id] = compiled.labels[choice]
    return modes, free
