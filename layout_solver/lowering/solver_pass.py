"""The one skeleton every solver pass follows, torch.fx's requires / call / ensures.

A backend's pass lists `SolverPass` before the executorch pass it stands in for (Arm's `ArmPass`, Vulkan's
`TagMemoryMetaPass`); the pass manager calls it as any pass, `requires`, then `call`, then `ensures`:

* `requires(graph_module)`: takes `snapshot(graph_module)`, what the post-condition compares with;
* `call(graph_module)`: the backend's own, which runs `solve_graph`: `build` the problem, `solve` it,
  `write_back` the answer, each phase timed with the cyclic GC paused (the lowering heap is large);
* `ensures(graph_module)`: `check(graph_module, before)`, the backend's independent post-condition on the
  written graph, which raises if the graph breaks a rule; its seconds join the run's report.

State lives on the instance for one graph at a time (`before`, `run`, `report`), not in closures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from layout_solver.core.problem import Prices, Problem, Solution
from layout_solver.core.solve import gc_paused
from layout_solver.lowering.client import solve_problem
from layout_solver.lowering.joint_lowering import in_joint_lowering, program_links, solve_partition
from layout_solver.lowering.pass_report import PassReport, stage_clock

PHASES = ("build", "solve", "write_back", "check")


@dataclass
class SolverPassRun:
    """What one graph's `solve_graph` did: the built problem, its solution, the write-back's result, seconds
    per phase."""

    built: Any
    solution: Solution
    written: Any
    phase_seconds: dict[str, float]

    @property
    def seconds(self) -> float:
        """The pass's total seconds over all phases."""
        return sum(self.phase_seconds.values())


class SolverPass:
    """Mixin for a solver pass; subclasses implement `build`, `solve`, `write_back`, and `snapshot`/`check`
    for their post-condition, and record `self.report` (a PassReport) in `call`."""

    before: Any = None  # requires' snapshot of the graph
    run: SolverPassRun | None = None  # the last graph's run; None where the pass wrote nothing of its own
    report: Any = None  # the PassReport recorded for the last graph, which `ensures` completes

    def requires(self, graph_module) -> None:
        """Forget the last graph; take the snapshot the post-condition needs."""
        super().requires(graph_module)
        self.run = self.report = None
        self.before = self.snapshot(graph_module)

    def ensures(self, graph_module) -> None:
        """The post-condition, on a graph this pass wrote (not on one it left to stock); its seconds go into
        the run's phases and the report."""
        super().ensures(graph_module)
        if self.run is None:
            return
        started = stage_clock()
        with gc_paused():
            self.check(graph_module, self.before)
        seconds = stage_clock() - started
        self.run.phase_seconds["check"] = self.run.phase_seconds.get("check", 0.0) + seconds
        if self.report is not None:  # its phase_seconds is the run's own dict (solver_report)
            self.report.pass_seconds += seconds

    def solve_graph(self, graph_module, built=None, solution=None) -> SolverPassRun:
        """Build (unless `built` is given), solve (unless `solution` is), write back; the run is kept as
        `self.run` for `ensures`. Exceptions propagate (a pass may fall back on a build error)."""
        with gc_paused():
            marks = [stage_clock()]
            built = self.build(graph_module) if built is None else built
            marks.append(stage_clock())
            solution = self.solve(built) if solution is None else solution
            marks.append(stage_clock())
            written = self.write_back(graph_module, built, solution)
            marks.append(stage_clock())
        phases = {phase: b - a for phase, a, b in zip(PHASES, marks, marks[1:])}
        self.run = SolverPassRun(built, solution, written, phases)
        return self.run

    # What a backend implements.
    def snapshot(self, graph_module) -> Any:
        """What `check` compares the written graph with (default: nothing)."""
        return None

    def build(self, graph_module) -> Any:
        """The layout problem of `graph_module` (raise to decline it)."""
        raise NotImplementedError

    def solve(self, built) -> Solution:
        """The solution the pass writes back."""
        raise NotImplementedError

    def write_back(self, graph_module, built, solution: Solution) -> Any:
        """Write `solution` into `graph_module`; what it returns is the run's `written`."""
        raise NotImplementedError

    def check(self, graph_module, before) -> None:
        """Raise if the written graph breaks a rule (default: no check)."""


def solver_report(run: SolverPassRun, pass_seconds: float | None = None, **fields) -> PassReport:
    """The PassReport of one solver pass: the solution's objective, bound, gap and notes, the phase times, the size
    of the problem it built (`run.built.problem`), and the backend's own `fields`. `pass_seconds` defaults to the
    phases' sum."""
    solution = run.solution
    seconds = run.seconds if pass_seconds is None else pass_seconds
    return PassReport(
        "solver",
        solution.objective,
        solution.bound,
        solution.gap,
        seconds,
        run.phase_seconds,
        list(solution.notes),
        len(run.built.problem.ops),
        **fields,
    )


def lowering_solver(
    time_limit: float, service: str | None, program, placeholders: Callable[[], set[str]]
) -> Callable[..., Solution]:
    """How a pass inside a lowering solves a problem (at `prices`, if given: `solve`'s): its share of a joint
    multi-method answer if one is being served (which takes the problem at those prices as a Problem of its own),
    else on its own (in-process or on the service). `placeholders()` names the problem's placeholders whose values
    may be shared across methods (linked by content or name)."""

    def solve(problem: Problem, prices: Prices | None = None) -> Solution:
        if prices is not None and in_joint_lowering():
            problem, prices = problem.priced(prices), None
        return solve_partition(
            problem,
            lambda p: solve_problem(p, time_limit, service, prices=prices),
            lambda: program_links(program, placeholders()),
        )

    return solve
