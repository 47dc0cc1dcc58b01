"""Every solver path against brute force on random small problems.

Each hypothesis example is a random DAG problem (multi-result ops, shared
values, constants, fixed labels, explicit and default transition costs);
`tuning` steers it through enumeration, min-cut, elimination, SCIP, CP-SAT (alone
and side by side) and the block DP.
"""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from layout_solver import InfeasibleError, solve
from layout_solver.core.brute_force import brute_force
from layout_solver.core.evaluate import evaluate
from layout_solver.core.model import compile_problem
from layout_solver.core.solvers.mincut import solve_mincut
from layout_solver.core.solvers.subproblem import restrict
from layout_solver.core.synthetic import cnn_like, random_problem, transformer_like

PATHS = {
    "default": {},
    "elimination": {"enumeration_limit": 0},
    "cpsat-blocks": {"enumeration_limit": 0, "elimination_limit": 0, "engines": ("cpsat",)},
    "cpsat-whole": {"enumeration_limit": 0, "elimination_limit": 0, "use_blocks": False, "engines": ("cpsat",)},
    "mip-whole": {"enumeration_limit": 0, "elimination_limit": 0, "use_blocks": False, "engines": ("mip",)},
    "side-by-side": {"enumeration_limit": 0, "elimination_limit": 0, "use_blocks": False, "workers": 2},
}


def _check_against_brute_force(problem, tuning):
    try:
        optimum = brute_force(problem)[0]
    except InfeasibleError:
        with pytest.raises(InfeasibleError):
            solve(problem, **tuning)
        return None
    solution = solve(problem, **tuning)
    assert solution.objective == pytest.approx(optimum, abs=1e-6)
    assert solution.bound <= optimum + 1e-6
    assert solution.gap == 0 and solution.status == "optimal"
    # The reported transitions and labels are exactly what the evaluator says.
    again = evaluate(problem, solution.modes, {v: solution.labels[v] for v in solution.labels})
    assert again.objective == pytest.approx(solution.objective)
    assert sum(t.cost for t in solution.transitions) + again.mode_cost == pytest.approx(solution.objective)
    return solution


@pytest.mark.parametrize("path", PATHS)
@given(seed=st.integers(0, 10**9), n_ops=st.integers(1, 5), n_labels=st.integers(2, 4))
def test_multi_label_matches_brute_force(path, seed, n_ops, n_labels):
    _check_against_brute_force(random_problem(seed, n_ops=n_ops, n_labels=n_labels, p_fixed=0.1), PATHS[path])


@pytest.mark.parametrize("path", PATHS)
@given(seed=st.integers(0, 10**9), n_ops=st.integers(1, 8))
def test_two_label_matches_brute_force(path, seed, n_ops):
    _check_against_brute_force(random_problem(seed, n_ops=n_ops, binary=True, p_fixed=0.1), PATHS[path])


@settings(max_examples=200)
@given(seed=st.integers(0, 10**9))
def test_mincut_exact_when_it_applies(seed):
    """Min-cut alone, on whole two-label problems: exact whenever it accepts one."""
    problem = random_problem(seed, n_ops=7, binary=True, p_fixed=0.05)
    try:
        optimum = brute_force(problem)[0]
        compiled = compile_problem(problem)
    except InfeasibleError:
        return
    sub = restrict(compiled, list(range(compiled.n_vars)), compiled.factors, {})
    result = solve_mincut(sub)
    if result is None:
        return  # not submodular: the decomposer sends it to CP-SAT
    assert result.value + compiled.offset == pytest.approx(optimum)
    assert result.bound + compiled.offset <= optimum + 1e-6


def test_every_method_is_exercised():
    seen = set()
    for seed in range(60):
        for binary in (False, True):
            for tuning in PATHS.values():
                problem = random_problem(seed, n_ops=6, binary=binary, p_fixed=0.05)
                try:
                    seen |= set(solve(problem, **tuning).components.by_method)
                except InfeasibleError:
                    seen.add("infeasible")
    assert {"enumerate", "mincut", "elimination", "cpsat", "mip", "infeasible"} <= seen


