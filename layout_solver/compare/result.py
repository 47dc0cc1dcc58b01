"""The typed results of a comparison: what each side of a lowering measured, and what the comparison found.

One schema for both targets and for multi-method programs, so the CLI, the zoo and the benchmarks read the
same fields. A field is present only when the comparison measured it (`to_json()` leaves unset fields
out), and None where it was measured and has no value: `equivalent=None` means "not checked", with the reason
in `equivalence_notes` (the reference model rejected a side, or a side has no program to compare).
"""

from __future__ import annotations

import traceback

from pydantic import BaseModel, ConfigDict

Number = float | int


def error_record(exc: BaseException, limit: int | None = 4) -> dict:
    """The fields of a side that failed with `exc`: its first line (at most 500 characters), the innermost
    exception it was raised from (executorch's pass manager wraps every pass's error in one naming only the
    passes that ran before) and the traceback."""
    root, seen = exc, {id(exc)}
    while (inner := root.__cause__ or root.__context__) is not None and id(inner) not in seen:
        root = inner
        seen.add(id(inner))
    record = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500]}
    if root is not exc:
        record["cause"] = f"{type(root).__name__}: {root}".splitlines()[0][:500] if str(root) else type(root).__name__
    record["traceback"] = "".join(traceback.format_exception(exc, limit=limit))
    return record


def not_compared(reason: str) -> dict:
    """The equivalence fields of a comparison that has no pair of programs to compare (a side failed before
    its program existed): not checked, with the reason, never "not equivalent"."""
    return {"equivalent": None, "max_abs_diff": None, "equivalence_notes": [reason]}


def not_lowered(lowered) -> dict:
    """`not_compared` for a comparison where only the sides in `lowered` have a program."""
    return not_compared(f"{' and '.join(sorted({'stock', 'solver'} - set(lowered)))} did not lower")


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid")

    def to_json(self) -> dict:
        """The JSON-ready dict of the fields that were set (what `compare --json` prints)."""
        return self.model_dump(mode="json", exclude_unset=True)


class Side(_Record):
    """One side (stock or solver) of a single-method comparison."""

    # a side that failed: its error (first line) and traceback; nothing else is set
    error: str | None = None
    cause: str | None = None  # the innermost exception the error was raised from, where it wraps one
    traceback: str | None = None
    lower_seconds: float | None = None
    # Ethos-U: TOSA transposes, Vela's per-layer figures for the NPU, what stayed on the CPU
    tosa_transposes: int | None = None
    vela_transpose_rows: int | None = None
    vela_transpose_cycles: int | None = None
    vela_total_cycles: int | None = None
    npu_ops: int | None = None
    cpu_ops: int | None = None
    predicted_transpose_cycles: float | None = None
    # the same split by cause: graph_input / graph_output contract, matmul_operand / reduction_axis (Vela's
    # own), inside (the layout)
    transpose_cycles_by_cause: dict[str, float] | None = None
    pinned_unknown: list[str] | None = None
    # Vulkan: transitions (clones), representations, the profile's price of the tagged graph
    transitions: int | None = None
    transition_cost: float | None = None
    tensors_by_repr: dict[str, int] | None = None
    delegates: int | None = None
    modelled_us: float | None = None
    modelled_us_by_profile: dict[str, float] | None = None  # the default objective: every profile's price
    transition_list: list[dict] | None = None
    fallbacks: list[str] | None = None
    phase_seconds: dict[str, float] | None = None
    # Vulkan with execute: the device run
    executed: bool | None = None
    run_ms: float | None = None
    # Vulkan: against the eager module; Ethos-U: against the quantized eager module, delegates on the TOSA
    # reference model (eager_check "ok" or why it could not run; within executorch's INT test tolerance?)
    max_abs_diff_vs_eager: float | None = None
    eager_check: str | None = None
    eager_quant_steps: float | None = None
    eager_within_tolerance: bool | None = None
    execute_error: str | None = None
    # the solver side: its answer and timings
    pass_seconds: float | None = None
    solve_seconds: float | None = None
    objective: float | None = None
    bound: float | None = None
    gap: float | None = None
    problem_ops: int | None = None
    solver_notes: list[str] | None = None
    # Ethos-U: what priced the stage ("vela ethos-u85-256"), the ops it could not write, the predicted NPU
    # cycles of the solver's layout; verification: Vela's totals of the solver's and stock's layouts of every
    # delegate, how many kept stock's, and whether the decisions came from the cache (no second lowering)
    pricing: str | None = None
    unpriced: list[str] | None = None
    predicted_total_cycles: float | None = None
    # Ethos-U: Vela's NPU cycles by source operator ("Conv2D", "Rescale", "Transpose", ...), and the stage's
    # prediction split the same way
    vela_cycles_by_op: dict[str, int] | None = None
    predicted_cycles_by_op: dict[str, float] | None = None
    verified_stock_cycles: int | None = None
    verified_solver_cycles: int | None = None
    delegates_kept_stock: int | None = None
    verification_cached: bool | None = None
    # XNNPACK: each thread count's median run time, ETDump's layout-conversion time (XNNPACK transposes) and its
    # share of the run, and the profile's prediction of it; the program's digest
    run_ms_by_threads: dict[str, float] | None = None
    conversion_ms_by_threads: dict[str, float] | None = None
    conversion_share: float | None = None
    predicted_conversion_ms: float | None = None
    conversions: int | None = None
    # XNNPACK: the profile's prediction of the whole run (ms per thread count; by part at the first, in us), and
    # the measured run time stated at the profile's speed (by the reference program timed in the same rounds)
    predicted_run_ms_by_threads: dict[str, float] | None = None
    run_ms_at_reference_by_threads: dict[str, float] | None = None
    predicted_run_us_by_part: dict[str, float] | None = None
    pte_sha256: str | None = None
    # XNNPACK verify="run": which program the lowering kept ("stock" or "solver") and both timings
    kept: str | None = None
    verify_run_ms: dict[str, float] | None = None
    # Ethos-U: ops the solver runs in an algebraic mode ("MATMUL.default (B^T A^T)^T": a transposed product)
    modes_chosen: dict[str, int] | None = None

    @property
    def failed(self) -> bool:
        """True if this side's lowering failed (`error` is set)."""
        return self.error is not None


