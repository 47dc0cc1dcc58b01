"""Stock, per-method solver and joint solver lowerings of one multi-method model, side by side.

`compare_methods(model, target)` lowers the model's methods together
(`to_edge_transform_and_lower({"prefill": ep1, "decode": ep2}, ...)`) three
ways from fresh exports of one module:

* ``stock``: the backend's own layout stage;
* ``per_method``: the solver, each partition solved on its own (the default);
* ``joint``: the solver with `method_weights`: one problem over every
  partition of every method (see `layout_solver.lowering.joint_lowering`).

Per side and per method it reports the device cost (Ethos-U: Vela cycles and
transposes per method; Vulkan: the profile's modelled cost and, with
`execute`, lavapipe run time), the weighted total over methods, the .pte
size, constant bytes and solve time; then checks the solver programs against
stock (Ethos-U: every delegate on the TOSA reference model, bit-exact) or
against eager (Vulkan: every method on the device).
"""

from __future__ import annotations

import contextlib
import copy
import hashlib
import io
import tempfile
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layout_solver.compare.result import MethodsComparison, MethodsSide, error_record
from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.lowering.quiet import quiet

SIDES = ("stock", "per_method", "joint")
# What a multi-method comparison sums over its methods (Arm's cycles or Vulkan's microseconds and run time), then the
# program's and the joint solve's figures: the rows of its tables (the CLI's and the benchmark's)
WEIGHTED_FIGURES = ("weighted_total_cycles", "weighted_transpose_cycles", "weighted_modelled_us", "weighted_run_ms")
PROGRAM_FIGURES = (
    "pte_bytes",
    "delegate_bytes",
    "constant_bytes",
    "solve_seconds",
    "joint_solve_seconds",
    "lower_seconds",
    "joint_groups",
    "linked_values",
    "merged_values",
    "cache_hits",
)


def _program_bytes(program_manager, executorch_program) -> dict:
    """.pte size, delegate blob bytes and named (constant) data bytes of a lowered multi-method program."""
    blobs = 0
    for method in program_manager.methods:
        graph_module = program_manager.exported_program(method).graph_module
        for _, child in graph_module.named_children():
            blobs += len(getattr(child, "processed_bytes", b"") or b"")
    named = executorch_program._named_data
    named_bytes = sum(len(b.buffer) if hasattr(b, "buffer") else len(b) for b in (named.buffers if named else []))
    return {
        "pte_bytes": len(executorch_program.buffer),
        "delegate_bytes": blobs,
        "constant_bytes": named_bytes,
        "constant_entries": len(named.pte_data) if named else 0,
        "pte_sha256": hashlib.sha256(executorch_program.buffer).hexdigest()[:16],
    }


def _joint_fields(reports) -> dict:
    """What the joint solve of a lowering reported (nothing for the stock and per-method sides)."""
    joints = getattr(reports, "joint", None) or []
    if not joints:
        return {}
    # The passes only looked their answers up: the side's solve time is the joint solve's.
    seconds = round(sum(j.solve_seconds for j in joints), 4)
    return {
        "joint_groups": sum(j.groups for j in joints),
        "cache_hits": sum(j.cache_hits for j in joints),
        "linked_values": sum(j.linked_values for j in joints),
        "merged_values": sum(j.merged_values for j in joints),
        "joint_solve_seconds": seconds,
        "solve_seconds": seconds,
        "joint_notes": [n for j in joints for n in j.notes],
    }


def _weighted(per_method: dict[str, dict], weights: dict[str, float], key: str) -> float | None:
    values = [per_method[m].get(key) for m in weights]
    if any(v is None for v in values):
        return None
    return round(sum(weights[m] * v for m, v in zip(weights, values)), 3)


@dataclass
class MultiMethodModel:
    """One module exported as several methods that share its weights (and buffers): inputs per method, and
    how often each method runs per use of the program (the solver's `method_weights`)."""

    module: Any
    inputs: dict[str, tuple]
    weights: dict[str, float]