def test_shared_transition_paid_once():
    from layout_solver import Mode, Op, Problem, Value

    x = Value(id="x", domain=["NCHW", "NHWC"], size_bytes=1000, kind="input", fixed="NCHW")
    values = [x] + [Value(id=f"y{i}", domain=["NCHW", "NHWC"], size_bytes=10) for i in range(3)]
    ops = [
        Op(
            id=f"conv{i}",
            operands=["x"],
            results=[f"y{i}"],
            modes=[Mode(name="nhwc", operands=["NHWC"], results=["NHWC"])],
        )
        for i in range(3)
    ]
    solution = solve(Problem(values=values, ops=ops))
    assert solution.objective == 1000
    [t] = solution.transitions
    assert t.consumers == ["conv0", "conv1", "conv2"]


def test_memo_reuses_repeated_blocks_exactly():
    problem = transformer_like(12, 4)
    with_memo = solve(problem)
    assert with_memo.components.memo_hits > 10 and with_memo.gap == 0
    without = solve(problem, memo=False)
    assert without.components.memo_hits == 0 and without.gap == 0
    assert with_memo.objective == pytest.approx(without.objective)


def test_block_dp_agrees_with_one_cpsat_model():
    # Small enough for CP-SAT to close on its own (12 blocks is not: gap 0.73 after 60 s).
    problem = transformer_like(2, 4)
    whole = solve(problem, enumeration_limit=0, elimination_limit=0, use_blocks=False, memo=False, time_limit=120)
    assert whole.gap == 0
    assert solve(problem).objective == pytest.approx(whole.objective)


def test_cnn_blocks_memo_and_optimal():
    solution = solve(cnn_like(40))
    assert solution.gap == 0
    assert solution.components.memo_hits > 30
    # Only the unavoidable transitions: the NCHW input into the first conv, and out to the classifier.
    assert {(t.src, t.dst) for t in solution.transitions} <= {("NCHW", "NHWC"), ("NHWC", "NCHW")}


def test_a_work_budget_gives_the_same_answer_on_a_loaded_machine():
    """The search stops on the work the engines count (CP-SAT's deterministic time, interleaved workers), not on
    the clock: the same answer with two threads competing for the interpreter and the cores."""
    import threading

    from layout_solver.core.synthetic import window_problem

    problem = window_problem(600, window=600, n_labels=4, seed=1)
    # elimination off: its wide tables solve this piece exactly, and the search is what is tested here
    options = {"time_limit": 60, "work_limit": 0.15, "engines": ("cpsat",), "workers": 2, "elimination_limit": 0}
    quiet = solve(problem, **options)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(1000))

    hogs = [threading.Thread(target=spin) for _ in range(2)]
    for hog in hogs:
        hog.start()
    try:
        loaded = solve(problem, **options)
    finally:
        stop.set()
        for hog in hogs:
            hog.join()
    assert quiet.gap > 0 and any("work limit reached (0.15 units)" in n for n in quiet.notes)
    assert (quiet.labels, quiet.modes, quiet.objective) == (loaded.labels, loaded.modes, loaded.objective)
    assert quiet.timings["work_units"] >= 0.15


def test_time_out_returns_legal_answer_with_gap():
    problem = transformer_like(6, 6)
    exact = solve(problem, time_limit=60)
    rushed = solve(problem, time_limit=1e-6, enumeration_limit=0, elimination_limit=0, use_blocks=False)
    assert rushed.status == "feasible" and rushed.gap > 0
    assert any("time limit" in note and "safety net" in note for note in rushed.notes)
    assert rushed.objective >= exact.objective - 1e-6
    assert rushed.bound <= exact.objective + 1e-6
    # The rushed answer is still a legal assignment: the evaluator accepts it.
    evaluate(problem, rushed.modes, rushed.labels)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**9))
