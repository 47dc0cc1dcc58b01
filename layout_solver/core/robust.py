"""Layouts no cost profile prices dearer than stock's: the objective when the device is not calibrated.

One profile is one reading of a device. The shipped ones disagree (the assumed mobile-GPU numbers price
ops by storage alone, the measured lavapipe profile by class, shape and packing), and an optimum of one
can be dearer than stock's layout under another: on lavapipe, the mobile-GPU optimum of a ConvNeXt-style
model ran 1.10x stock's time while the lavapipe optimum ran 0.80x (measured by the filer of issue 36). A user who has not calibrated their
device does not know which reading is closer to it.

So the default objective is robust over every profile it is given. Candidate layouts are priced by
every profile, each as a ratio to stock's layout under the same profile. The first candidate is the
optimum of the profiles' costs summed as ratios to stock's (`weighted_sum`, one solve); it is taken if
no profile prices it dearer than stock. Otherwise each profile's own optimum joins it, and the candidate
with the smallest worst ratio is taken if no profile prices it dearer (`choose`); otherwise stock's
layout stays. Refusing whatever one profile prices dearer, and ranking by the worst ratio (not, say, the
mean), is what makes "never dearer than stock under any profile" a property of the choice: a candidate
that one profile prices at 0.5 and another at 1.2 is refused, whatever the average.

"Cheaper" is read against what a measured profile can resolve (`uncertainty`): a candidate whose
saving under a profile is smaller than that profile's relative error on one op times the price of what
the change moved is refused too. The shipped lavapipe profile priced a MobileViT's change (its first
transformer stage moved from buffers to textures) 4.8% cheaper than stock's layout; the program ran 4% slower
(texture layer_norms and width-splitting views the probes had not seen at those shapes): the saving was
smaller than 13% (lavapipe's resolution) of the moved ops' price. Removing a transition that costs more
than the ops it touches, the change the default exists for, is kept.

Pure: problems and numbers in, problems and a choice out.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from layout_solver.core.problem import MAX_COST, Prices, Problem, ProblemError, same_structure

# Prices this many microseconds apart are the same price: below one dispatch's overhead on any device
# profiled, and an assumed-numbers profile prices a delegate of texture ops at 0 and one buffer in it at
# a few thousandths of a microsecond. Also added to both sides of a ratio, so a price near zero is not
# "infinitely dearer".
NOISE_US = 1.0


@dataclass(frozen=True)
class Choice:
    """What `choose` decided: the chosen candidate's name (None: keep stock's layout), its ratio to
    stock's price under each profile, every candidate's ratios, and the candidates refused only because a
    profile could not resolve their saving (name -> (profile, saving us, margin us)), for the report."""

    chosen: str | None
    ratios: dict[str, float]
    tried: dict[str, dict[str, float]]
    unresolved: dict[str, tuple[str, float, float]] = field(default_factory=dict)

    def describe(self) -> str:
        """One line for a report: what was kept and how each profile priced it."""
        if self.chosen is None:
            worst = ", ".join(f"{name} {max(r.values()):.3f} ({max(r, key=r.get)})" for name, r in self.tried.items())
            within = "; ".join(
                f"{name}: {profile} prices it {saving:,.0f} us cheaper, within its {margin:,.0f} us uncertainty"
                for name, (profile, saving, margin) in self.unresolved.items()
            )
            return (
                "kept stock's layout: no candidate is cheaper than stock under one profile without being dearer "
                f"under another, or cheaper by less than that profile resolves (worst ratio to stock: {worst})"
                + (f" ({within})" if within else "")
            )
        return f"chose {self.chosen}: ratio to stock's price " + ", ".join(
            f"{p} {r:.3f}" for p, r in self.ratios.items()
        )


def ratio(cost: float, stock: float) -> float:
    """`cost` over `stock`, each with NOISE_US added (so prices near zero compare as equal)."""
    return (cost + NOISE_US) / (stock + NOISE_US)


def uncertainty(
    stock: dict[str, tuple],
    candidate: dict[str, tuple],
    resolution: float,
    unreliable: Callable[[str, tuple], bool] | None = None,
    unreliable_error: float = 0.0,
) -> float:
    """How far one profile's price of a change could be off: `resolution` (its relative error on one op)
    times the price of what the change moved, the mean of the two sides' prices of it: the ops written or
    read in another representation, and the transitions either side has alone.

    `stock`, `candidate`: node name -> (operator, representations, price), the two taggings of one graph.
    A price of the whole program is not the measure: ops the change leaves alone cost the same on both
    sides, errors and all, and only the moved ones can make the prediction wrong. One side's price, not
    the sum of both: an op priced in two representations of one shape is off in the same direction in
    both more often than not (the same class's fit, the same probes nearby).

    `unreliable(name, record)` marks a side's price its profile does not stand behind (a fit that cannot
    explain its own samples): that side counts with `unreliable_error` instead of `resolution`.

    >>> uncertainty({"a": ("ln", ("T",), 100.0), "b": ("mm", ("T",), 50.0)},
    ...             {"a": ("ln", ("B",), 80.0), "b": ("mm", ("T",), 50.0), "c": ("clone", ("B",), 20.0)}, 0.1)
    10.0
    """
    margin = 0.0
    for name in stock.keys() | candidate.keys():
        before, after = stock.get(name), candidate.get(name)
        if before is None or after is None or before[:2] != after[:2]:
            for record in (before, after):
                if record is not None:
                    off = unreliable_error if unreliable is not None and unreliable(name, record) else resolution
                    margin += off * record[2]
    return margin / 2.0


def choose(
    candidates: dict[str, dict[str, float]],
    stock: dict[str, float],
    margins: dict[str, dict[str, float]] | None = None,
) -> Choice:
    """The candidate with the smallest worst ratio to `stock` over the profiles, among those no profile
    prices above stock and at least one prices below it (each by more than NOISE_US); None when there is none.

    `candidates`: name -> profile -> price of the candidate's layout; `stock`: profile -> price of stock's;
    `margins`: name -> profile -> how far that profile's price of the change could be off (`uncertainty`):
    a candidate is dearer under a profile when its price plus the margin is above stock's, so a saving a
    profile cannot resolve is not taken on its word. Ties on the worst ratio go to the smaller sum of
    ratios, then to the earlier candidate.

    >>> choose({"a": {"p": 90.0, "q": 99.0}, "b": {"p": 50.0, "q": 120.0}}, {"p": 99.0, "q": 99.0}).chosen
    'a'
    >>> choose({"b": {"p": 50.0, "q": 120.0}}, {"p": 99.0, "q": 99.0}).chosen is None
    True
    >>> choose({"a": {"p": 90.0, "q": 99.0}}, {"p": 99.0, "q": 99.0}, {"a": {"p": 12.0}}).unresolved
    {'a': ('p', 9.0, 12.0)}
    """
    profiles = list(stock)
    best: tuple[float, float] | None = None
    chosen = None
    tried = {}
    unresolved = {}
    for name, prices in candidates.items():
        missing = [p for p in profiles if p not in prices]
        if missing:
            raise ProblemError(f"candidate {name!r} has no price under profile(s) {missing}")
        ratios = {p: ratio(prices[p], stock[p]) for p in profiles}
        tried[name] = ratios
        margin = (margins or {}).get(name, {})
        dearer = any(prices[p] > stock[p] + NOISE_US for p in profiles)
        cheaper = any(prices[p] < stock[p] - NOISE_US for p in profiles)
        if dearer or not cheaper:
            continue
        blurred = [p for p in profiles if prices[p] + margin.get(p, 0.0) > stock[p] + NOISE_US]
        if blurred:
            unresolved[name] = (blurred[0], stock[blurred[0]] - prices[blurred[0]], margin[blurred[0]])
            continue
        key = (max(ratios.values()), sum(ratios.values()))
        if best is None or key < best:
            best, chosen = key, name
    return Choice(chosen, tried.get(chosen, {}), tried, unresolved)


# How far a problem's objective of a layout may sit above the price of that layout written into the graph (its
# prices are rounded): over 86 candidates of the Vulkan zoo and outside set under two profiles, at most 0.04%
# (0.01 us) above; the written side is the dearer by up to 2.4% (what the write-back adds).
PRICE_AGREEMENT = 0.005


def dearer_than_stock(objectives: dict[str, float], stock: dict[str, float]) -> str | None:
    """The profile that prices a layout dearer than stock's whatever its written price, from `objectives` (profile ->
    the objective of the layout in the problem built under that profile; profiles not solved for may be left out):
    a written layout is priced at least its objective / (1 + PRICE_AGREEMENT). None when no objective shows it.
    Such a candidate is one `choose` refuses, so it need not be written and priced to be refused.

    >>> dearer_than_stock({"p": 101.0, "q": 50.0}, {"p": 99.0, "q": 99.0}), dearer_than_stock({"p": 99.5}, {"p": 99.0})
    ('p', None)
    """
    for profile, objective in objectives.items():
        if objective / (1.0 + PRICE_AGREEMENT) > stock[profile] + NOISE_US:
            return profile
    return None


def own_optimum_ruled_out(combined_bound: float, n_profiles: int, first_ratio: float) -> bool:
    """Whether one profile's own optimum cannot be a candidate `choose` takes, so it need not be solved: from the
    proven lower bound of the `weighted_sum` problem (weights 1 / (stock's price + NOISE_US), one per profile) and
    `first_ratio`, that problem's optimum's ratio to stock's price under the profile.

    A candidate `choose` takes is priced at most stock's + NOISE_US by every profile: a weighted price of at most 1
    each. The profile's own optimum costs it no more than the first candidate does, so its weighted sum is at most
    n - 1 + min(first_ratio, 1); no layout's is below the bound. With first_ratio >= 1 this rules every layout
    out: a DeiT delegate whose layer norms stock writes to width-packed textures (a label the solver's runtime rule
    refuses at its shapes) has no layout as cheap as stock's under either profile: its bound was 2.36 of 2.

    >>> own_optimum_ruled_out(2.36, 2, 1.38), own_optimum_ruled_out(1.998, 2, 0.999)
    (True, False)
    >>> own_optimum_ruled_out(2.0, 2, 0.88), own_optimum_ruled_out(2.0, 2, 1.14)  # pvt_v2: one solve saved
    (True, False)
    """
    return combined_bound > (1.0 + PRICE_AGREEMENT) * (n_profiles - 1 + min(first_ratio, 1.0))


def weighted_sum(
    problems: list[Problem], weights: list[float], name: str | None = None, prices: list[Prices] | None = None
) -> Problem:
    """One problem whose every mode and transition costs the `weights`-weighted sum of its prices in
    `problems` (one problem built under several profiles): `weighted_prices`, as a Problem of its own."""
    return problems[0].priced(weighted_prices(problems, weights, prices), name)


def weighted_prices(problems: list[Problem], weights: list[float], prices: list[Prices] | None = None) -> Prices:
    """Prices for the first of `problems` (one problem built under several profiles) whose every mode and
    transition costs the `weights`-weighted sum of its prices in `problems`. A transition one problem does not
    list is priced as that problem prices an unlisted pair (size_bytes * default_cost_per_byte).

    `prices`, if given: each problem's prices (`Problem.checked_prices`), read as they stand instead of from the
    problems' objects (`Problem.own_prices`; thousands of transitions per Vulkan delegate).

    Raises ProblemError if the problems differ in anything but costs (see `same_structure`).
    """
    if not problems or len(problems) != len(weights):
        raise ProblemError(f"{len(problems)} problems and {len(weights)} weights: one weight per problem")
    first = problems[0]
    for k, other in enumerate(problems[1:], start=1):
        if not same_structure(first, other):
            raise ProblemError(f"problem {k} ({other.name!r}) differs from {first.name!r} in more than its costs")
    if prices is None:
        prices = [p.own_prices() for p in problems]
    if len(prices) != len(problems):
        raise ProblemError(f"{len(prices)} prices for {len(problems)} problems: one per problem")
    for problem, priced in zip(problems, prices):
        problem.check_priced_by(priced)
    sizes = {v.id: v.size_bytes for v in first.values}
    tables = [p.transition_costs for p in prices]
    pairs = list(dict.fromkeys(key for table in tables for key in table))
    # Every mode's and every pair's prices as one array per problem (the problems' modes in one order: the same
    # structure), summed as weighted in numpy: the same floats, added in the same order, as a sum in Python
    # (0 + w0 * c0 + w1 * c1 ...; prices are never negative), at a fraction of its time (a MobileViT delegate's 4,217
    # modes and 9,640 pairs under two profiles: 21 ms in Python).
    mode_prices = [np.fromiter(itertools.chain.from_iterable(p.mode_costs), dtype=float) for p in prices]
    n_modes = sum(len(op.modes) for op in first.ops)
    if any(len(p) != n_modes for p in mode_prices):  # `prices` not the problems' own (their modes since changed)
        raise ProblemError(f"mode prices for {[len(p) for p in mode_prices]} modes; the problems have {n_modes}")
    # A pair one problem does not list costs what that problem prices an unlisted pair at. Problems priced from one
    # build list the same pairs in the same order: their prices are read as they stand.
    pair_prices = [
        np.fromiter(table.values(), dtype=float, count=len(pairs))
        if len(table) == len(pairs) and list(table) == pairs
        else np.array([table.get(key, sizes[key[0]] * p.default_cost_per_byte) for key in pairs], dtype=float)
        for table, p in zip(tables, prices)
    ]
    summed = iter(np.minimum(_weighted(mode_prices, weights), MAX_COST).tolist())
    mode_costs = [list(itertools.islice(summed, len(op.modes))) for op in first.ops]
    transition_costs = dict(zip(pairs, np.minimum(_weighted(pair_prices, weights), MAX_COST).tolist()))
    default = min(sum(w * p.default_cost_per_byte for w, p in zip(weights, prices)), MAX_COST)
    return first.checked_prices(mode_costs, transition_costs, default, like=prices[0])


def _weighted(prices: list[np.ndarray], weights: list[float]) -> np.ndarray:
    """sum(w * p for w, p in zip(weights, prices)), element by element, added in that order."""
    total = weights[0] * prices[0]
    for w, p in zip(weights[1:], prices[1:]):
        total = total + w * p
    return total
