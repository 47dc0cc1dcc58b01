"""layout-solver: tensor memory layouts for on-device ML as one global optimization.

The core (problem model, solvers) imports neither torch nor executorch.
"""

from importlib import metadata

from layout_solver.problem import (
    InfeasibleError,
    Mode,
    Op,
    Problem,
    ProblemError,
    Solution,
    Transition,
    TransitionCost,
    Value,
)
from layout_solver.solve import solve

__all__ = [
    "InfeasibleError",
    "Mode",
    "Op",
    "Problem",
    "ProblemError",
    "Solution",
    "Transition",
    "TransitionCost",
    "Value",
    "solve",
]
try:  # one version, pyproject's, as installed
    __version__ = metadata.version("layout-solver")
except metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+source"
