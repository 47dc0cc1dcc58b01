"""A verified delegate's Arm pipeline run both ways with the passes the two sides share run once.

The hooks' pass manager (`hooks.views_only_propagation`) calls `capture` on the stage's side and `resume` on
stock's; verification (`verify.preprocess_verified`) opens the fork around the two lowerings. Its own module so
neither of those imports the other for it.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
from collections.abc import Iterator


class PipelineFork:
    """One delegate's Arm pipeline run both ways (verify="vela") with the passes the two sides share run once.

    Every pass before the first one the stage changes (`STAGE_PASS` marks it: the views-only propagation, or the
    solver pass itself with replace_stock=False) is the same on both sides, and they are most of the pipeline's
    passes. The stage's side runs first and copies the program as it stands where the sides part; stock's side
    then lowers that copy from there on. Only the outermost graph forks: control flow is declined whole."""

    def __init__(self):
        self.program = None  # the copy, once the stage's side has reached the fork
        self.shared: list[type] = []  # the shared passes, as the stage's side ran them

    def capture(self, passes: list) -> None:
        """The stage's side: a pass that copies the program goes in before the first pass the stage changes."""
        at = next((i for i, p in enumerate(passes) if getattr(p, STAGE_PASS, False)), None)
        if at is None:
            raise RuntimeError("the Arm pipeline has no pass of the layout-solver stage: nowhere to fork it")
        self.shared = [type(p) for p in passes[:at]]
        passes.insert(at, _CopyProgram(self))

    def resume(self, passes: list) -> None:
        """Stock's side: drop the shared passes (the copy has been through them), checking they are the same."""
        if self.program is None:
            raise RuntimeError("stock's side of a verified delegate started before the stage's side forked")
        at = len(self.shared)
        if [type(p) for p in passes[:at]] != self.shared:
            raise RuntimeError("the Arm pipeline's passes differ before the fork between stock's side and the stage's")
        del passes[:at]


# The attribute that marks a pass whose work depends on `stage_on()`: the pipeline forks before the first.
STAGE_PASS = "layout_solver_stage_pass"


class _CopyProgram:
    """A graph pass (changing nothing) that leaves a copy of the program it sees in `fork.program`; executorch's
    adapter sets `exported_program` to the pass manager's working program for the call."""

    def __init__(self, fork: PipelineFork):
        self.fork = fork
        self.exported_program = None

    def __call__(self, graph_module):
        from torch.fx.passes.infra.pass_base import PassResult

        self.fork.program = copy.deepcopy(self.exported_program)
        return PassResult(graph_module, False)


_active: contextvars.ContextVar[PipelineFork | None] = contextvars.ContextVar(
    "layout_solver_pipeline_fork", default=None
)


def active_fork() -> PipelineFork | None:
    """The fork the outermost Arm pipeline goes through now (None outside `forked`)."""
    return _active.get()


@contextlib.contextmanager
def forked(fork: PipelineFork) -> Iterator[PipelineFork]:
    """Within this block the outermost Arm pipeline forks through `fork` (captured with the stage on, resumed
    with it off)."""
    token = _active.set(fork)
    try:
        yield fork
    finally:
        _active.reset(token)
