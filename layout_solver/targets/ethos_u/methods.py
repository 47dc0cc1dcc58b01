"""A multi-method model's three Ethos-U lowerings (stock, per-method, joint), for
`layout_solver.compare.methods.compare_methods`."""

from __future__ import annotations

import contextlib
import copy
import io
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from layout_solver.compare.methods import joint_fields, program_bytes, weighted
from layout_solver.compare.result import error_record


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


def methods_sides(
    built,
    weights: dict[str, float],
    time_limit: float,
    target: str,
    cache_dir: str | None = None,
    verify: str = "vela",
) -> dict:
    """The three sides (stock, per-method, joint) of `built` lowered for the Ethos-U configuration `target`:
    per method Vela's transpose and total cycles; then each solver side's delegates against stock's on the TOSA
    reference model, bit-exact."""
    from executorch.backends.arm.ethosu import EthosUBackend, EthosUCompileSpec, EthosUPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from cost_models.vela import run_vela
    from layout_solver.arm import solver_layouts
    from layout_solver.lowering.joint_lowering import naming_partitions
    from layout_solver.targets.ethos_u.equivalence import compare_lowerings
    from layout_solver.targets.ethos_u.measure import quantize_for

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
                "weighted_total_cycles": weighted(per_method, weights, "vela_total_cycles"),
                "weighted_transpose_cycles": weighted(per_method, weights, "vela_transpose_cycles"),
                "lower_seconds": round(elapsed, 3),
                "solve_seconds": round(sum(getattr(r, "solve_seconds", 0.0) for r in reports or []), 4),
                **program_bytes(manager, program),
            }
            record.update(joint_fields(reports))
            sides[side] = record
        result = dict(sides)
        for side in ("per_method", "joint"):
            if "stock" in tosa and side in tosa:
                same = compare_lowerings(tosa["stock"], tosa[side])
                result[f"{side}_equivalent"] = same.equivalent
                result[f"{side}_reference"] = same.reference["right"]
                result["stock_reference"] = same.reference["left"]
    return result
