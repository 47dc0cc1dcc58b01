"""layout-solver: tensor memory layouts for on-device ML as one global optimization.

The core (`layout_solver.core`: problem model, solvers) imports neither torch nor executorch; the glue every
backend's lowering shares is `layout_solver.lowering`.
"""

from importlib import metadata

from layout_solver import _moved
from layout_solver.core.problem import (
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
from layout_solver.core.solve import solve

_moved.install()  # the old import paths of the modules that moved into core/ and lowering/

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
