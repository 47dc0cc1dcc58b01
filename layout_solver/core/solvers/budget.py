"""A solve's work budget: what the search engines may spend, counted in units the engines count themselves, so the
same problem gets the same answer on any machine under any load. The wall-clock deadline stays, as a safety net
that says so when it fires (solve.py).

A unit is CP-SAT's deterministic time unit (about a second of one core's search), SCIP's branch-and-bound nodes
at NODES_PER_UNIT plus its model's nonzeros at MODEL_NONZEROS_PER_UNIT, HiGHS's simplex iterations at
ITERATIONS_PER_UNIT, local-search move evaluations at EVALUATIONS_PER_UNIT, and a large-neighbourhood window
at WINDOW_UNITS plus what its search spent. The exact solvers (enumeration, min-cut, elimination) are bounded by
their own size limits, not by time, and spend none.
"""

from __future__ import annotations

from dataclasses import dataclass

# SCIP nodes per unit: layout problems mostly close at the root LP, so the node limit binds only on the hard
# pieces, where a unit's worth keeps a 10 s wall limit out of reach on this project's 2-core machine.
NODES_PER_UNIT = 2000
# HiGHS dual simplex iterations per unit (the LP relaxation, relaxation.py): about a second of one core's pivoting
# on pieces of 10,000-60,000 variables here (10,000-25,000 iterations a second).
ITERATIONS_PER_UNIT = 20000
# Nonzeros of the constraint matrix multiplied per unit by PDLP (the first-order LP method for the largest
# relaxations; it counts its passes over the matrix): about a second of one core here.
NONZEROS_PER_UNIT = 6e7
# Constraint-matrix nonzeros of a MIP model per unit: building it in Python and SCIP's root LP, which its node
# count does not see (about a second of one core here: a MobileViT delegate's block DP solved 410 small MIPs,
# 1.7M nonzeros in all, in 34 s, and was charged 0.2 units for them by its nodes, so its 30 s wall-clock safety
# net fired before a 7.5-unit budget and the answer depended on the machine's speed).
MODEL_NONZEROS_PER_UNIT = 50000
# Single-variable move evaluations (a factor looked up for one option of one variable) per unit, for the local
# search's sweeps (greedy.improve): about a second of one core here (336,000 per sweep of a 62,800-variable piece,
# 8 sweeps in 3.8 s).
EVALUATIONS_PER_UNIT = 700_000
# The share of what is left a first-order relaxation may spend when its point is rounded by local search after
# it: the sweeps get the rest instead of the clock deciding where they stop.
RELAXATION_SHARE = 0.75
# What one large-neighbourhood window costs whatever its search spends (its model building and LP), so a sweep
# of windows that each close at the root still ends.
WINDOW_UNITS = 0.05
# The budget a solve gets per second of its wall-clock limit (the safety net): a quarter, so a machine four
# times slower than this one, or as loaded, still ends on the budget and not on the clock.
UNITS_PER_SECOND = 0.25


@dataclass
class WorkBudget:
    """Units a solve may spend and what it spent."""

    units: float
    spent: float = 0.0

    @property
    def left(self) -> float:
        """Units not yet spent (never negative)."""
        return max(self.units - self.spent, 0.0)

    def spend(self, units: float) -> None:
        """Charge `units` (an engine's own count of its work)."""
        self.spent += max(units, 0.0)

    def affords_model(self, nonzeros: int) -> bool:
        """Whether what is left covers building a MIP or CP-SAT model of `nonzeros` (MODEL_NONZEROS_PER_UNIT),
        which their own counts of work miss."""
        return nonzeros / MODEL_NONZEROS_PER_UNIT <= self.left

    def nodes(self) -> int:
        """The SCIP node limit of what is left (at least one node: the root)."""
        return max(1, int(self.left * NODES_PER_UNIT))
