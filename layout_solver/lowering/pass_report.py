"""What a layout pass did to one delegate, and how reports are collected: a record, which imports no solving
(how a pass solves, and the report of a solver run, are `layout_solver.lowering.solver_pass`'s).

Both backends' passes (Arm's SolverLayoutPass, Vulkan's SolverTagMemoryMetaPass and the counting stock
pass) report through `record()` into the list `collecting_reports()` yields, so a comparison reads both
sides, and both targets, the same way.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

# `method#index` of the partition being preprocessed in a multi-method lowering (set by
# `layout_solver.lowering.joint_lowering` while it preprocesses one), else "".
PARTITION: contextvars.ContextVar[str] = contextvars.ContextVar("layout_solver_partition", default="")


def current_partition() -> str:
    """`method#index` of the partition being preprocessed in a multi-method lowering (joint, or inside
    `naming_partitions`), else ""."""
    return PARTITION.get()


# Seconds the partition being preprocessed has waited for a joint solve (a one-item list, set per partition thread):
# the other partitions' preprocessing runs meanwhile, and is not this partition's pass's time.
_WAITED: contextvars.ContextVar[list[float] | None] = contextvars.ContextVar("layout_solver_waited", default=None)


def stage_clock() -> float:
    """What the stage's passes time themselves with: `time.perf_counter()` less the seconds this partition has
    waited for a joint solve."""
    waited = _WAITED.get()
    return time.perf_counter() - (waited[0] if waited else 0.0)


def count_waiting_from_here() -> None:
    """Start this partition's (this thread's context's) ledger of waiting."""
    _WAITED.set([0.0])


def waited(seconds: float) -> None:
    """Record `seconds` this partition waited for a joint solve."""
    ledger = _WAITED.get()
    if ledger is not None:
        ledger[0] += seconds


@dataclass
class PassReport:
    """One layout pass on one delegate.

    `kind`: "solver", "stock" or "stock-fallback" (the solver declined the
    graph; the notes say why). `transitions`: one record per layout change the
    pass wrote (Vulkan: value, src, dst, bytes, cost); `transitions_written`
    counts them where no record is kept (Arm: permutes inserted), and
    `ops_removed` the ops the answer made free (Arm: permutes). Objective,
    bound and gap are the solver's (None for stock and for the Vulkan default objective). `modelled_us` prices the
    tagged graph with the Vulkan profile (`modelled_us_by_op` by operator name; `modelled_us_by_profile` with
    each profile of the default objective); `tensors_by_repr` counts its tensors
    per representation. `modes_chosen` counts the ops that run in an algebraic mode (Arm: a MATMUL
    computed as its transposed product, "MATMUL.default (B^T A^T)^T"). `partition` is "method#index" in a
    multi-method lowering.
    """

    kind: str
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    pass_seconds: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    problem_ops: int = 0
    transitions: list[dict] = field(default_factory=list)
    transitions_written: int = 0
    ops_removed: int = 0
    pinned_unknown: list[str] = field(default_factory=list)
    tensors_by_repr: Counter = field(default_factory=Counter)
    modelled_us: float = 0.0
    modelled_us_by_op: Counter = field(default_factory=Counter)
    modelled_us_by_profile: dict[str, float] = field(default_factory=dict)  # Vulkan default: every profile's price
    modes_chosen: Counter = field(default_factory=Counter)
    partition: str = field(default_factory=current_partition)
    # Arm: what priced the problem ("vela ethos-u85-256", "moved-bytes"), the ops it could not write (priced 0),
    # the modelled price of stock's layout where the stage compared it, whether stock's layout was kept, and
    # with verify="vela" both sides' Vela totals ({"stock_cycles", "solver_cycles", "kept"}).
    pricing: str = ""
    unpriced: list[str] = field(default_factory=list)
    stock_cost: float | None = None
    kept_stock: bool = False
    vela_check: dict | None = None
    predicted_by_op: Counter = field(default_factory=Counter)  # the objective by operator class (Vela's names)
    # XNNPACK: what the delegate runs (cost_models.xnnpack.PredictedOp), which the run-time prediction prices.
    run_ops: list = field(default_factory=list)
    # While `explaining()`: the delegate's graph as the pass left it (`graph_io.fx.graph_snapshot`: one record per
    # op with its layout, whether it is a conversion, and its modelled price), for `layout_solver.explain`.
    graph: list[dict] | None = None

    @property
    def solve_seconds(self) -> float:
        """Seconds spent solving (0 for stock)."""
        return self.phase_seconds.get("solve", 0.0)

    @property
    def transition_cost(self) -> float:
        """The summed cost of the recorded transitions."""
        return sum(t["cost"] for t in self.transitions)


_explaining: contextvars.ContextVar[bool] = contextvars.ContextVar("layout_solver_explaining", default=False)


@contextlib.contextmanager
def explaining() -> Iterator[None]:
    """Inside the block the layout passes keep their delegate's graph in their reports (`PassReport.graph`): a
    snapshot costs a walk of the graph, paid only when someone will look at it."""
    token = _explaining.set(True)
    try:
        yield
    finally:
        _explaining.reset(token)


def is_explaining() -> bool:
    """Whether the passes should snapshot their graphs (inside `explaining()`)."""
    return _explaining.get()


_sink: contextvars.ContextVar[list | None] = contextvars.ContextVar("layout_solver_reports", default=None)


@contextlib.contextmanager
def collecting_reports(reports: list | None = None) -> Iterator[list]:
    """Every PassReport recorded inside the block is appended to `reports` (a new list if None), yielded."""
    reports = [] if reports is None else reports
    token = _sink.set(reports)
    try:
        yield reports
    finally:
        _sink.reset(token)


def record(report: PassReport) -> None:
    """Append `report` to the list being collected, if any."""
    sink = _sink.get()
    if sink is not None:
        sink.append(report)