def test_large_neighbourhood_search_is_legal_and_bounded(seed):
    """Pieces above LARGE_PIECE_VARS go to LNS; shrunk thresholds drive it on small problems."""
    from layout_solver.core.solvers import lns, portfolio

    problem = random_problem(seed, n_ops=9, n_labels=3, p_fixed=0.05)
    try:
        optimum = brute_force(problem)[0]
    except InfeasibleError:
        return
    saved = portfolio.LARGE_PIECE_VARS, lns.WINDOW_VARS
    portfolio.LARGE_PIECE_VARS, lns.WINDOW_VARS = 2, 4
    try:
        solution = solve(problem, enumeration_limit=0, elimination_limit=0, use_blocks=False)
    finally:
        portfolio.LARGE_PIECE_VARS, lns.WINDOW_VARS = saved
    assert solution.objective >= optimum - 1e-6 and solution.bound <= optimum + 1e-6
    again = evaluate(problem, solution.modes, solution.labels)
    assert again.objective == pytest.approx(solution.objective)


def test_irregular_problem_is_closed_by_the_mip_and_traced():
    from layout_solver.core.synthetic import window_problem

    trace = []
    problem = window_problem(600, window=40, seed=3)
    solution = solve(problem, time_limit=30, trace=trace, elimination_limit=0)  # exact elimination would take it
    assert solution.status == "optimal"
    phases = [row.phase for row in trace]
    assert phases[0] == "greedy" and phases[-1] == "final" and "mip" in phases
    assert [row.seconds for row in trace] == sorted(row.seconds for row in trace)
    assert all(row.bound <= row.incumbent + 1e-6 for row in trace)
    # CP-SAT alone (no SCIP) reaches a legal answer, never better than the proven optimum.
    cpsat = solve(problem, time_limit=3, engines=("cpsat",))
    assert cpsat.objective >= solution.objective - 1e-6 and cpsat.bound <= solution.objective + 1e-6


def test_deadline_holds_on_a_problem_nothing_closes_fast():
    """Not the benchmark's target (measured there): a guard against phases that ignore the deadline."""
    import time

    from layout_solver.core.synthetic import window_problem

    problem = window_problem(20_000, window=40, seed=2)  # settled within 1% in about 2 s here
    start = time.perf_counter()
    solution = solve(problem, time_limit=0.5)
    assert time.perf_counter() - start < 0.5 + 3.0
    assert solution.status == "feasible" and solution.bound <= solution.objective
    assert any("time limit" in note for note in solution.notes)


def test_time_limit_must_be_positive_and_finite():
    from layout_solver import ProblemError

    for bad in (0, -1, float("inf"), float("nan")):
        with pytest.raises(ProblemError, match="positive finite"):
            solve(cnn_like(2), time_limit=bad)


@pytest.mark.parametrize("seed", range(40))
def test_lp_relaxation_bounds_and_rounds_legally(seed):
    """Pieces of LP_PIECE_VARS or more get the relaxation first; a shrunk threshold drives it on small problems.
    Its bound never exceeds the optimum, its answer is priced exactly, and a piece it settles is within the gap."""
    from layout_solver.core.solvers import portfolio

    problem = random_problem(seed, n_ops=9, n_labels=3, p_fixed=0.05)
    try:
        optimum = brute_force(problem)[0]
    except InfeasibleError:
        return
    saved = portfolio.LP_PIECE_VARS
    portfolio.LP_PIECE_VARS = 1
    try:
        solution = solve(problem, enumeration_limit=0, elimination_limit=0, use_blocks=False, engines=("lp",))
    finally:
        portfolio.LP_PIECE_VARS = saved
    assert solution.objective >= optimum - 1e-6 and solution.bound <= optimum + 1e-6
    again = evaluate(problem, solution.modes, solution.labels)
    assert again.objective == pytest.approx(solution.objective)


