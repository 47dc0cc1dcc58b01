"""Differential testing of the Arm layout stage on generated graphs: each graph is quantized once, lowered stock and
with the stage, compiled by Vela and run on the TOSA reference model (`compare_ethos_u`), and the comparison is
held to what the stage promises:

- the solver side never fails where stock lowers;
- both programs give identical int8 outputs (reference model on random inputs; on the example inputs where the
  reference model refuses random ones);
- Vela's total cycles of the solver's program are <= stock's (0.1% tolerance).

A graph stock itself cannot lower is recorded as such and not held against the stage.
"""

from __future__ import annotations

from layout_solver.targets import DEFAULT_ETHOS_U
from layout_solver.targets.ethos_u import compare_ethos_u
from layout_solver.zoo import generated

CYCLE_TOLERANCE = 0.001  # relative
# What a record can say about the stage (violations first).
# "crashed": the job killed its worker process, so neither side can be cleared
VIOLATIONS = ("crashed", "solver_failed", "not_equivalent", "dearer")


def run_case(spec: generated.GraphSpec, target: str = DEFAULT_ETHOS_U, verify: str = "vela") -> dict:
    """One generated graph, stock against the stage on `target`: the comparison's figures and its verdicts."""
    module, inputs = generated.build_module(spec)
    result = compare_ethos_u(module, inputs, name=f"generated:{spec.seed}", target=target, verify=verify)
    return record(result.to_json())


def record(comparison: dict) -> dict:
    """The figures of one comparison (`Comparison.to_json()`, as `zoo` stores it) that the checks read, and
    its verdicts."""
    stock, solver = comparison.get("stock") or {}, comparison.get("solver") or {}
    equivalent = comparison.get("equivalent")
    if equivalent is None:
        equivalent = comparison.get("equivalent_on_example_inputs")
    found = {
        "model": comparison.get("model"),
        "target": comparison.get("target"),
        "crashed": comparison.get("status") == "crashed",
        # a job the harness itself could not run (the model would not build): recorded as stock's failure too
        "stock_error": stock.get("error") or comparison.get("error"),
        "solver_error": solver.get("error") or comparison.get("error"),
        # what the error wraps (executorch's pass manager names only the passes before the one that failed)
        "stock_cause": stock.get("cause") or comparison.get("cause"),
        "solver_cause": solver.get("cause") or comparison.get("cause"),
        "stock_cycles": stock.get("vela_total_cycles"),
        "solver_cycles": solver.get("vela_total_cycles"),
        "stock_transposes": stock.get("tosa_transposes"),
        "solver_transposes": solver.get("tosa_transposes"),
        "stock_transpose_cycles": stock.get("vela_transpose_cycles"),
        "solver_transpose_cycles": solver.get("vela_transpose_cycles"),
        # the stage's own layout before keep-the-cheaper, as Vela priced it, and the stage's prediction of it
        "stage_layout_cycles": solver.get("verified_solver_cycles"),
        "predicted_cycles": solver.get("predicted_total_cycles"),
        "delegates_kept_stock": solver.get("delegates_kept_stock"),
        "equivalent": equivalent,
        "equivalence_checked_on": "random inputs" if comparison.get("equivalent") is not None else "example inputs",
        "max_abs_diff": comparison.get("max_abs_diff"),
    }
    found["verdicts"] = verdicts(found)
    return found


def verdicts(record: dict) -> list[str]:
    """What the record says about the stage: any of VIOLATIONS, or "stock_failed" (not counted), "unchecked"
    (neither random nor example inputs could compare the two), "ok"."""
    if record.get("crashed"):
        return ["crashed"]
    if record["stock_error"]:
        return ["stock_failed"]
    if record["solver_error"]:
        return ["solver_failed"]
    found = []
    if record["equivalent"] is False:
        found.append("not_equivalent")
    if record["stock_cycles"] and dearer(record["solver_cycles"], record["stock_cycles"]):
        found.append("dearer")
    if not found and record["equivalent"] is None:
        found.append("unchecked")
    return found or ["ok"]


def dearer(cycles: int, stock_cycles: int) -> bool:
    """More than CYCLE_TOLERANCE above stock's."""
    return cycles - stock_cycles > stock_cycles * CYCLE_TOLERANCE


def violations(record: dict) -> list[str]:
    """The record's verdicts that break a promise of the stage (VIOLATIONS)."""
    return [v for v in record["verdicts"] if v in VIOLATIONS]


def shrink_failure(spec: generated.GraphSpec, record: dict, target: str, verify: str = "vela", progress=None):
    """The smallest spec (generated.shrink) on which the record's first violation still shows; with its record."""
    wanted = violations(record)[0]
    last = {}

    def still_fails(candidate):
        try:
            candidate_record = run_case(candidate, target, verify)
        except Exception:  # noqa: BLE001 - a candidate the harness cannot even build is not the failure
            return False
        if wanted in violations(candidate_record):
            last[candidate] = candidate_record
            return True
        return False

    smallest = generated.shrink(spec, still_fails, progress)
    return smallest, last.get(smallest, record)
