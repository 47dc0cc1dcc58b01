"""A piece of the compiled problem with local variable numbering.

Every solver (enumeration, min-cut, CP-SAT, greedy) works on a Subproblem:
variables 0..n-1, their unary costs, and factors whose scopes use local
indices. Variables decided outside the piece are folded in by `restrict`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from layout_solver.core.model import CompiledProblem, Factor, factor_cost


@dataclass(slots=True)
class SubResult:
    """A subproblem's answer: one option per variable, its exact value, a proven lower bound, and the method."""

    options: list[int]  # chosen option per local variable
    value: float  # exact cost of the piece under that choice (offset included)
    bound: float  # proven lower bound on the piece's optimum
    method: str


def proven(result: SubResult) -> bool:
    """True if `result` is proven optimal (its bound meets its value)."""
    return result.bound >= result.value - 1e-9 * max(1.0, abs(result.value))


def within(result: SubResult, relative_gap: float) -> bool:
    """True if `result`'s value is proven within `relative_gap` of the optimum."""
    return result.value - result.bound <= relative_gap * max(abs(result.value), 1e-12)


@dataclass
class Subproblem:
    """A connected piece of a compiled problem: its variables' options, unary costs and factors, renumbered from 0."""

    n_options: list[int]
    unary: list[tuple[float, ...]]
    factors: list[Factor]
    offset: float
    cost: Callable[[int, int, int], float]  # (value, src label, dst label) -> cost
    # value -> a key that determines `cost(value, ., .)` (`CompiledProblem.prices_of`); None: none known
    prices_of: Callable[[int], tuple] | None = None

    @property
    def n_vars(self) -> int:
        """The number of variables."""
        return len(self.n_options)

    @property
    def plain_bound(self) -> float:
        """A lower bound on any assignment's cost: each variable at its cheapest option, no transition paid (they
        cost >= 0)."""
        return self.offset + sum(min(u) for u in self.unary)

    def factor_cost(self, f: Factor, opt) -> float:
        """The cost of factor `f` under the options `opt` (variable -> option)."""
        return factor_cost(f, opt, self.cost)

    def total(self, opt) -> float:
        """The cost of a full option assignment."""
        return (
            self.offset
            + sum(u[o] for u, o in zip(self.unary, opt))
            + sum(self.factor_cost(f, opt) for f in self.factors)
        )

    def var_factors(self) -> list[list[int]]:
        """For every variable, the factors that touch it."""
        touching: list[list[int]] = [[] for _ in range(self.n_vars)]
        for fi, f in enumerate(self.factors):
            for var in f.scope:
                touching[var].append(fi)
        return touching


def restrict(
    compiled: CompiledProblem,
    variables: list[int],
    factors: list[Factor],
    fixed: dict[int, int],
    unary_vars: list[int] | None = None,
) -> Subproblem:
    """The piece over `variables` (global ids) with `fixed` variables folded in.

    `unary_vars` lists the variables whose unary cost belongs to this piece
    (default: all of `variables`).
    """
    local = {g: i for i, g in enumerate(variables)}
    offset = 0.0
    out: list[Factor] = []
    for f in factors:
        if f.src_var >= 0 and f.src_var in fixed:
            src_var, src_labels = -1, (f.src_labels[fixed[f.src_var]],)
        elif f.src_var >= 0:
            src_var, src_labels = local[f.src_var], f.src_labels
        else:
            src_var, src_labels = -1, f.src_labels
        const_req = set(f.const_req)
        cons_vars, cons_reqs = [], []
        for var, reqs in zip(f.cons_vars, f.cons_reqs):
            if var in fixed:
                const_req |= reqs[fixed[var]]
            else:
                cons_vars.append(local[var])
                cons_reqs.append(reqs)
        g = Factor(f.value, src_var, src_labels, tuple(cons_vars), tuple(cons_reqs), frozenset(const_req))
        if src_var < 0 and not cons_vars:
            offset += compiled.factor_cost(g, ())
        else:
            out.append(g)
    owners = set(variables if unary_vars is None else unary_vars)
    unary = [compiled.unary[g] if g in owners else (0.0,) * compiled.n_options[g] for g in variables]
    return Subproblem(
        n_options=[compiled.n_options[g] for g in variables],
        unary=unary,
        factors=out,
        offset=offset,
        cost=compiled.cost,
        prices_of=compiled.prices_of,
    )


def integer_scale(costs: list[float], max_total: float) -> tuple[float, float]:
    """Scale that turns costs into integers for an integer solver, and the
    worst-case error (in cost units) that rounding at that scale introduces.

    Exact (error 0) whenever some power of ten makes every cost integral and
    keeps the total in range; otherwise costs are rounded and the error bound
    widens the reported gap instead of being hidden.
    """
    total = sum(costs)
    for scale in (1.0, 1e2, 1e3, 1e4, 1e6):
        if total * scale >= max_total:
            break
        if all(abs(c * scale - round(c * scale)) <= 1e-6 for c in costs):
            return scale, 0.0
    scale = min(1e3, max_total / max(total, 1.0))
    return scale, 0.5 * len(costs) / scale


@contextlib.contextmanager
def stopped_by(event: threading.Event | None, stop: Callable[[], None]) -> Iterator[None]:
    """Calls `stop()` (a solver's interrupt) if `event` is set while the block runs.

    Lets two solvers run side by side: whichever proves optimality first sets
    the event that stops the other.
    """
    if event is None:
        yield
        return
    finished = threading.Event()

    def watch() -> None:
        while not finished.is_set():
            if event.wait(0.05):
                stop()
                return

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        yield
    finally:
        finished.set()
        watcher.join()
