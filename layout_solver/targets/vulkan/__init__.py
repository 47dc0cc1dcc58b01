"""ExecuTorch's Vulkan delegate, priced with a device cost profile (or, by default, every profile)."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.targets.base import Plot, Target, shape_list

if TYPE_CHECKING:
    from layout_solver.compare.result import Comparison


# Fresh timing processes read again where the first reads a changed program outside the tolerance (the verdict
# takes the median of all): one process's paired ratio of byte-identical programs strays 0.91-1.09 on lavapipe
# (benchmarks/results/vulkan_repeat.md).
CONFIRM_TIMINGS = 4
# Outputs against eager: the solver's may differ by no more than stock's (or this much) times the slack (summation
# order moves with the layout).
EAGER_ATOL, EAGER_SLACK = 1e-4, 1.05


@dataclass(frozen=True)
class VulkanTarget(Target):
    """ExecuTorch's Vulkan delegate, priced with a device cost profile."""

    family: ClassVar[str] = "vulkan"
    backend: ClassVar[str] = "vulkan"
    options: ClassVar[frozenset[str]] = frozenset({"execute", "runtime", "cost_profile", "rounds"})
    query_options: ClassVar[frozenset[str]] = frozenset({"src", "dst", "cost_profile"})
    family_name: ClassVar[str] = "Vulkan"
    headline: ClassVar[tuple[str, ...]] = ("run_ms", "modelled_us")
    headline_name: ClassVar[str] = "run time (or modelled cost)"
    explain_unit: ClassVar[str] = "us (modelled)"
    row_fields: ClassVar[tuple[str, ...]] = (
        "transitions", "transition_cost", "lower_seconds", "pass_seconds", "modelled_us", "executed",
        "max_abs_diff_vs_eager", "run_ms",
    )  # fmt: skip
    tolerance: ClassVar[float] = 0.03  # run times: the paired benchmark's noise bound on lavapipe
    example: ClassVar[str] = "--target vulkan"
    plot_marker: ClassVar[str] = "s"

    @property
    def description(self) -> str:
        """The delegate, as "Vulkan (ExecuTorch Vulkan delegate)"."""
        return "Vulkan (ExecuTorch Vulkan delegate)"

    def checked_options(self, options: dict) -> dict:
        """A cost profile must load; a runtime is only for programs that run (`execute`)."""
        from cost_models.vulkan import load_profile

        if options.get("cost_profile"):
            try:
                load_profile(options["cost_profile"])
            except OSError as exc:
                raise ValueError(str(exc)) from exc
        if options.get("runtime") and not options.get("execute"):
            raise ValueError("--vulkan-runtime needs --execute")
        return options

    def failed(self, comparison, options: dict) -> bool:
        """Also a program that ran stock's way and crashed the solver's way on the device."""
        crashed = (
            options.get("execute") and comparison.side("stock").executed and not comparison.side("solver").executed
        )
        return super().failed(comparison, options) or bool(crashed)

    def verdict_before_price(self, result: dict, stock: dict, solver: dict, equivalent) -> str | None:
        """A program that ran stock's way and not the solver's failed; one that neither side ran is not checked;
        the solver's outputs further from eager than stock's (beyond EAGER_ATOL and EAGER_SLACK) are not
        equivalent."""
        if stock.get("executed") and solver.get("executed") is False:
            return "program failed to run"
        if stock.get("executed") is False and solver.get("executed") is False:  # neither ran: no time to compare
            return "not checked"
        s, o = stock.get("max_abs_diff_vs_eager"), solver.get("max_abs_diff_vs_eager")
        if isinstance(s, (int, float)) and isinstance(o, (int, float)) and o > max(s, EAGER_ATOL) * EAGER_SLACK:
            return "not equivalent"
        return None

    def report_fields(self, result: dict) -> dict:
        """Whether the two programs are the same bytes, and the paired run ratio with its repeated timings."""
        timings = result.get("run_ratio_timings")
        return {"same_program": result.get("same_program", ""), "run_ratio_paired": result.get("run_ratio_paired", ""),
                "run_ratio_timings": " ".join(map(str, timings)) if timings else ""}  # fmt: skip

    def report_section(self, rows: list[dict]) -> list[str]:
        """Transitions, modelled cost, pass time and the run on the device, stock / solver."""
        from layout_solver.targets.vulkan.report import section

        return section(rows)

    def report_notes(self, rows: list[dict]) -> list[str]:
        """What one timing process's ratio strays by (read off the byte-identical pairs)."""
        from layout_solver.targets.vulkan.report import timing_noise

        return timing_noise(rows, self.name, self.tolerance)

    def plots(self) -> tuple[Plot, ...]:
        """The transitions, and the run time where the programs ran."""
        return (Plot("transitions.png", "Vulkan: layout transitions", "clone dispatches", "stock_transitions",
                     "solver_transitions"),
                Plot("vulkan_run_ms.png", "Vulkan: run time on the device (median)", "ms", "stock_run_ms",
                     "solver_run_ms"))  # fmt: skip

    def cache_inputs(self) -> dict:
        """The default Vulkan objective weighs every profile, the user's own files included."""
        from cost_models.vulkan import profiles_digest

        return {"vulkan_profiles": profiles_digest()}

    def price_transpose(self, query) -> dict:
        """A representation change's microseconds under the query's cost profile (default mobile-gpu)."""
        from cost_models.query import vulkan_transition

        return vulkan_transition(query)

    calibration_help: ClassVar[str] = "op-mode and transition costs on the present Vulkan device"

    def add_calibration_arguments(self, parser) -> None:
        """--out, the runtime, which op classes at how many sizes or which shapes, and --extend / --rescale of a
        measured profile."""
        c = parser
        c.add_argument("--out", default="vulkan_profile.json", help="profile file to write (default %(default)s)")
        c.add_argument("--vulkan-runtime", help="the Vulkan runtime plugin (default $LAYOUT_SOLVER_VULKAN_RUNTIME)")
        c.add_argument("--ops", help="comma-separated op classes (default: all)")
        c.add_argument("--sizes", type=int, default=3, help="tensor sizes per op class, 1-3 (default %(default)s)")
        c.add_argument("--rounds", type=int, default=9, help="timed rounds per program (default %(default)s)")
        c.add_argument("--no-transitions", action="store_true", help="measure op modes only")
        c.add_argument(
            "--shapes",
            type=shape_list,
            help="measure at these shapes instead of the built-in ones, "
            "e.g. 1x1x128,4x1x64 (each op class takes those it can run on)",
        )
        c.add_argument(
            "--extend", help="a measured profile: add the new points to its samples and refit what they touch"
        )
        c.add_argument(
            "--rescale",
            help="a measured profile: re-time its reference probes (one per op class, one clone) on the present "
            "device and write it rescaled to today's speed (one factor: the median over them)",
        )
        c.add_argument(
            "--by-class",
            action="store_true",
            help="with --rescale: one factor per op class in each storage (each rests on one sample of the profile)",
        )
        c.add_argument(
            "--reference-passes",
            type=int,
            help="with --rescale or --extend: passes over the reference probes, each probe's time the median over "
            "them (default 7: one pass's factor moves by up to 1.5x on lavapipe)",
        )

    def calibration_settings(self, args) -> dict:
        """`calibrate`'s keywords from the flags `add_calibration_arguments` defined."""
        return {
            "runtime": args.vulkan_runtime,
            "ops": [o.strip() for o in args.ops.split(",")] if args.ops else None,
            "sizes": args.sizes,
            "rounds": args.rounds,
            "transitions": not args.no_transitions,
            "shapes": args.shapes,
            "extend": args.extend,
            "rescale": args.rescale,
            "by_class": args.by_class,
            "reference_passes": args.reference_passes,
        }

    def calibrate(
        self,
        out,
        runtime=None,
        ops: list[str] | None = None,
        sizes: int = 3,
        rounds: int = 9,
        transitions: bool = True,
        shapes=None,
        extend: str | None = None,
        rescale: str | None = None,
        by_class: bool = False,
        reference_passes: int | None = None,
        command: str = "",
        log=print,
    ) -> str:
        """Measure the present Vulkan device's profile (op modes and transitions) and write it to `out`; with
        `extend`, add the new points to that measured profile; with `rescale`, re-time its reference probes and
        write it rescaled to today's speed (by one factor; with `by_class`, by each op class's in each storage)."""
        from cost_models.vulkan import load_profile
        from layout_solver.targets.vulkan import calibrate as calibration
        from layout_solver.targets.vulkan import rescale as rescaling
        from layout_solver.targets.vulkan.runtime import VulkanRuntimeUnavailable, probe

        unknown = sorted(set(ops or []) - set(calibration.PROBES))
        if unknown:
            raise ValueError(f"unknown op classes {unknown}; known: {', '.join(calibration.PROBES)}")
        reference_passes = rescaling.REFERENCE_PASSES if reference_passes is None else reference_passes
        if not 1 <= sizes <= 3 or rounds < 3 or reference_passes < 1:
            raise ValueError("--sizes takes 1 to 3, --rounds at least 3, --reference-passes at least 1")
        out = Path(out)
        if not out.parent.is_dir():
            raise ValueError(f"cannot write {out}: {out.parent} is not a directory")
        if by_class and not rescale:
            raise ValueError("--by-class rescales: it needs --rescale PROFILE")
        if extend and rescale:
            raise ValueError("--extend and --rescale: one at a time (rescale the extended profile afterwards)")
        base = None
        for flag, given in (("--extend", extend), ("--rescale", rescale)):
            if given:
                try:
                    base = load_profile(given)
                except OSError as exc:
                    raise ValueError(str(exc)) from exc
                if not base.measured:
                    raise ValueError(f"{flag} {given}: not a measured profile (it holds assumptions)")
        try:
            probe(runtime)
        except VulkanRuntimeUnavailable as exc:
            raise ValueError(str(exc)) from exc
        if rescale:
            profile = rescaling.rescale(
                base, command, by_class, runtime=runtime, rounds=rounds, log=log, passes=reference_passes
            )
        else:
            profile = calibration.calibrate(
                runtime, ops=ops, sizes=sizes, rounds=rounds, transitions=transitions, log=log, command=command,
                shapes=shapes, extend=base, reference_passes=reference_passes,
            )  # fmt: skip
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(profile.model_dump_json(indent=1) + "\n")
        tmp.replace(out)
        modes = sum(len(t) for t in profile.op_modes.values())
        return f"profile for {profile.device}: {modes} op modes, {len(profile.transitions)} transitions -> {out}"

    def compare(self, module, inputs, name=None, time_limit=DEFAULT_TIME_LIMIT, service=None, **options):
        """Stock versus solver lowering on Vulkan (compare_vulkan)."""
        self.check_options(options)
        return compare_vulkan(module, inputs, name, time_limit, service=service, **options)

    def compare_methods(
        self,
        built,
        name=None,
        time_limit=DEFAULT_TIME_LIMIT,
        weights=None,
        cache_dir=None,
        execute=False,
        runtime=None,
        cost_profile=None,
        rounds=15,
        **options,
    ):
        """Stock versus per-method versus joint lowering on Vulkan. Takes the method `weights`, the joint
        solve\'s `cache_dir` and the target\'s own options; any other option must be left at its default."""
        from layout_solver.compare.methods import compare_methods
        from layout_solver.targets.vulkan.methods import methods_sides

        self.check_options(options, frozenset())  # the CLI passes input_order only when not nchw
        return compare_methods(
            built,
            self.name,
            lambda b, w: methods_sides(b, w, time_limit, execute, runtime, cost_profile, rounds, cache_dir),
            name,
            weights,
        )


