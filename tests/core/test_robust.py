"""The robust default objective's pure core: pricing several profiles together, choosing against stock."""

import random

import pytest

from layout_solver.core import robust
from layout_solver.core.brute_force import brute_force
from layout_solver.core.evaluate import evaluate
from layout_solver.core.problem import ProblemError
from layout_solver.core.solve import solve
from layout_solver.core.synthetic import random_problem


def _repriced(problem, seed: int):
    """The same problem with other costs: what building it under another profile gives."""
    rng = random.Random(seed)
    data = problem.model_dump()
    for op in data["ops"]:
        for mode in op["modes"]:
            mode["cost"] = rng.uniform(0, 50)
    for t in data["transition_costs"]:
        t["cost"] = rng.uniform(0, 50)
    data["default_cost_per_byte"] = rng.uniform(0, 3)
    return type(problem).model_validate(data)


@pytest.mark.parametrize("seed", range(12))
def test_the_weighted_sum_prices_every_assignment_as_the_weighted_prices(seed):
    first = random_problem(seed, n_ops=5, p_fixed=0.0, binary=True)  # full domains: most draws are legal
    second = _repriced(first, seed + 100)
    combined = robust.weighted_sum([first, second], [0.25, 3.0])
    rng = random.Random(seed)
    compared = 0
    for _ in range(40):
        modes = {op.id: rng.choice(op.modes).name for op in first.ops}
        free = {v.id: rng.choice(v.domain) for v in first.values}
        try:
            one, two = evaluate(first, modes, free), evaluate(second, modes, free)
        except ProblemError:
            continue  # an assignment against a hard constraint: no price to compare
        assert evaluate(combined, modes, free).objective == pytest.approx(0.25 * one.objective + 3.0 * two.objective)
        compared += 1
    assert compared, "no legal assignment drawn: the test compared nothing"


@pytest.mark.parametrize("seed", range(6))
def test_the_solver_finds_the_weighted_sums_optimum_at_ratio_scale(seed):
    """Weights are 1 / stock's price (1e-4 and below for a whole delegate): the solver's integer scaling
    must still find the optimum."""
    first = random_problem(seed, n_ops=5, p_fixed=0.0)
    second = _repriced(first, seed + 50)
    combined = robust.weighted_sum([first, second], [1e-5, 3e-4])
    expected, _, _ = brute_force(combined)
    assert solve(combined).objective == pytest.approx(expected, rel=1e-6)


def test_problems_that_differ_in_more_than_costs_are_refused():
    first = random_problem(1, n_ops=4)
    data = first.model_dump()
    data["ops"][0]["modes"][0]["name"] = "renamed"
    with pytest.raises(ProblemError, match="more than its costs"):
        robust.weighted_sum([first, type(first).model_validate(data)], [1.0, 1.0])
    with pytest.raises(ProblemError, match="one weight per problem"):
        robust.weighted_sum([first], [1.0, 1.0])


def test_a_candidate_any_profile_prices_dearer_than_stock_is_refused():
    stock = {"gpu": 100.0, "cpu": 100.0}
    # Half the price on one profile does not buy 20% more on the other.
    assert robust.choose({"lopsided": {"gpu": 50.0, "cpu": 120.0}}, stock).chosen is None
    # Priced as stock everywhere: no reason to change stock's layout.
    assert robust.choose({"same": {"gpu": 100.0, "cpu": 100.0}}, stock).chosen is None
    # Cheaper on one, the same on the other: taken.
    assert robust.choose({"pareto": {"gpu": 80.0, "cpu": 100.0}}, stock).chosen == "pareto"


def test_the_smallest_worst_ratio_wins_then_the_smaller_sum():
    stock = {"gpu": 100.0, "cpu": 200.0}
    choice = robust.choose(
        {
            "a": {"gpu": 90.0, "cpu": 100.0},  # worst 0.91
            "b": {"gpu": 60.0, "cpu": 170.0},  # worst 0.85
            "c": {"gpu": 85.0, "cpu": 100.0},  # worst 0.86
        },
        stock,
    )
    assert choice.chosen == "b"
    assert choice.ratios["gpu"] == pytest.approx(61 / 101)
    tie = robust.choose({"x": {"gpu": 50.0, "cpu": 180.0}, "y": {"gpu": 90.0, "cpu": 180.0}}, stock)
    assert tie.chosen == "x"


def test_prices_near_zero_are_not_infinitely_dearer():
    # An assumed-numbers profile prices a delegate's texture ops at 0 and a buffer at a few thousandths of a us.
    stock = {"assumed": 0.0, "measured": 1000.0}
    assert robust.choose({"c": {"assumed": 0.002, "measured": 900.0}}, stock).chosen == "c"
    assert robust.choose({"c": {"assumed": 5.0, "measured": 900.0}}, stock).chosen is None
    # Cheaper by less than a microsecond is no reason to change stock's layout.
    assert robust.choose({"c": {"assumed": 0.0, "measured": 999.5}}, stock).chosen is None


def test_a_candidate_without_a_price_under_a_profile_is_an_error():
    with pytest.raises(ProblemError, match="no price under profile"):
        robust.choose({"c": {"gpu": 1.0}}, {"gpu": 2.0, "cpu": 2.0})


def test_a_saving_a_profile_cannot_resolve_is_refused_and_said():
    stock = {"assumed": 0.0, "measured": 1000.0}
    # 10% cheaper on the measured profile, but the ops it moved could be off by 150 us: refused, and why.
    choice = robust.choose({"c": {"assumed": 0.0, "measured": 900.0}}, stock, {"c": {"measured": 150.0}})
    assert choice.chosen is None
    assert choice.unresolved == {"c": ("measured", 100.0, 150.0)}
    assert "within its 150 us uncertainty" in choice.describe()
    # The same saving over a margin it clears is taken; a profile of assumed numbers has no margin.
    assert robust.choose({"c": {"assumed": 0.0, "measured": 900.0}}, stock, {"c": {"measured": 50.0}}).chosen == "c"


