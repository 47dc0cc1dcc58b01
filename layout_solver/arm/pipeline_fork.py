"""A verified delegate's Arm pipeline run both ways with the passes the two sides share run once.

The hooks' pass manager (`hooks.views_only_propagation`) calls `capture` on the stage's side and `resume` on
stock's; verification (`verify.preprocess_verified`) opens the fork around the two lowerings. Its own module so
neither of those imports the other for it.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import os
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NoReturn


class PipelineFork:
    """One delegate's Arm pipeline run both ways (verify="vela") with the passes the two sides share run once.

    Every pass before the first one the stage changes (`STAGE_PASS` marks it: the views-only propagation, or the
    solver pass itself with replace_stock=False) is the same on both sides, and they are most of the pipeline's
    passes. The stage's side runs first and copies the program as it stands where the sides part; stock's side
    then lowers that copy from there on. Only the outermost graph forks: control flow is declined whole.

    With `in_child`, stock's side runs at the same time as the stage's, on another core: where the sides part
    the process forks (os.fork), and the child raises `StockSideInChild` to unwind to the caller of the stage's
    side, which then lowers stock's side there and hands back its TOSA (`serve_stock_side`); the parent goes on
    with the stage's side and collects it (`stock_from_child`). A child that fails, or a process that cannot fork
    safely (other threads at work), leaves stock's side to the parent, as without `in_child`."""

    def __init__(self, in_child: bool = False):
        self.program = None  # the copy, once the stage's side has reached the fork
        self.shared: list[type] = []  # the shared passes, as the stage's side ran them
        self.in_child = in_child
        self.child: int | None = None  # the pid of the child lowering stock's side
        self.answer = None  # the file the child writes stock's TOSA to
        self.is_child = False  # True in the child: it must never leave `forked` but through os._exit

    def fork_stock_side(self) -> None:
        """At the fork: start stock's side in a child process. Only where no other thread does work the child
        could need (the joint lowering's threads): daemon helpers (tqdm's monitor, a solver's watcher) are left
        behind, as the child neither waits for them nor takes their locks."""
        others = [t for t in threading.enumerate() if t is not threading.current_thread()]
        if not self.in_child or not hasattr(os, "fork") or not all(t.daemon for t in others):
            return
        descriptor, self.answer = tempfile.mkstemp(prefix="layout-solver-stock-side-")
        os.close(descriptor)
        sys.stdout.flush(), sys.stderr.flush()  # nothing buffered is written twice
        pid = os.fork()
        if pid == 0:
            self.is_child = True
            raise StockSideInChild
        self.child = pid

    def serve_stock_side(self, lower: Callable[[], bytes]) -> NoReturn:
        """In the child: write `lower()` (stock's TOSA) to the answer file and exit, never returning."""
        code = 1
        try:
            Path(self.answer).write_bytes(lower())
            code = 0
        finally:
            os._exit(code)

    def stock_from_child(self, timeout: float = 1800.0) -> bytes | None:
        """In the parent: stock's TOSA from the child, or None (no child, or it failed or ran past `timeout`)."""
        if self.child is None:
            return None
        pid, self.child = self.child, None
        deadline = time.monotonic() + timeout
        while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
            time.sleep(0.02)
        if done[0] == 0:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        answer = Path(self.answer)
        tosa = answer.read_bytes() if done[0] and os.waitstatus_to_exitcode(done[1]) == 0 else None
        answer.unlink(missing_ok=True)
        return tosa

    def close(self) -> None:
        """Stop and reap a child nobody collected (the stage's side raised)."""
        if self.child is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.child, signal.SIGKILL)
            os.waitpid(self.child, 0)
            self.child = None
        if self.answer is not None:
            Path(self.answer).unlink(missing_ok=True)

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
        self.fork.fork_stock_side()
        return PassResult(graph_module, False)


class StockSideInChild(BaseException):  # not an error: a way out of the stage's side, in the child
    """Raised in the child process at the fork (`PipelineFork.fork_stock_side`): it unwinds the stage's side, which
    the parent carries on, to where stock's side is lowered. A BaseException, so no `except Exception` stops it."""


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
        if fork.is_child:  # the child got out some other way than serve_stock_side: it must not go on lowering
            os._exit(1)
        fork.close()