def compare_vulkan(
    module,
    inputs: tuple,
    name: str | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    execute: bool = False,
    runtime: str | None = None,
    cost_profile: str | None = None,
    rounds: int = 15,
    service: str | None = None,
) -> Comparison:
    """Lower `module` on `inputs` with the stock TagMemoryMetaPass and with the solver (each from a fresh
    export); with `execute`, run both on the Vulkan device (runtime plugin `runtime` or
    $LAYOUT_SOLVER_VULKAN_RUNTIME) against eager. `name` labels the result (default: the module's class).

    Raises VulkanRuntimeUnavailable (before lowering anything) when `execute` has no plugin or no device.
    """
    from layout_solver.lowering.quiet import quiet

    with quiet():
        return _compare_vulkan(
            module, inputs, name or type(module).__name__, time_limit, execute, runtime, cost_profile, rounds, service
        )


def _compare_vulkan(module, inputs, name, time_limit, execute, runtime, cost_profile, rounds, service) -> Comparison:
    from layout_solver.compare.artifacts import keep
    from layout_solver.compare.result import Comparison, Side, error_record
    from layout_solver.targets.vulkan.measure import execute_on_device, lower_vulkan
    from layout_solver.targets.vulkan.runtime import probe
    from layout_solver.vulkan import solver_layouts, stock_layouts

    if execute:
        probe(runtime)
    sides = {}
    buffers = {}
    contexts = (
        ("stock", lambda: stock_layouts(cost_profile)),
        ("solver", lambda: solver_layouts(time_limit, cost_profile, service)),
    )
    for side, context in contexts:
        start = time.perf_counter()
        try:
            buffers[side], reports = lower_vulkan(module, inputs, context)
            keep(side, reports)
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal: e.g. upstream fake-mode failures
            sides[side] = error_record(exc)
            continue
        elapsed = time.perf_counter() - start
        by_repr: Counter = Counter()
        for r in reports:
            by_repr.update(r.tensors_by_repr)
        record = {
            "transitions": sum(len(r.transitions) for r in reports),
            "transition_cost": round(sum(r.transition_cost for r in reports), 3),
            "tensors_by_repr": dict(sorted(by_repr.items())),
            "lower_seconds": round(elapsed, 3),
            "pass_seconds": round(sum(r.pass_seconds for r in reports), 4),
            "delegates": len(reports),
            "modelled_us": round(sum(r.modelled_us for r in reports), 3),
            "modelled_us_by_profile": {
                label: round(sum(r.modelled_us_by_profile.get(label, 0.0) for r in reports), 3)
                for label in dict.fromkeys(k for r in reports for k in r.modelled_us_by_profile)
            }
            or None,
            "transition_list": [t for r in reports for t in r.transitions],
        }
        if side == "solver":
            record.update(
                objective=round(sum(r.objective or 0.0 for r in reports), 3),
                bound=round(sum(r.bound or 0.0 for r in reports), 3),
                gap=max((r.gap or 0.0 for r in reports), default=0.0),
                fallbacks=[n for r in reports if r.kind == "stock-fallback" for n in r.notes],
                delegates_kept_stock=sum(r.kept_stock for r in reports),
                solver_notes=[n for r in reports if r.kind == "solver" for n in r.notes],
                problem_ops=sum(r.problem_ops for r in reports),
                solve_seconds=round(sum(r.phase_seconds.get("solve", 0.0) for r in reports), 4),
                phase_seconds={
                    k: round(sum(r.phase_seconds.get(k, 0.0) for r in reports), 4)
                    for k in ("build", "solve", "write_back", "check")
                },
            )
        sides[side] = record
    extra = (
        execute_on_device(module, inputs, buffers, sides, runtime, rounds, CONFIRM_TIMINGS, VulkanTarget.tolerance)
        if execute and buffers
        else {}
    )
    return Comparison(
        model=name,
        target="vulkan",
        cost_profile=cost_profile or "default",
        **{side: Side(**record) for side, record in sides.items()},
        **extra,
    )