def test_the_uncertainty_counts_only_what_the_change_moved():
    stock = {
        "conv": ("convolution", ("T:C",), 500.0),  # left alone: its error is the same on both sides
        "ln": ("layer_norm", ("B:W", "<-", "B:W"), 40.0),
        "old_clone": ("clone", ("T:W",), 30.0),
    }
    moved = {
        "conv": ("convolution", ("T:C",), 500.0),
        "ln": ("layer_norm", ("T:W", "<-", "T:W"), 35.0),  # written in another representation
        "new_clone": ("clone", ("T:C",), 5.0),  # a transition on one side only
    }
    assert robust.uncertainty(stock, moved, 0.5) == pytest.approx(0.5 * (40 + 35 + 30 + 5) / 2)
    assert robust.uncertainty(stock, stock, 0.5) == 0.0
    # Read in another representation (the op writes what it wrote) counts as moved.
    read_elsewhere = dict(stock, ln=("layer_norm", ("B:W", "<-", "T:W"), 40.0))
    assert robust.uncertainty(stock, read_elsewhere, 1.0) == pytest.approx(40.0)
    # A side whose price its profile does not stand behind counts at that error, not the resolution.
    shaky = lambda name, record: name == "ln" and record[1][0] == "B:W"
    assert robust.uncertainty(stock, moved, 0.5, shaky, 4.0) == pytest.approx((4.0 * 40 + 0.5 * (35 + 30 + 5)) / 2)
    assert robust.uncertainty(stock, stock, 0.5, shaky, 4.0) == 0.0  # nothing moved: nothing to be off


@pytest.mark.parametrize("seed", range(8))
def test_a_profiles_own_optimum_ruled_out_by_the_combined_bound_is_never_admissible(seed):
    """`own_optimum_ruled_out`: where it says so, that profile's own optimum is priced above stock's (+ NOISE_US)
    by some profile, and where the bound exceeds the number of profiles no sampled layout is priced at most
    stock's by both. Stock is cheaper than every layout (below each optimum by more than the noise: a layout
    the problem cannot express), about as cheap as the optima, or dearer (1.1x each optimum)."""
    problems = [random_problem(seed, n_ops=5, p_fixed=0.0, binary=True)]
    problems.append(_repriced(problems[0], seed + 200))
    optima = [brute_force(p) for p in problems]
    ruled = []
    for factor in (0.8, 1.0, 1.1):
        stock = [max(0.8 * o[0] - 2 * robust.NOISE_US, 0.0) if factor < 1 else factor * o[0] for o in optima]
        weights = [1.0 / (s + robust.NOISE_US) for s in stock]
        first = solve(robust.weighted_sum(problems, weights))
        first_prices = [evaluate(p, first.modes, first.labels).objective for p in problems]
        for k, (_, modes, free) in enumerate(optima):
            ratio = robust.ratio(first_prices[k], stock[k])
            if not robust.own_optimum_ruled_out(first.bound, 2, ratio):
                continue
            ruled.append((factor, k))
            prices = [evaluate(p, modes, free).objective for p in problems]
            assert any(x > s + robust.NOISE_US for x, s in zip(prices, stock)), (factor, k, prices, stock)
        if robust.own_optimum_ruled_out(first.bound, 2, 1.0):  # every layout
            rng = random.Random(seed)
            for _ in range(60):
                modes = {op.id: rng.choice(op.modes).name for op in problems[0].ops}
                free = {v.id: rng.choice(v.domain) for v in problems[0].values}
                try:
                    prices = [evaluate(p, modes, free).objective for p in problems]
                except ProblemError:
                    continue
                assert any(x > s + robust.NOISE_US for x, s in zip(prices, stock)), (factor, prices, stock)
    if min(o[0] for o in optima) > 2 * robust.NOISE_US:
        assert {(0.8, 0), (0.8, 1)} <= set(ruled), "stock cheaper than every layout: both optima ruled out"


@pytest.mark.parametrize("seed", range(6))
def test_the_weighted_sum_is_the_same_floats_as_a_sum_in_python(seed):
    """Each mode's and each listed transition's price is exactly sum(w * price) added in the problems' order, so a
    solve of the sum (and the program it writes) does not depend on how the sum was computed; a pair only one
    problem lists is priced by the other at its unlisted rate."""
    problems = [random_problem(seed, n_ops=6, p_fixed=0.0, binary=True)]
    problems += [_repriced(problems[0], seed + k) for k in (100, 200)]
    data = problems[2].model_dump()
    dropped = data["transition_costs"].pop()  # listed by the first two only
    problems[2] = type(problems[0]).model_validate(data)
    weights = [1.0 / 3.7, 2.5e-4, 0.9]
    combined = robust.weighted_sum(problems, weights)
    for k, op in enumerate(combined.ops):
        for j, mode in enumerate(op.modes):
            assert mode.cost == sum(w * p.ops[k].modes[j].cost for w, p in zip(weights, problems))
    sizes = {v.id: v.size_bytes for v in problems[0].values}
    tables = [p.transition_table() for p in problems]
    for t in combined.transition_costs:
        key = (t.value, t.src, t.dst)
        expected = sum(
            w * table.get(key, sizes[t.value] * p.default_cost_per_byte)
            for w, table, p in zip(weights, tables, problems)
        )
        assert t.cost == expected
    assert (dropped["value"], dropped["src"], dropped["dst"]) in combined.transition_table()