def compare_methods(
    built: MultiMethodModel,
    target: str,
    name: str | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    execute: bool = False,
    runtime: str | None = None,
    cost_profile: str | None = None,
    rounds: int = 15,
    weights: dict[str, float] | None = None,
    cache_dir: str | None = None,
    verify: str = "vela",
    *,
    family: str,
) -> MethodsComparison:
    """Stock vs per-method vs joint for `built` (module, inputs per method, weights) on `target` of `family`
    ("vulkan", or "ethos-u" for any Ethos-U configuration): call it through the registry,
    `layout_solver.targets.get_target(name).compare_methods`, which passes both; `weights` overrides
    the model's method weights; `cache_dir` is the joint solve's subproblem cache (shared across models and
    runs); `verify` is the Ethos-U solver sides' check against stock (`layout_solver.arm.solver_layouts`:
    "model" compares the stage's own layouts, not the cheaper of them and stock's). `name` labels the result
    (default: the module's class)."""
    weights = dict(weights or built.weights)
    with quiet():
        if family == "vulkan":
            result = _compare_vulkan(built, weights, time_limit, execute, runtime, cost_profile, rounds, cache_dir)
        else:
            result = _compare_ethos_u(built, weights, time_limit, target, cache_dir, verify)
    return MethodsComparison(
        model=name or type(built.module).__name__,
        target=target,
        methods=list(built.inputs),
        weights=weights,
        **{k: MethodsSide(**v) if k in SIDES else v for k, v in result.items()},
    )


# ------------------------------------------------------------------ Vulkan ---


def _compare_vulkan(built, weights, time_limit, execute, runtime, cost_profile, rounds, cache_dir) -> dict:
    import torch
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.backends.vulkan.vulkan_preprocess import VulkanBackend
    from executorch.exir import to_edge_transform_and_lower

    from layout_solver.lowering.joint_lowering import naming_partitions
    from layout_solver.vulkan import solver_layouts, stock_layouts
    from layout_solver.vulkan.runtime import probe

    if execute:
        probe(runtime)
    contexts = {
        "stock": lambda: stock_layouts(cost_profile),
        "per_method": lambda: solver_layouts(time_limit, cost_profile),
        "joint": lambda: solver_layouts(time_limit, cost_profile, method_weights=weights, cache_dir=cache_dir),
    }
    sides, buffers = {}, {}
    for side, context in contexts.items():
        start = time.perf_counter()
        try:
            exported = {
                m: torch.export.export(copy.deepcopy(built.module), inputs) for m, inputs in built.inputs.items()
            }
            with context() as reports, naming_partitions(VulkanBackend):
                manager = to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()])
                program = manager.to_executorch()
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            sides[side] = error_record(exc)
            continue
        buffers[side] = program.buffer
        per_method: dict[str, dict] = defaultdict(lambda: {"transitions": 0, "modelled_us": 0.0, "delegates": 0})
        for report in reports:
            row = per_method[report.partition.split("#")[0]]
            row["transitions"] += len(report.transitions)
            row["modelled_us"] = round(row["modelled_us"] + report.modelled_us, 3)
            row["delegates"] += 1
        record = {
            "per_method": {m: dict(per_method[m]) for m in weights},
            "weighted_modelled_us": _weighted(per_method, weights, "modelled_us"),
            "lower_seconds": round(time.perf_counter() - start, 3),
            "solve_seconds": round(sum(r.phase_seconds.get("solve", 0.0) for r in reports), 4),
            **_program_bytes(manager, program),
        }
        record.update(_joint_fields(reports))
        sides[side] = record
    result = dict(sides)
    if execute and buffers:
        result.update(_execute_vulkan(built, buffers, sides, weights, runtime, rounds))
    return result


def _execute_vulkan(built, buffers, sides, weights, runtime, rounds) -> dict:
    import numpy as np
    import torch

    from layout_solver.vulkan.runtime import execute

    expected = {}
    for method, inputs in built.inputs.items():
        with torch.no_grad():  # each method from the module's initial state, as each program starts
            expected[method] = [
                t.numpy() for t in torch.utils._pytree.tree_leaves(copy.deepcopy(built.module)(*inputs))
            ]
    runs = {f"{side}/{m}": (buffer, m) for side, buffer in buffers.items() for m in built.inputs}
    ran = execute(
        {}, {name: built.inputs[name.split("/")[1]] for name in runs}, runtime=runtime, rounds=rounds, methods=runs
    )
    worst_vs_stock = 0.0
    for name, outcome in ran.items():
        side, method = name.split("/")
        row = sides[side]["per_method"][method]
        row["executed"] = outcome.executed
        row["run_ms"] = round(outcome.run_ms, 3) if outcome.run_ms is not None else None
        if outcome.error:
            row["execute_error"] = outcome.error
        if outcome.executed:
            row["max_abs_diff_vs_eager"] = float(
                max(np.abs(o.astype(np.float64) - e).max() for o, e in zip(outcome.outputs, expected[method]))
            )
            stock = ran.get(f"stock/{method}")
            if side != "stock" and stock is not None and stock.executed:
                worst_vs_stock = max(
                    worst_vs_stock,
                    float(max(np.abs(a.astype(np.float64) - b).max() for a, b in zip(outcome.outputs, stock.outputs))),
                )
    for side in buffers:
        sides[side]["weighted_run_ms"] = _weighted(sides[side]["per_method"], weights, "run_ms")
    return {"max_abs_diff_solver_vs_stock": worst_vs_stock}


