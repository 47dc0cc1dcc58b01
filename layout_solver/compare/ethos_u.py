"""Ethos-U: stock versus the solver's layout stage on one module, both lowered from one int8 program: TOSA
transposes, Vela cycles, and equivalence on the TOSA reference model."""

from __future__ import annotations

import contextlib
import copy
import io
import tempfile
import traceback
from collections import Counter
from pathlib import Path

from layout_solver.arm.equivalence import compare_lowerings, same_outputs, versus_quantized_eager
from layout_solver.arm.hooks import solver_layouts
from layout_solver.arm.measure import lower_ethos_u, quantize_for
from layout_solver.compare.result import Comparison, Side, error_record
from layout_solver.quiet import quiet
from layout_solver.solve import DEFAULT_TIME_LIMIT

INPUT_ORDERS = ("nchw", "nhwc")


def declare_input_order(inputs: tuple, order: str) -> tuple:
    """The example inputs with the application's graph-input contract: "nchw" (the default: the delegate
    reads the logical order) or "nhwc" (4-D inputs arrive channels-last). ExecuTorch carries the
    contract as the inputs' dim order (its NormalizeDelegateIOLayoutPass makes the delegate read the
    physical order), so stock and solver lower under the same contract."""
    import torch

    if order not in INPUT_ORDERS:
        raise ValueError(f"unknown input order {order!r}; expected one of {INPUT_ORDERS}")
    if order == "nchw":
        return inputs
    return tuple(
        t.to(memory_format=torch.channels_last) if isinstance(t, torch.Tensor) and t.dim() == 4 else t for t in inputs
    )


def compare_ethos_u(
    module,
    inputs: tuple,
    name: str | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    target: str = "ethos-u55-128",
    service: str | None = None,
    input_order: str = "nchw",
    verify: str = "vela",
) -> Comparison:
    """Stock versus solver lowering of `module` on `inputs` for `target`: TOSA transposes, Vela cycles,
    equivalence of the two on the TOSA reference model, and each against the quantized eager model;
    `input_order` is the graph-input contract (see declare_input_order); `verify` is the solver side's
    (solver_layouts: "vela" keeps stock's delegate where Vela finds the stage's dearer, "model" shows the
    stage's own layout). `name` labels the result (default: the module's class). A side that fails is
    recorded with its error; the other side's numbers stay."""
    with quiet():
        result = _compare_ethos_u(module, inputs, time_limit, target, service, input_order, verify)
    return Comparison(
        model=name or type(module).__name__,
        target=target,
        input_order=input_order,
        **{k: Side(**v) if k in ("stock", "solver") else v for k, v in result.items()},
    )


def _compare_ethos_u(module, inputs, time_limit, target, service, input_order, verify) -> dict:
    inputs = declare_input_order(inputs, input_order)
    result: dict = {}
    # Quantize once: both sides lower the same int8 program, so any difference is the layout stage's.
    try:
        quantized = quantize_for(module, inputs, target)
    except Exception as exc:  # noqa: BLE001 - recorded, not fatal
        error = {
            "error": f"quantization failed: {type(exc).__name__}: {exc}".splitlines()[0][:500],
            "traceback": traceback.format_exc(limit=4),
        }
        return {**result, "stock": error, "solver": dict(error), "equivalent": False, "max_abs_diff": None}
    eager_outputs = quantized.module()(*inputs)  # what both programs are held to
    with tempfile.TemporaryDirectory() as tmp:
        lowerings, eager_checks = {}, {}
        for side in ("stock", "solver"):
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # Vela prints its summaries
                    if side == "stock":
                        lowerings[side] = lower_ethos_u(
                            module, inputs, target, keep_tosa=Path(tmp) / side, quantized=copy.deepcopy(quantized)
                        )
                        reports = []
                    else:
                        with solver_layouts(time_limit, service=service, verify=verify) as reports:
                            lowerings[side] = lower_ethos_u(
                                module, inputs, target, keep_tosa=Path(tmp) / side, quantized=copy.deepcopy(quantized)
                            )
            except Exception as exc:  # noqa: BLE001 - recorded, not fatal
                result[side] = error_record(exc)
                continue
            metrics = lowerings[side].metrics()
            # Each program on its own against the quantized eager model, so a side the other cannot be
            # compared with (the reference model rejected it) is still checked.
            eager = eager_checks[side] = versus_quantized_eager(
                quantized, lowerings[side].program, lowerings[side].tosa_files, inputs, eager_outputs
            )
            metrics.update(
                eager_check=eager.status,
                max_abs_diff_vs_eager=eager.max_abs_diff,
                eager_quant_steps=eager.max_quant_steps,
                eager_within_tolerance=eager.within_tolerance,
            )
            if side == "solver":
                metrics.update(solver_metrics(reports))
            result[side] = metrics
        if len(lowerings) == 2:
            same = compare_lowerings(lowerings["stock"].tosa_files, lowerings["solver"].tosa_files)
            result["equivalent"], result["max_abs_diff"] = same.equivalent, same.max_abs_diff
            # None: not checked, because the reference model rejected a side (its Vela numbers stay)
            result["stock_reference"], result["solver_reference"] = same.reference["left"], same.reference["right"]
            if same.notes:
                result["equivalence_notes"] = same.notes
            if same.equivalent is None:
                # The reference model refused the random inputs; if both programs ran on the example inputs
                # (their eager checks), their outputs there, bit for bit.
                exact, diff = same_outputs(eager_checks["stock"], eager_checks["solver"])
                if exact is not None:
                    result["equivalent_on_example_inputs"], result["max_abs_diff_on_example_inputs"] = exact, diff
        else:
            result["equivalent"], result["max_abs_diff"] = False, None
    return result


def solver_metrics(reports: list) -> dict:
    """The solver side's figures from its pass reports: timings, objective (the predicted NPU cycles of the
    delegates the stage laid out), bound and gap, what priced them, and how verification went: each delegate's
    Vela totals both ways and how many kept stock's layout."""
    solved = [r for r in reports if r.objective is not None]
    checked = [r.vela_check for r in reports if r.vela_check]
    metrics = {
        "solve_seconds": round(sum(r.solve_seconds for r in solved), 4),
        "pass_seconds": round(sum(r.pass_seconds for r in solved), 4),
        "objective": round(sum(r.objective for r in solved), 1),
        "bound": round(sum(r.bound for r in solved), 1),
        "gap": max((r.gap for r in solved), default=0.0),
        "pinned_unknown": [p for r in solved for p in r.pinned_unknown],
        "problem_ops": sum(r.problem_ops for r in solved),
        "solver_notes": [n for r in reports for n in r.notes],
        "modes_chosen": dict(sum((r.modes_chosen for r in solved), Counter())),
        "pricing": ", ".join(sorted({r.pricing for r in solved if r.pricing})),
        "unpriced": [u for r in solved for u in r.unpriced],
    }
    if solved and all(r.pricing.startswith("vela") for r in solved):
        metrics["predicted_total_cycles"] = metrics["objective"]
        metrics["predicted_cycles_by_op"] = dict(sum((r.predicted_by_op for r in solved), Counter()).most_common())
    if checked and len(checked) == len(reports):
        metrics.update(
            verified_stock_cycles=sum(c["stock_cycles"] for c in checked),
            verified_solver_cycles=sum(c["solver_cycles"] for c in checked),
            delegates_kept_stock=sum(c["kept"] == "stock" for c in checked),
            verification_cached=all(c["cached"] for c in checked),
        )
    return metrics
