"""XNNPACK on this CPU: `xnnpack` (fp32) and `xnnpack-int8` (XNNPACKQuantizer, static, per-channel symmetric).

The stage is `layout_solver.xnnpack.solver_layouts` (the solver in place of ChannelsLastTaggedReshapePass),
priced by a conversion-cost profile measured on the CPU (`calibrate xnnpack`); a comparison runs both programs
through the wheel's own runtime, interleaved and paired, threads pinned (`measure.py`, `runtime.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.targets.base import Target, int_list

DEFAULT_THREADS = (1, 2)


@dataclass(frozen=True)
class XnnpackTarget(Target):
    """ExecuTorch's XNNPACK delegate on the present CPU, fp32 or static int8."""

    quantized: bool = False
    family: ClassVar[str] = "xnnpack"
    backend: ClassVar[str] = "xnnpack"
    options: ClassVar[frozenset[str]] = frozenset({"threads", "cost_profile", "rounds", "verify"})
    query_options: ClassVar[frozenset[str]] = frozenset({"cost_profile", "threads"})
    family_name: ClassVar[str] = "XNNPACK"
    headline: ClassVar[tuple[str, ...]] = ("run_ms",)
    headline_name: ClassVar[str] = "run time on this CPU"
    explain_unit: ClassVar[str] = "us (modelled layout conversions)"
    row_fields: ClassVar[tuple[str, ...]] = (
        "transitions", "modelled_us", "lower_seconds", "pass_seconds", "run_ms", "conversion_share",
        "predicted_conversion_ms", "max_abs_diff_vs_eager",
    )  # fmt: skip
    tolerance: ClassVar[float] = 0.02  # the bar: a paired ratio above 1.02 is dearer
    example: ClassVar[str] = "--target xnnpack"
    times_programs: ClassVar[bool] = True

    @property
    def description(self) -> str:
        """The target in words: "XNNPACK (fp32, this CPU)"."""
        return f"XNNPACK ({'static int8' if self.quantized else 'fp32'}, this CPU)"

    def checked_options(self, options: dict) -> dict:
        """A cost profile must load, thread counts be positive, verify be model or run (ValueError says which)."""
        from cost_models.xnnpack import load_profile

        if options.get("cost_profile"):
            try:
                load_profile(options["cost_profile"])
            except OSError as exc:
                raise ValueError(str(exc)) from exc
        threads = options.get("threads")
        if threads is not None and (not threads or any(not isinstance(t, int) or t < 1 for t in threads)):
            raise ValueError(f"--threads takes positive integers, got {threads!r}")
        if options.get("verify") not in (None, "model", "run"):
            raise ValueError(f"--verify takes model or run, got {options['verify']!r}")
        return options

    def failed(self, comparison, options: dict) -> bool:
        """Also a solver program the runtime refuses where stock's runs."""
        ran = comparison.side("stock").executed is not False and comparison.side("solver").executed is False
        return super().failed(comparison, options) or ran

    def cache_inputs(self) -> dict:
        """The profile file a user names may change between runs."""
        from cost_models.xnnpack import load_profile, profile_digest

        return {"xnnpack_profile": profile_digest(load_profile())}

    def price_transpose(self, query) -> dict:
        """A conversion's microseconds on the profile's CPU (default: the shipped one)."""
        from cost_models import xnnpack as xnn_cost

        if not query.perm:
            raise ValueError(f"{self.name}: --perm is required (the physical permutation)")
        profile = xnn_cost.load_profile(getattr(query, "cost_profile", None))
        threads = getattr(query, "threads", None) or 1
        dtype = query.dtype or ("int8" if self.quantized else "float32")
        return {
            "target": self.name,
            "shape": list(query.shape),
            "perm": list(query.perm),
            "dtype": dtype,
            "threads": threads,
            "kind": xnn_cost.conversion_kind(query.shape, query.perm),
            "us": round(xnn_cost.conversion_us(profile, query.shape, dtype, query.perm, threads), 4),
            "profile": profile.device,
        }

    calibration_help: ClassVar[str] = "XNNPACK conversion (transpose) costs on this CPU, timed by ETDump"

    def add_calibration_arguments(self, parser) -> None:
        """--out, the thread counts and the timed runs per probe."""
        parser.add_argument("--out", default="xnnpack_profile.json", help="profile file to write (default %(default)s)")
        parser.add_argument("--threads", type=int_list, help="thread counts to measure (default 1,2)")
        parser.add_argument("--rounds", type=int, default=60, help="timed runs per probe (default %(default)s)")
        parser.add_argument(
            "--passes",
            type=int,
            default=3,
            help="times every op probe is measured, the median kept (default %(default)s)",
        )
        parser.add_argument("--keep-from", help="a profile of this CPU (built-in name or file) whose other thread "
                            "counts are kept: only --threads are measured again")  # fmt: skip
        parser.add_argument("--only", choices=("streaming", "pads", "transpose-tiles", "thread-pool", "program-share"),
                            help="measure only the weight-streaming, the constant-pad or the transpose tile probes, "
                            "the thread pool's spin and wake-up, or the share a program's layers run beyond their "
                            "kernels, and put them in --keep-from's profile, at its speed (one measured before "
                            "them)")  # fmt: skip

    def calibration_settings(self, args) -> dict:
        """`calibrate`'s keywords from the flags `add_calibration_arguments` defined."""
        return {"threads": tuple(args.threads or (1, 2)), "rounds": args.rounds, "passes": args.passes,
                "keep_from": args.keep_from, "only": args.only}  # fmt: skip

    def calibrate(
        self,
        out,
        threads=(1, 2),
        rounds: int = 60,
        command: str = "",
        log=print,
        passes: int = 3,
        keep_from=None,
        only=None,
        **_,
    ) -> str:
        """Time this CPU's conversions (ETDump) at each thread count and write the profile to `out`; with
        `keep_from`, that profile with the measured thread counts replaced (`cost_models.xnnpack.remeasured`);
        with `only` ("streaming", "pads"), that profile with those probes measured again (`calibrate.add_probes`);
        with `only="transpose-tiles"`, that profile with the transpose tile probes added
        (`calibrate.add_transpose_tiles`); with `only="thread-pool"`, with the pool's spin and wake-up measured again
        (`calibrate.add_thread_pool`); with `only="program-share"`, with the share a program's layers run beyond
        their kernels measured again (`calibrate.add_program_share`)."""
        from cost_models import xnnpack as xnn_cost
        from layout_solver.targets.xnnpack.calibrate import calibrate

        out = Path(out)
        if not out.parent.is_dir():
            raise ValueError(f"cannot write {out}: {out.parent} is not a directory")
        if rounds < 3 or passes < 1 or not threads or any(t < 1 for t in threads):
            raise ValueError("--rounds at least 3, --passes at least 1, --threads positive integers")
        base = xnn_cost.load_profile(keep_from) if keep_from else None  # a bad name fails before the hour's work
        if base is not None and not xnn_cost.measured_on(base, xnn_cost.cpu_model()):
            raise ValueError(f"--keep-from {keep_from}: measured on {base.device}, not on this CPU")
        if only and base is None:
            raise ValueError(f"--only {only} adds to a profile: name it with --keep-from")
        if only == "transpose-tiles":
            from layout_solver.targets.xnnpack.calibrate import add_transpose_tiles

            profile = add_transpose_tiles(base, list(threads), rounds, command, log)
        elif only == "thread-pool":
            from layout_solver.targets.xnnpack.calibrate import add_thread_pool

            profile = add_thread_pool(base, list(threads), rounds, command, log)
        elif only == "program-share":
            from layout_solver.targets.xnnpack.calibrate import add_program_share

            profile = add_program_share(base, list(threads), rounds, passes, command, log)
        elif only:
            from layout_solver.targets.xnnpack.calibrate import add_probes

            profile = add_probes(base, only, list(threads), rounds, passes, command, log)
        else:
            profile = calibrate(list(threads), rounds=rounds, command=command, log=log, passes=passes)
            if base is not None:
                from cost_models.xnnpack_fit import refitted

                # The packing tiles are read at the fewest threads measured (`xnnpack_fit.packing`), which a
                # re-measured half may not hold: the merged profile's tiles and curves are fitted again.
                profile = refitted(xnn_cost.remeasured(base, profile))
        tmp = out.with_suffix(out.suffix + ".tmp")
        tmp.write_text(profile.model_dump_json(indent=1) + "\n")
        tmp.replace(out)
        return (f"profile for {profile.device}: {len(profile.measurements)} conversions and "
                f"{len(profile.op_measurements)} ops timed at {', '.join(map(str, threads))} threads -> {out}")  # fmt: skip

    def compare(self, module, inputs, name=None, time_limit=DEFAULT_TIME_LIMIT, service=None, **options):
        """Stock versus solver lowering on XNNPACK, both programs run and timed here."""
        from layout_solver.targets.xnnpack.measure import compare_xnnpack

        self.check_options(options)
        self.checked_options(options)
        return compare_xnnpack(
            module, inputs, name or type(module).__name__, self.name, self.quantized, time_limit, service,
            threads=tuple(options.get("threads") or DEFAULT_THREADS), cost_profile=options.get("cost_profile"),
            rounds=options.get("rounds") or 30, verify=options.get("verify") or "model",
        )  # fmt: skip

    def compare_methods(self, built, name=None, time_limit=DEFAULT_TIME_LIMIT, weights=None, **options):
        """Stock versus the stage, method by method, for a multi-method model lowered as one program (no joint
        side: `targets.xnnpack.methods`); every method of both programs run and timed here at the first of
        `threads`."""
        from layout_solver.compare.methods import compare_methods
        from layout_solver.targets.xnnpack.methods import methods_sides

        self.check_options(options, frozenset({"threads", "cost_profile", "rounds"}))
        self.checked_options(options)
        threads = (options.get("threads") or DEFAULT_THREADS)[0]
        return compare_methods(
            built,
            self.name,
            lambda b, w: methods_sides(
                b, w, time_limit, self.quantized, threads, options.get("cost_profile"), options.get("rounds") or 15
            ),
            name,
            weights,
        )