def _whole_piece(problem):
    """The whole compiled problem as one piece, or None when it is infeasible."""
    try:
        compiled = compile_problem(problem)
    except InfeasibleError:
        return None
    return restrict(compiled, list(range(compiled.n_vars)), compiled.factors, {})


@pytest.mark.parametrize("seed", range(30))
def test_relaxation_bound_is_below_every_piece_optimum(seed):
    from layout_solver.core.solvers.exhaustive import enumerate_all
    from layout_solver.core.solvers.relaxation import relax

    sub = _whole_piece(random_problem(seed, n_ops=7, n_labels=4, p_fixed=0.05))
    if sub is None or not sub.n_vars:
        return
    bound, point, _ = relax(sub)
    assert bound <= enumerate_all(sub).value + 1e-6
    assert point.min() >= -1e-9 and point.max() <= 1 + 1e-9


def test_relaxation_settles_a_wide_irregular_piece_within_the_gap():
    """An irregular graph whose widest piece is past LP_PIECE_VARS: the relaxation's rounded answer, proven within
    RELATIVE_GAP, in a fraction of what SCIP needs (benchmarks/results/solver.md has the 10,000-op case)."""
    from layout_solver.core.solvers.portfolio import LP_PIECE_VARS, RELATIVE_GAP
    from layout_solver.core.synthetic import window_problem

    problem = window_problem(4000, window=40, seed=1)
    compiled = compile_problem(problem)
    from layout_solver.core.solvers.decompose import Decomposer

    assert max(len(v) for v, _ in Decomposer(compiled, deadline=float("inf")).components()) >= LP_PIECE_VARS
    solution = solve(problem, time_limit=30, elimination_limit=0)  # exact elimination's wide tables would take it
    assert {"lp", "lp-round"} & set(solution.components.by_method)
    assert solution.gap <= RELATIVE_GAP and solution.bound <= solution.objective
    assert solution.status == "optimal" or any(note.startswith("settled") for note in solution.notes)
    assert evaluate(problem, solution.modes, solution.labels).objective == pytest.approx(solution.objective)


@pytest.mark.parametrize("seed", range(20))
def test_cost_tables_price_as_factor_cost(seed, monkeypatch):
    """The looped and vectorised table builders and the local search's flat tables against `factor_cost`; the two
    builders give the same floats, whether the consumers' reading is cached or read afresh."""
    import itertools
    import random

    from layout_solver.core.solvers import tables

    sub = _whole_piece(random_problem(seed, n_ops=8, n_labels=4, p_fixed=0.05))
    if sub is None:
        return
    flat = tables.FlatTables(sub)
    rng = random.Random(seed)
    for fi, f in enumerate(sub.factors):
        shape = tuple(sub.n_options[v] for v in f.scope)
        looped = tables.factor_table(sub, f)
        vectorised = tables._vectorised_table(sub, f, shape)
        assert np.array_equal(np.array(tables._looped_costs(sub, f)).reshape(shape), vectorised)
        with monkeypatch.context() as patch:
            patch.setattr(tables, "_CACHED_READS", 0)  # every reading afresh, as for a wide factor
            assert np.array_equal(tables._vectorised_table(sub, f, shape), vectorised)
        for index in itertools.product(*(range(n) for n in shape)):
            options = [rng.randrange(n) for n in sub.n_options]
            for v, o in zip(f.scope, index):
                options[v] = o
            expected = sub.factor_cost(f, options)
            assert looped[index] == pytest.approx(expected) and vectorised[index] == pytest.approx(expected)
            assert flat.cost(fi, options) == pytest.approx(expected)


