"""Prices apart from a problem's structure (`Problem.checked_prices`): compiled, solved and evaluated at them, a
problem answers as the Problem made of them (`Problem.priced`) does, bit for bit; prices checked for another
structure, or out of range, are refused by name."""

import dataclasses
import random

import pytest

from layout_solver.core import robust
from layout_solver.core.evaluate import evaluate
from layout_solver.core.model import compile_problem, compiles_reused
from layout_solver.core.problem import ProblemError
from layout_solver.core.solve import solve
from layout_solver.core.synthetic import cnn_like, random_problem, transformer_like


def _other_prices(problem, seed: int):
    rng = random.Random(seed)
    mode_costs = [[rng.uniform(0, 40) for _ in op.modes] for op in problem.ops]
    pairs = [(v.id, a, b) for v in problem.values for a in v.domain for b in v.domain if a != b]
    moves = {pair: rng.uniform(0, 9) for pair in pairs if rng.random() < 0.7}  # the others at the default
    return problem.checked_prices(mode_costs, moves, rng.uniform(0, 2))


@pytest.mark.parametrize("make", [lambda: transformer_like(3), lambda: cnn_like(8, n_labels=3),
                                  lambda: random_problem(11, n_ops=12, n_labels=3, p_fixed=0.0)])  # fmt: skip
def test_a_problem_at_other_prices_compiles_solves_and_evaluates_as_the_problem_made_of_them(make):
    problem = make()
    prices = _other_prices(problem, 3)
    made = problem.priced(prices)
    fresh, at_prices = compile_problem(made), compile_problem(problem, prices)
    with compiles_reused():
        compile_problem(problem)
        reused = compile_problem(problem, prices)  # priced again from the last compile of the structure
    for compiled in (at_prices, reused):
        for f in dataclasses.fields(fresh):
            if f.name != "problem":  # the structure's, not the one made of the prices
                assert getattr(compiled, f.name) == getattr(fresh, f.name), f.name
        assert compiled.offset.hex() == fresh.offset.hex()
    expected = solve(made).model_dump(exclude={"timings"})
    assert solve(problem, prices=prices).model_dump(exclude={"timings"}) == expected
    with compiles_reused():
        solve(problem)
        assert solve(problem, prices=prices).model_dump(exclude={"timings"}) == expected
    answer = solve(problem)
    assert evaluate(problem, answer.modes, answer.labels, prices) == evaluate(made, answer.modes, answer.labels)
    assert problem.own_prices() == problem.checked_prices(
        [[m.cost for m in op.modes] for op in problem.ops], problem.transition_table()
    )
    assert problem.priced(problem.own_prices()) == problem


def test_the_weighted_prices_are_the_weighted_sum_and_solve_as_it_does():
    first = transformer_like(3)
    second = first.priced(_other_prices(first, 5))
    weights = [0.25, 3.0]
    prices = robust.weighted_prices([first, second], weights)
    combined = robust.weighted_sum([first, second], weights)
    assert first.priced(prices) == combined
    given = [first.own_prices(), _other_prices(first, 5)]  # the second's prices, checked for the first's structure
    assert robust.weighted_prices([first, first], weights, prices=given) == prices
    assert solve(first, prices=prices).model_dump(exclude={"timings"}) == solve(combined).model_dump(
        exclude={"timings"}
    )


def test_prices_for_another_structure_or_out_of_range_are_refused_by_name():
    problem, other = transformer_like(2), cnn_like(4)
    foreign = _other_prices(other, 1)
    for use in (
        lambda: solve(problem, prices=foreign),
        lambda: compile_problem(problem, foreign),
        lambda: problem.priced(foreign),
        lambda: robust.weighted_prices([problem], [1.0], prices=[foreign]),
    ):
        with pytest.raises(ProblemError, match="prices checked for problem"):
            use()
    own = _other_prices(problem, 2)
    (value, src, dst), _ = next(iter(own.transition_costs.items()))
    bad = dict(own.transition_costs)
    bad[(value, src, dst)] = float("nan")
    with pytest.raises(ProblemError, match=value):  # the same pairs as `like`: their prices are still checked
        problem.checked_prices(own.mode_costs, bad, like=own)
    moved = {**own.transition_costs, (value, src, "nowhere"): 1.0}
    with pytest.raises(ProblemError, match=value):  # a pair `like` does not list: looked up in the domain
        problem.checked_prices(own.mode_costs, moved, like=own)
    with pytest.raises(ProblemError, match="ops priced"):
        problem.checked_prices(own.mode_costs[:-1], own.transition_costs)