# ---------------------------------------------------------------- Ethos-U ---


@contextlib.contextmanager
def _recording_tosa(sink: list[tuple[str, bytes]]):
    """Every TOSA flatbuffer the Ethos-U backend hands to Vela, with the partition it belongs to."""
    from executorch.backends.arm.ethosu import EthosUBackend

    from layout_solver.lowering.joint_lowering import current_partition

    original = EthosUBackend.__dict__["_compile_tosa_flatbuffer"]

    def recording(tosa_flatbuffer, compile_spec):
        sink.append((current_partition(), bytes(tosa_flatbuffer)))
        return original.__func__(tosa_flatbuffer, compile_spec)

    EthosUBackend._compile_tosa_flatbuffer = staticmethod(recording)
    try:
        yield sink
    finally:
        EthosUBackend._compile_tosa_flatbuffer = original


def _compare_ethos_u(built, weights, time_limit, target, cache_dir, verify) -> dict:
    from executorch.backends.arm.ethosu import EthosUBackend, EthosUCompileSpec, EthosUPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from cost_models.vela import run_vela
    from layout_solver.arm import solver_layouts
    from layout_solver.arm.equivalence import compare_lowerings
    from layout_solver.arm.measure import quantize_for
    from layout_solver.lowering.joint_lowering import naming_partitions

    # Quantize once per method: every side lowers copies of the same int8 programs.
    quantized = {m: quantize_for(copy.deepcopy(built.module), inputs, target) for m, inputs in built.inputs.items()}
    contexts = {
        "stock": contextlib.nullcontext,
        "per_method": lambda: solver_layouts(time_limit, verify=verify),
        "joint": lambda: solver_layouts(time_limit, method_weights=weights, cache_dir=cache_dir, verify=verify),
    }
    sides, tosa = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for side, context in contexts.items():
            start = time.perf_counter()
            try:
                with (
                    contextlib.redirect_stdout(io.StringIO()),
                    context() as reports,
                    naming_partitions(EthosUBackend),
                    _recording_tosa([]) as recorded,
                ):
                    manager = to_edge_transform_and_lower(
                        copy.deepcopy(quantized), partitioner=[EthosUPartitioner(EthosUCompileSpec(target))]
                    )
                    program = manager.to_executorch()
            except Exception as exc:  # noqa: BLE001 - recorded, not fatal
                sides[side] = error_record(exc)
                continue
            elapsed = time.perf_counter() - start
            per_method: dict[str, dict] = defaultdict(
                lambda: {"vela_transpose_cycles": 0, "vela_total_cycles": 0, "vela_transpose_rows": 0, "delegates": 0}
            )
            files = []
            for index, (partition, flatbuffer) in enumerate(recorded):
                files.append(Path(tmp) / side / f"{index}.tosa")
                files[-1].parent.mkdir(parents=True, exist_ok=True)
                files[-1].write_bytes(flatbuffer)
                with tempfile.TemporaryDirectory() as work, contextlib.redirect_stdout(io.StringIO()):
                    rows = [r for r in run_vela(flatbuffer, Path(work)) if r["Target"] == "NPU"]
                row = per_method[partition.split("#")[0]]
                transposes = [r for r in rows if r["NNG Operator"] == "Transpose"]
                row["vela_transpose_rows"] += len(transposes)
                row["vela_transpose_cycles"] += sum(int(float(r["Op Cycles"])) for r in transposes)
                row["vela_total_cycles"] += sum(int(float(r["Op Cycles"])) for r in rows)
                row["delegates"] += 1
            tosa[side] = files
            record = {
                "per_method": {m: dict(per_method[m]) for m in weights},
                "weighted_total_cycles": _weighted(per_method, weights, "vela_total_cycles"),
                "weighted_transpose_cycles": _weighted(per_method, weights, "vela_transpose_cycles"),
                "lower_seconds": round(elapsed, 3),
                "solve_seconds": round(sum(getattr(r, "solve_seconds", 0.0) for r in reports or []), 4),
                **_program_bytes(manager, program),
            }
            record.update(_joint_fields(reports))
            sides[side] = record
        result = dict(sides)
        for side in ("per_method", "joint"):
            if "stock" in tosa and side in tosa:
                same = compare_lowerings(tosa["stock"], tosa[side])
                result[f"{side}_equivalent"] = same.equivalent
                result[f"{side}_reference"] = same.reference["right"]
                result["stock_reference"] = same.reference["left"]
    return result