def test_first_order_relaxation_is_deterministic_and_bounds():
    """Above FIRST_ORDER_BOOLS the relaxation is PDLP's: under a work budget (passes over the matrix) the same
    bound and point twice, the bound below the simplex's exact LP optimum and close to it."""
    from layout_solver.core.solvers import relaxation
    from layout_solver.core.solvers.budget import WorkBudget
    from layout_solver.core.synthetic import window_problem

    sub = _whole_piece(window_problem(3000, window=40, seed=4))
    exact, _, vertex = relaxation.relax(sub)
    assert vertex
    saved = relaxation.FIRST_ORDER_BOOLS
    relaxation.FIRST_ORDER_BOOLS = 0
    try:
        runs = [relaxation.relax(sub, budget=WorkBudget(0.5), workers=2) for _ in range(2)]
    finally:
        relaxation.FIRST_ORDER_BOOLS = saved
    (first, point, vertex), (second, again, _) = runs
    assert not vertex and first == second and (point == again).all()
    assert exact - 0.01 * abs(exact) <= first <= exact + 1e-6


def test_a_piece_the_simplex_would_not_finish_gets_the_first_order_relaxation_not_the_greedy_answer():
    """Against the clock: with too little time left for the dual simplex (ITERATIONS_PER_SECOND) but at least
    FIRST_ORDER_MIN_SECONDS, the piece is relaxed by PDLP: a rounded answer with a real bound, where the greedy
    answer's bound is only the sum of the unary minima."""
    import time

    from layout_solver.core.solvers import portfolio
    from layout_solver.core.synthetic import window_problem

    sub = _whole_piece(window_problem(8000, window=40, seed=4))
    booleans = sum(sub.n_options) + 2 * len(sub.factors)
    left = 0.5 * portfolio.ITERATIONS_PER_BOOLEAN * booleans / portfolio.ITERATIONS_PER_SECOND  # half of what it needs
    assert left >= portfolio.FIRST_ORDER_MIN_SECONDS
    assert portfolio._relaxation_method(sub, time.perf_counter() + left, None) == "first-order"
    assert portfolio._relaxation_method(sub, time.perf_counter() + 2 * left * 1.1, None) == "simplex"
    assert (
        portfolio._relaxation_method(sub, time.perf_counter() + 0.5 * portfolio.FIRST_ORDER_MIN_SECONDS, None) is None
    )
    # The relaxation itself under a work budget of half the simplex's iterations: the same passes however loaded
    # the machine is (against the clock a loaded CI machine left PDLP too few to beat the plain bound).
    from layout_solver.core.solvers.budget import ITERATIONS_PER_UNIT, WorkBudget

    units = max(
        0.5 * portfolio.ITERATIONS_PER_BOOLEAN * booleans / ITERATIONS_PER_UNIT, portfolio.FIRST_ORDER_MIN_UNITS
    )
    assert portfolio._relaxation_method(sub, time.perf_counter() + 60, WorkBudget(units)) == "first-order"
    result = portfolio.solve_hard(sub, time.perf_counter() + 60, engines=("lp",), budget=WorkBudget(units))
    trivial = sub.offset + sum(min(u) for u in sub.unary)  # the plain bound, computed here independently
    assert result.method in ("lp", "lp-round") and result.bound <= result.value
    assert result.bound - trivial > 0.5 * (result.value - trivial)  # most of the way from the trivial bound