class Comparison(_Record):
    """Stock versus solver lowering of one single-method model on one target."""

    model: str
    target: str
    input_order: str | None = None  # Ethos-U: the graph-input contract
    cost_profile: str | None = None  # Vulkan: the profile both sides are priced with ("default": every profile)
    stock: Side | None = None
    solver: Side | None = None
    # Ethos-U: the TOSA reference model's verdict on the two programs
    equivalent: bool | None = None
    max_abs_diff: float | None = None
    stock_reference: str | None = None
    solver_reference: str | None = None
    equivalence_notes: list[str] | None = None
    # when `equivalent` is None: the two programs' outputs on the example inputs (those of the eager check)
    equivalent_on_example_inputs: bool | None = None
    max_abs_diff_on_example_inputs: float | None = None
    # Vulkan with execute: solver against stock on the device
    same_program: bool | None = None  # the two programs are byte-identical (the solver kept stock's layout)
    run_ratio: float | None = None  # the solver's median run time over stock's
    run_ratio_paired: float | None = None  # the median of each round's own ratio (both sides back to back)
    # where the first timing process read the pair outside the target's tolerance: each timing process's paired
    # ratio (the first, then fresh ones); run_ratio_paired is then their median
    run_ratio_timings: list[float] | None = None
    measured_delta_us: float | None = None
    predicted_delta_us: float | None = None
    max_abs_diff_stock_vs_solver: float | None = None
    # XNNPACK: the paired ratio per thread count (the first read, or the median of fresh processes' reads where
    # it was outside the tolerance: run_ratio_timings_by_threads), outputs relative to stock's
    threads: list[int] | None = None
    run_ratio_by_threads: dict[str, float] | None = None
    run_ratio_timings_by_threads: dict[str, list[float]] | None = None
    reference_ms_by_threads: dict[str, float] | None = None  # XNNPACK: the reference program's time, this run
    # XNNPACK beyond one thread: rounds of the first paired timing left out because the machine did not give the run
    # every CPU (`targets.xnnpack.contention`); True where too few quiet rounds were found and the quietest were kept
    contended_rounds_by_threads: dict[str, int] | None = None
    contended_timing_kept_by_threads: dict[str, bool] | None = None
    # XNNPACK: the profile's reference time the run times at its speed are stated at (a re-measured profile restates them)
    profile_reference_us_by_threads: dict[str, float] | None = None
    cpu: str | None = None  # XNNPACK: the CPU model the programs were timed on (a profile predicts its own CPU)
    max_rel_diff_stock_vs_solver: float | None = None
    bit_identical: bool | None = None

    def side(self, name: str) -> Side:
        """A side by name; an empty Side if it was not lowered."""
        return getattr(self, name, None) or Side()


class MethodsSide(_Record):
    """One side (stock, per_method or joint) of a multi-method comparison: per-method rows, weighted totals,
    program bytes and, for the joint side, what the joint solve reported."""

    error: str | None = None
    cause: str | None = None
    traceback: str | None = None
    per_method: dict[str, dict[str, Number | bool | str | None]] | None = None
    weighted_total_cycles: float | None = None
    weighted_transpose_cycles: float | None = None
    weighted_modelled_us: float | None = None
    weighted_run_ms: float | None = None
    lower_seconds: float | None = None
    solve_seconds: float | None = None
    stage_seconds: float | None = None  # the stage's passes and its joint solve (Vulkan)
    pte_bytes: int | None = None
    delegate_bytes: int | None = None
    constant_bytes: int | None = None
    constant_entries: int | None = None
    pte_sha256: str | None = None
    joint_groups: int | None = None
    cache_hits: int | None = None
    linked_values: int | None = None
    merged_values: int | None = None
    joint_solve_seconds: float | None = None
    joint_notes: list[str] | None = None


class MethodsComparison(_Record):
    """Stock, per-method solver and joint solver lowerings of one multi-method model."""

    model: str
    target: str
    methods: list[str]
    weights: dict[str, float]
    stock: MethodsSide | None = None
    per_method: MethodsSide | None = None
    joint: MethodsSide | None = None
    per_method_equivalent: bool | None = None
    joint_equivalent: bool | None = None
    per_method_reference: str | None = None
    joint_reference: str | None = None
    stock_reference: str | None = None
    max_abs_diff_solver_vs_stock: float | None = None
