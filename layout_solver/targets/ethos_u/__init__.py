"""The Arm Ethos-U NPU configurations, compiled by Vela: one target per accelerator configuration Vela
accepts (ethos-u55-32 ... ethos-u85-2048)."""

from __future__ import annotations

import contextlib
import copy
import io
import tempfile
import traceback
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.targets.base import Plot, Target

if TYPE_CHECKING:
    from layout_solver.compare.result import Comparison


@dataclass(frozen=True)
class EthosUTarget(Target):
    """An Arm Ethos-U NPU configuration, compiled by Vela (e.g. "ethos-u85-256")."""

    family: ClassVar[str] = "ethos-u"
    backend: ClassVar[str] = "arm"
    options: ClassVar[frozenset[str]] = frozenset({"input_order", "verify"})
    family_name: ClassVar[str] = "Ethos-U"
    headline: ClassVar[tuple[str, ...]] = ("vela_total_cycles",)  # deterministic: within 0.1% is unchanged
    headline_name: ClassVar[str] = "Vela total cycles"
    explain_unit: ClassVar[str] = "NPU cycles (Vela)"
    explain_total: ClassVar[str] = "vela_total_cycles"
    job_weight: ClassVar[float] = 4.0  # the demo's: 21-120 s a model against Vulkan's and XNNPACK's 13-28 s
    row_fields: ClassVar[tuple[str, ...]] = (
        "tosa_transposes", "vela_transpose_cycles", "vela_total_cycles", "predicted_total_cycles", "npu_ops",
        "cpu_ops", "lower_seconds", "eager_within_tolerance",
    )  # fmt: skip
    example: ClassVar[str] = "--target ethos-u55-128, ethos-u85-256, ..."

    def explained_graphs(self, kept) -> list:
        """Each delegate's TOSA graph, its tensors' dim orders and Vela's cycles per op (`ethos_u.explain`)."""
        from layout_solver.targets.ethos_u.explain import tosa_graphs

        return tosa_graphs(kept, self.explain_unit)

    @property
    def description(self) -> str:
        """The configuration, as "Arm <name> (TOSA INT, Vela)"."""
        return f"Arm {self.name} (TOSA INT, Vela)"

    def compile_spec(self, **kwargs):
        """executorch's EthosUCompileSpec for this configuration (its default system config and memory mode)."""
        from executorch.backends.arm.ethosu import EthosUCompileSpec

        return EthosUCompileSpec(self.name, **kwargs)

    def vela_config(self):
        """What Vela makes of this configuration's compile flags (cost_models.vela.VelaConfig)."""
        from cost_models.vela import vela_config

        return vela_config(tuple(self.compile_spec().compiler_flags))

    def price_transpose(self, query) -> dict:
        """A transpose's cycles: on the configuration the Ethos-U55 model was calibrated for, that model (no
        Vela run); on any other, Vela for this configuration's compile flags."""
        from cost_models import ethos_u55
        from cost_models import query as queries

        calibrated = self.name == ethos_u55.CALIBRATED_FOR
        return queries.ethos_u_transpose(query, None if calibrated else tuple(self.compile_spec().compiler_flags))

    def report_fields(self, result: dict) -> dict:
        """The two sides' runs on the TOSA reference model, and the operator classes whose cycles grew most."""
        from layout_solver.targets.ethos_u.report import dearer_op_classes

        return {"stock_reference": result.get("stock_reference", ""),
                "solver_reference": result.get("solver_reference", ""),
                "dearer_ops": "; ".join(f"{op} +{cycles:,}" for op, cycles in dearer_op_classes(result))}  # fmt: skip

    def report_section(self, rows: list[dict]) -> list[str]:
        """Vela's transpose and total cycles of the whole delegate, stock and solver."""
        from layout_solver.targets.ethos_u.report import section

        return section(self.name, rows)

    def plots(self) -> tuple[Plot, ...]:
        """The totals against the transposes, Vela's transpose cycles and its total cycles (the files of the
        configuration the Ethos-U55 model was calibrated for carry no suffix)."""
        from cost_models.ethos_u55 import CALIBRATED_FOR

        suffix = "" if self.name == CALIBRATED_FOR else f"_{self.name}"
        return (Plot(f"totals_vs_transposes_{self.name}.png", kind="totals_vs_transposes"),
                Plot(f"transpose_cycles{suffix}.png", f"{self.name}: Vela transpose cycles", "cycles",
                     "stock_vela_transpose_cycles", "solver_vela_transpose_cycles"),
                Plot(f"total_cycles{suffix}.png", f"{self.name}: Vela total NPU cycles", "cycles",
                     "stock_vela_total_cycles", "solver_vela_total_cycles"))  # fmt: skip

    def compare(self, module, inputs, name=None, time_limit=DEFAULT_TIME_LIMIT, service=None, **options):
        """Stock versus solver lowering for this configuration (compare_ethos_u)."""
        self.check_options(options)
        return compare_ethos_u(module, inputs, name, time_limit, self.name, service=service, **options)

    def compare_methods(
        self, built, name=None, time_limit=DEFAULT_TIME_LIMIT, weights=None, cache_dir=None, verify="vela", **options
    ):
        """Stock versus per-method versus joint lowering for this configuration. Takes the method `weights`, the joint
        solve\'s `cache_dir` and the target\'s own options; any other option must be left at its default."""
        from layout_solver.compare.methods import compare_methods
        from layout_solver.targets.ethos_u.methods import methods_sides

        self.check_options(options, frozenset())  # the CLI passes input_order only when not nchw
        return compare_methods(
            built, self.name, lambda b, w: methods_sides(b, w, time_limit, self.name, cache_dir, verify), name, weights
        )


@cache
def vela_accelerators() -> tuple[str, ...]:
    """Every accelerator configuration the installed Vela accepts."""
    from ethosu.vela.architecture_features import Accelerator

    return tuple(a.value for a in Accelerator)


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
    from layout_solver.compare.result import Comparison, Side
    from layout_solver.lowering.quiet import quiet

    with quiet():
        result = _compare_ethos_u(module, inputs, time_limit, target, service, input_order, verify)
    return Comparison(
        model=name or type(module).__name__,
        target=target,
        input_order=input_order,
        **{k: Side(**v) if k in ("stock", "solver") else v for k, v in result.items()},
    )


def _compare_ethos_u(module, inputs, time_limit, target, service, input_order, verify) -> dict:
    from layout_solver.arm.hooks import solver_layouts
    from layout_solver.compare.artifacts import keep
    from layout_solver.compare.result import error_record, not_compared, not_lowered
    from layout_solver.targets.ethos_u.equivalence import stock_against_solver, versus_quantized_eager
    from layout_solver.targets.ethos_u.measure import declare_input_order, lower_ethos_u, quantize_for, solver_metrics

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
        return {"stock": error, "solver": dict(error), **not_compared("quantization failed, neither side lowered")}
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
            keep(side, lowerings[side])
            metrics = lowerings[side].metrics()
            # Each program on its own against the quantized eager model, so a side the other cannot be
            # compared with (the reference model rejected it) is still checked.
            eager = eager_checks[side] = versus_quantized_eager(
                quantized, lowerings[side].program, lowerings[side].tosa_files, inputs, eager_outputs
            )
            metrics.update(eager.fields())
            if side == "solver":
                metrics.update(solver_metrics(reports))
            result[side] = metrics
        if len(lowerings) == 2:
            # the Vela numbers of a side the reference model rejected stay
            result.update(
                stock_against_solver(lowerings["stock"].tosa_files, lowerings["solver"].tosa_files, eager_checks)
            )
        else:
            result.update(not_lowered(lowerings))
    return result