def test_each_component_gets_its_share_of_the_time_or_of_the_work_budget():
    """Components solved in turn: each takes at most its share of what is left (by its variables, at least
    MIN_TIME_SHARE): of the time against the clock, of the units under a work budget (the deadline then stays
    whole, the safety net), so the last wide piece is not left the greedy answer, and the split is the same on
    any machine."""
    import time

    from layout_solver.core.solvers import decompose
    from layout_solver.core.solvers.budget import WorkBudget
    from layout_solver.core.synthetic import window_problem

    compiled = compile_problem(window_problem(2000, window=12, seed=3))
    for budget in (None, WorkBudget(10.0)):
        decomposer = decompose.Decomposer(compiled, deadline=time.perf_counter() + 60, budget=budget)
        seen = []
        original = decomposer.solve_component

        def record(variables, factors, original=original, decomposer=decomposer, seen=seen, budget=budget):
            shares = (decomposer.budget.units, budget.left) if budget is not None else None
            seen.append((len(variables), decomposer.until - time.perf_counter(),
                         decomposer.deadline - time.perf_counter(), shares))  # fmt: skip
            return original(variables, factors)

        decomposer.solve_component = record
        decomposer.solve()
        assert len(seen) > 1
        total = sum(n for n, _, _, _ in seen)
        remaining = total
        for n, share, whole, units in seen:
            if budget is None:
                assert share <= max(n / remaining, decompose.MIN_TIME_SHARE) * whole + 1e-3
            else:
                assert share == pytest.approx(whole, abs=1e-3)
                given, left = units
                assert given == pytest.approx(max(n / remaining, decompose.MIN_TIME_SHARE) * left)
            remaining -= n


def test_a_piece_too_wide_for_the_table_limit_is_eliminated_with_wide_tables_before_the_search():
    """A piece the table limit refuses goes to elimination with WIDE_TABLE tables when its order's entries in all
    stay under WIDE_WORK (not to SCIP), and that exact answer is SCIP's optimum; a work cap below what the order
    needs refuses it, symbolically. (A window of 40 no longer needs wide tables: the min-fill order keeps its
    largest at 20,736 entries; a window of 50 needs 139,968.)"""
    import time

    from layout_solver.core.solvers import elimination, mip
    from layout_solver.core.solvers.greedy import greedy
    from layout_solver.core.synthetic import window_problem

    sub = _whole_piece(window_problem(200, window=50, seed=1))
    assert elimination.elimination_order(sub, elimination.MAX_TABLE) is None
    assert elimination.elimination_order(sub, elimination.MAX_TABLE, wide_work=1000) is None
    assert elimination.solve_by_elimination(sub, elimination.MAX_TABLE) is None
    wide = elimination.solve_by_elimination(sub, elimination.MAX_TABLE, wide_work=elimination.WIDE_WORK)
    assert wide is not None and wide.method == "elimination" and wide.bound == pytest.approx(wide.value)
    scip = mip.solve_mip(sub, greedy(sub), time.perf_counter() + 60)
    assert scip is not None and scip.bound == pytest.approx(scip.value)  # SCIP proved its optimum
    assert wide.value == pytest.approx(scip.value)
    solution = solve(window_problem(200, window=50, seed=1), time_limit=60)
    assert solution.status == "optimal" and "elimination" in solution.components.by_method
    assert set(solution.components.by_method) <= {"elimination", "enumerate", "constant"}


@pytest.mark.parametrize("seed", range(12))
def test_a_problem_priced_again_compiles_to_what_a_fresh_compile_gives(seed):
    """Inside `compiles_reused()`, `compile_problem` keeps the last problem's variables and factors for one that
    differs only in prices (`same_structure`): every field equals a fresh compile's, the offset to the last bit.
    Outside the block, or for a problem that differs in more (one fixed label), it compiles afresh."""
    import dataclasses
    import random

    from layout_solver.core.model import compiles_reused
    from layout_solver.core.problem import same_structure

    first = random_problem(seed, n_ops=10, n_labels=3, p_fixed=0.0)
    rng = random.Random(seed)
    mode_costs = [[rng.uniform(0, 40) for _ in op.modes] for op in first.ops]
    moves = {(t.value, t.src, t.dst): rng.uniform(0, 9) for t in first.transition_costs}
    second = first.with_costs(mode_costs, moves, rng.uniform(0, 2))
    assert same_structure(first, second)
    with compiles_reused():
        kept = compile_problem(first)
        again = compile_problem(second)
        assert again.factors is kept.factors  # reused, not rebuilt
    fresh = compile_problem(second)
    assert fresh.factors is not again.factors and compile_problem(second).factors is not fresh.factors
    for f in dataclasses.fields(fresh):
        assert getattr(again, f.name) == getattr(fresh, f.name), f.name
    assert again.offset.hex() == fresh.offset.hex()
    with compiles_reused():
        solve(first)
        reused = solve(second)
    assert reused.model_dump(exclude={"timings"}) == solve(second).model_dump(exclude={"timings"})

    pinned = second.model_copy(deep=True)
    free = next(v for v in pinned.values if v.fixed is None and len(v.domain) > 1)
    free.fixed = free.domain[-1]
    assert not same_structure(second, pinned)
    with compiles_reused():
        kept = compile_problem(second)
        try:
            assert compile_problem(pinned).factors is not kept.factors
        except InfeasibleError:
            pass  # compiled afresh, and found the pin infeasible: not priced as `second`


