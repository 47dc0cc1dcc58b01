"""The TOSA INT target: executorch's Arm TOSA pipeline with no compiler behind it (a TOSA 1.0 INT flatbuffer for
any TOSA consumer: VGF, a reference runtime, another vendor's compiler).

With no compiler to price a program, the stage prices it target-neutrally (`layout_solver.arm.pricing.
MovedBytesPricing`: the bytes every TOSA TRANSPOSE moves plus a fixed price per transpose), and the comparison
measures what that promises: TOSA TRANSPOSE ops and the bytes they move (`transition_cost`), stock against the
stage, both lowered from one int8 program; equivalence of the two on the TOSA reference model and each against
the quantized eager model. The headline ratio is the moved bytes.

This module is the whole target; `layout_solver.targets` registers it by name ("tosa-int").
"""

from __future__ import annotations

import contextlib
import copy
import io
import tempfile
import time
from dataclasses import dataclass
from math import prod
from pathlib import Path
from typing import ClassVar

from cost_models import ethos_u55
from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.targets.base import Target

TOSA_SPEC = "TOSA-1.0+INT"
# graph_io.tosa names TOSA's dtypes: the integer ones as cost_models.ethos_u55 does, the float ones its own way.
DTYPE_BYTES = {**ethos_u55.DTYPE_BYTES, "fp16": 2, "bf16": 2, "fp32": 4, "int48": 6}
# The same, under the names the cost query takes (torch's).
QUERY_DTYPE_BYTES = {**ethos_u55.DTYPE_BYTES, "float16": 2, "bfloat16": 2, "float32": 4}


def transpose_figures(ops) -> dict:
    """TOSA TRANSPOSE ops of one program (graph_io.tosa.tosa_ops per delegate) and the bytes they move."""
    transposes = [op for delegate in ops for op in delegate if op.op == "TRANSPOSE"]
    moved = sum(prod(op.input_shapes[0]) * DTYPE_BYTES.get(op.dtype, 4) for op in transposes if op.input_shapes)
    return {"tosa_transposes": len(transposes), "transition_cost": float(moved)}


def _lower(quantized, spec_dir: Path):
    """Lower one int8 program with executorch's TOSA partitioner; (program, seconds, the delegates' .tosa)."""
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner
    from executorch.exir import to_edge_transform_and_lower

    spec = TosaCompileSpec(TOSA_SPEC).dump_intermediate_artifacts_to(str(spec_dir))
    started = time.perf_counter()
    with contextlib.redirect_stdout(io.StringIO()):
        program = to_edge_transform_and_lower(quantized, partitioner=[TOSAPartitioner(spec)])
    return program, time.perf_counter() - started, sorted(spec_dir.glob("output*.tosa"))


def compare_tosa(module, inputs: tuple, name=None, time_limit=DEFAULT_TIME_LIMIT, service=None, target="tosa-int"):
    """Stock versus the solver's stage on `module` for a TOSA INT program (see the module docstring)."""
    from executorch.backends.arm.tosa.compile_spec import TosaCompileSpec

    from graph_io.tosa import tosa_ops
    from layout_solver.arm.hooks import solver_layouts
    from layout_solver.compare.result import Comparison, Side, error_record, not_compared, not_lowered
    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.ethos_u.equivalence import stock_against_solver, versus_quantized_eager
    from layout_solver.targets.ethos_u.measure import quantize, solver_metrics

    result: dict = {}
    with quiet(), tempfile.TemporaryDirectory() as tmp:
        try:  # quantize once: both sides lower the same int8 program
            quantized = quantize(module, inputs, TosaCompileSpec(TOSA_SPEC))
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            failed = error_record(exc)
            return Comparison(model=name or type(module).__name__, target=target, stock=Side(**failed),
                              solver=Side(**failed), **not_compared("quantization failed, neither side lowered"))  # fmt: skip
        eager_outputs = quantized.module()(*inputs)
        files, eager_checks = {}, {}
        for side in ("stock", "solver"):
            folder = Path(tmp) / side
            folder.mkdir()
            try:
                stage = solver_layouts(time_limit, service=service) if side == "solver" else contextlib.nullcontext([])
                with stage as reports:
                    program, seconds, files[side] = _lower(copy.deepcopy(quantized), folder)
            except Exception as exc:  # noqa: BLE001 - recorded, not fatal
                result[side] = error_record(exc)
                files.pop(side, None)
                continue
            eager = eager_checks[side] = versus_quantized_eager(quantized, program, files[side], inputs, eager_outputs)
            metrics = {
                **transpose_figures([tosa_ops(f.read_bytes()) for f in files[side]]),
                "lower_seconds": round(seconds, 3),
                **eager.fields(),
            }
            if side == "solver":
                metrics.update(solver_metrics(reports))
            result[side] = metrics
        if len(files) == 2:
            result.update(stock_against_solver(files["stock"], files["solver"], eager_checks))
        else:
            result.update(not_lowered(files))
    return Comparison(
        model=name or type(module).__name__,
        target=target,
        **{k: Side(**v) if k in ("stock", "solver") else v for k, v in result.items()},
    )


@dataclass(frozen=True)
class TosaTarget(Target):
    """A TOSA INT program with no compiler behind it, priced by the bytes its transposes move."""

    family: ClassVar[str] = "tosa"
    backend: ClassVar[str] = "arm"
    family_name: ClassVar[str] = "TOSA"
    example: ClassVar[str] = "--target tosa-int"
    headline: ClassVar[tuple[str, ...]] = ("transition_cost",)
    headline_name: ClassVar[str] = "bytes moved by TOSA transposes"
    row_fields: ClassVar[tuple[str, ...]] = (
        "tosa_transposes", "transition_cost", "lower_seconds", "eager_within_tolerance",
    )  # fmt: skip

    @property
    def description(self) -> str:
        """The pipeline, as "TOSA 1.0 INT (no compiler; moved bytes)"."""
        return "TOSA 1.0 INT (no compiler; moved bytes)"

    def price_transpose(self, query) -> dict:
        """A transpose priced as the stage prices this target: the bytes it moves."""
        from cost_models.query import moved_bytes_transpose

        return moved_bytes_transpose(query, QUERY_DTYPE_BYTES)

    def compare(self, module, inputs, name=None, time_limit=DEFAULT_TIME_LIMIT, service=None, **options):
        """Stock versus solver lowering of `module` to a TOSA INT program (compare_tosa)."""
        self.check_options(options)
        return compare_tosa(module, inputs, name, time_limit, service, target=self.name)
