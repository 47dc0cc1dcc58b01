"""Every scoped change the XNNPACK integration makes to ExecuTorch, in one place: the name
`XNNPACKPassManager` reads its layout pass from is swapped for the solver's (or the counting stock) pass, the
permute and reshape serializers for ones that read both tensors' orders (`visitors.physical_serializers`), and
all are put back on every exit."""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Iterator
from pathlib import Path

from cost_models import xnnpack as xnn_cost
from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.lowering.pass_report import PassReport, collecting_reports
from layout_solver.xnnpack.passes import CountingChannelsLastTaggedReshapePass, SolverChannelsLastTaggedReshapePass
from layout_solver.xnnpack.visitors import physical_serializers


class ProgramReports(list):
    """The delegates' PassReports, what the program-level pass decided (`program_notes`) and its seconds
    (`program_seconds`: with the delegates' pass_seconds, the stage's own time in a lowering)."""

    def __init__(self):
        super().__init__()
        self.program_notes: list[str] = []
        self.program_seconds = 0.0


@contextlib.contextmanager
def substituted_pass(cls) -> Iterator[None]:
    """Scoped swap of the layout pass XNNPACKPassManager lists (it reads the package's name at construction)."""
    from executorch.backends.xnnpack import _passes

    original = _passes.ChannelsLastTaggedReshapePass
    _passes.ChannelsLastTaggedReshapePass = cls
    try:
        yield
    finally:
        _passes.ChannelsLastTaggedReshapePass = original


@contextlib.contextmanager
def program_layouts(
    profile, threads: int, time_limit: float, service: str | None, reports: ProgramReports
) -> Iterator[None]:
    """Scoped: `EdgeProgramManager.to_backend` first runs `ProgramLayoutPass` on each method an XnnpackPartitioner
    lowers (the delegates' boundary orders), on a copy of the manager: the caller's programs are not touched.
    What it decided goes to `reports.program_notes`, its seconds to `reports.program_seconds`."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir.program._program import EdgeProgramManager, _transform

    from layout_solver.lowering.client import solve_problem
    from layout_solver.xnnpack.program import ProgramLayoutPass

    original = EdgeProgramManager.to_backend

    def to_backend(self, partitioner):
        by_method = partitioner if isinstance(partitioner, dict) else dict.fromkeys(self._edge_programs, partitioner)
        programs = dict(self._edge_programs)
        for method, chosen in by_method.items():
            if isinstance(chosen, XnnpackPartitioner) and method in programs:
                started = time.perf_counter()
                layout = ProgramLayoutPass(
                    programs[method], chosen, lambda p: solve_problem(p, time_limit, service), profile, threads
                )
                if layout.plan() is not None:
                    programs[method] = _transform(programs[method], layout)
                reports.program_seconds += time.perf_counter() - started
                reports.program_notes.extend(f"{method}: {n}" for n in layout.notes)
        manager = copy.copy(self)
        manager._edge_programs = programs
        return original(manager, partitioner)

    EdgeProgramManager.to_backend = to_backend
    try:
        yield
    finally:
        EdgeProgramManager.to_backend = original


def _check_threads(threads: int) -> int:
    if not isinstance(threads, int) or threads < 1:
        raise ValueError(f"threads must be a positive integer, got {threads!r}")
    return threads


@contextlib.contextmanager
def solver_layouts(
    time_limit: float = DEFAULT_TIME_LIMIT,
    cost_profile: str | Path | xnn_cost.XnnpackProfile | None = None,
    threads: int = 1,
    service: str | None = None,
    program: bool = True,
) -> Iterator[list[PassReport]]:
    """Inside this block, XNNPACK lowering chooses every delegate tensor's dim order with the solver instead of
    ChannelsLastTaggedReshapePass, and (`program`) the dim orders at the delegates' boundaries: a CPU op between
    two delegates that computes the same on channels-last data may keep it so, and the delegates then write and
    read their boundary NHWC (`layout_solver.xnnpack.program`).

    `cost_profile` prices conversions: a built-in name ("ci-x86"), a file written by `layout-solver calibrate
    xnnpack` on the user's CPU, or an XnnpackProfile; `threads` is the thread count the program will run with
    (the profile's nearest measured one prices it). A delegate keeps stock's layout wherever the stage's is not
    priced cheaper (the report's kind says "stock-fallback", with the reason). `service`: a layout-solver
    service URL to solve on (default $LAYOUT_SOLVER_SERVICE, else in-process).

    Yields the list that receives one PassReport per lowered delegate; its `program_notes` say what the
    program-level pass decided for each method.
    """
    profile = xnn_cost.load_profile(cost_profile)
    pass_cls = type(
        "SolverChannelsLastTaggedReshapePass",
        (SolverChannelsLastTaggedReshapePass,),
        {"time_limit": time_limit, "profile": profile, "threads": _check_threads(threads), "service": service},
    )
    with contextlib.ExitStack() as stack:
        reports = stack.enter_context(collecting_reports(ProgramReports()))
        stack.enter_context(substituted_pass(pass_cls))
        stack.enter_context(physical_serializers())
        if program:
            stack.enter_context(program_layouts(profile, pass_cls.threads, time_limit, service, reports))
        yield reports


@contextlib.contextmanager
def stock_layouts(
    cost_profile: str | Path | xnn_cost.XnnpackProfile | None = None, threads: int = 1
) -> Iterator[list[PassReport]]:
    """Stock's pass, recording per delegate the conversions it wrote, priced by `cost_profile`."""
    pass_cls = type(
        "CountingChannelsLastTaggedReshapePass",
        (CountingChannelsLastTaggedReshapePass,),
        {"profile": xnn_cost.load_profile(cost_profile), "threads": _check_threads(threads)},
    )
    with collecting_reports() as reports, substituted_pass(pass_cls):
        yield reports