@pytest.mark.parametrize("make", [lambda: transformer_like(4), lambda: cnn_like(12, n_labels=3)])
def test_solves_inside_compiles_reused_keep_orders_components_and_tables_and_answer_as_alone(make):
    """Inside `compiles_reused()` the solvers keep elimination orders and components by the factors' scopes, and
    factor tables by their prices (`kept`): a graph solved under two prices, then the first again, gets the
    solutions it gets alone; every factor's kept table is, bit for bit, the table priced afresh; and outside the
    block nothing is kept."""
    import random

    from layout_solver.core.model import compiles_reused, kept
    from layout_solver.core.solvers import tables

    first = make()
    rng = random.Random(7)
    second = first.with_costs(
        [[rng.uniform(0, 40) for _ in op.modes] for op in first.ops],
        {(t.value, t.src, t.dst): rng.uniform(0, 9) for t in first.transition_costs},
    )
    alone = [solve(p).model_dump(exclude={"timings"}) for p in (first, second, first)]
    with compiles_reused():
        together = [solve(p).model_dump(exclude={"timings"}) for p in (first, second, first)]
        stores = {kind: dict(kept(kind)) for kind in ("elimination orders", "components", "factor tables")}
        compiled = compile_problem(second)
        sub = restrict(compiled, list(range(compiled.n_vars)), compiled.factors, {})
        shared = [tables.factor_table(sub, f) for f in sub.factors]
    assert together == alone
    assert all(stores.values()), {kind: len(store) for kind, store in stores.items()}
    assert not any(t.flags.writeable for t in shared)  # a kept table is read-only
    fresh = [tables.factor_table(sub, f) for f in sub.factors]  # outside the block: priced afresh
    assert all(a.tobytes() == b.tobytes() and a.shape == b.shape for a, b in zip(shared, fresh))
    assert kept("factor tables") is None


def test_a_piece_min_size_needs_wide_tables_for_is_eliminated_in_the_min_fill_order_within_the_table_limit():
    """Where the min-size order needs a table above the limit, the weighted min-fill order is tried: a window-40
    piece's largest table falls from 373,248 entries to 20,736, so plain elimination takes it, and its answer is
    SCIP's proven optimum."""
    import time

    from layout_solver.core.solvers import elimination, mip
    from layout_solver.core.solvers.greedy import greedy
    from layout_solver.core.synthetic import window_problem

    sub = _whole_piece(window_problem(200, window=40, seed=1))
    by_size, largest_by_size, _ = elimination._greedy_order(sub, 1 << 40, 1 << 40, 0, elimination._table_size)
    assert largest_by_size > elimination.MAX_TABLE  # min-size fails at the limit
    order = elimination.elimination_order(sub, elimination.MAX_TABLE)
    assert order is not None and order != by_size and sorted(order) == list(range(sub.n_vars))
    exact = elimination.solve_by_elimination(sub, elimination.MAX_TABLE)
    assert exact is not None and exact.bound == pytest.approx(exact.value)
    scip = mip.solve_mip(sub, greedy(sub), time.perf_counter() + 60)
    assert scip is not None and scip.bound == pytest.approx(scip.value)
    assert exact.value == pytest.approx(scip.value)
