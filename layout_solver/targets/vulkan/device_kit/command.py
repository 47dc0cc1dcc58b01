"""`layout-solver device-kit build|read`: its arguments and what it does (the CLI registers it)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from layout_solver.core.problem import ProblemError
from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.targets.base import shape_list
from layout_solver.targets.vulkan.device_kit.build import MAX_KIT_MIB, SOLVER_OBJECTIVES

ModelsOf = Callable[[str], tuple[list[str], Callable]]  # --models -> (names, a picklable name -> (module, inputs))


def add_device_kit_parser(sub, models_of: ModelsOf) -> None:
    """The `device-kit` subcommand under `sub`; `models_of` turns --models into names and the model builder."""
    p = sub.add_parser("device-kit", help="Vulkan: lower programs here, time them on another machine's GPU")
    actions = p.add_subparsers(dest="action", required=True)
    k = actions.add_parser("build", help="lower stock's and the solver's programs and the probes into a kit folder")
    k.add_argument("--models", default="zoo,outside",
                   help="comma-separated model names as `zoo` takes them, `zoo` (the built-ins) and `outside` (the "
                   "outside set) (default %(default)s)")  # fmt: skip
    k.add_argument("--out", required=True, help="the kit's folder (new or empty)")
    k.add_argument("--objectives", default=",".join(SOLVER_OBJECTIVES),
                   help="the solver's sides: default, a built-in profile, or a profile file such as a kit's measured "
                   "results/profile.json (default %(default)s)")  # fmt: skip
    k.add_argument(
        "--vulkan-runtime", help="the Vulkan runtime plugin to carry (default $LAYOUT_SOLVER_VULKAN_RUNTIME)"
    )
    k.add_argument("--probe-ops", help="calibration probes' op classes, comma-separated ('' for none; default all)")
    k.add_argument("--probe-sizes", type=int, default=2, help="probe sizes per op class, 1-3 (default %(default)s)")
    k.add_argument("--no-transitions", action="store_true", help="no transition probes")
    k.add_argument("--probe-shapes", type=shape_list, help="probe these shapes instead of the built-in ones")
    k.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT)
    k.add_argument("--rounds", type=int, default=30, help="timed rounds per process (default %(default)s)")
    k.add_argument("--passes", type=int, default=3, help="timing processes per model (default %(default)s)")
    k.add_argument("--jobs", type=int, default=2, help="lowering processes (default %(default)s)")
    k.add_argument("--max-mib", type=float, default=MAX_KIT_MIB,
                   help="the largest part of the kit, one device call (default %(default)s)")  # fmt: skip
    k.set_defaults(func=cmd_device_kit, models_of=models_of)
    k = actions.add_parser("read", help="a kit's results as a stock / solver table and a measured profile")
    k.add_argument("kit", help="the kit's folder (or one part's), with results/ from run.sh")
    k.add_argument("--archive", nargs="+",
                   help="the results run.sh packed (ARCHIVE.tgz, or its parts .00 .01 ... in order)")  # fmt: skip
    k.add_argument("--out", help="also write the report (Markdown) here")
    k.add_argument("--profile-out", help="also write the measured profile here")
    k.add_argument("--with-programs", action="store_true",
                   help="fit the profile on the programs' own dispatches too, not on the probes alone")  # fmt: skip
    k.set_defaults(func=cmd_device_kit)


def cmd_device_kit(args: argparse.Namespace) -> int:
    """`layout-solver device-kit build|read`: programs lowered here, run on another machine's Vulkan GPU."""
    from layout_solver.targets.vulkan.device_kit import KitError, build, read
    from layout_solver.targets.vulkan.runtime import VulkanRuntimeUnavailable

    command = "layout-solver " + " ".join(args.argv)
    if args.action == "read":
        try:
            report, profile = read(args.kit, command, [Path(a) for a in args.archive or []], args.with_programs)
            if args.out:
                Path(args.out).write_text(report)
            if profile and args.profile_out:
                Path(args.profile_out).write_text(profile.read_text())
        except (ValueError, OSError) as exc:
            raise ProblemError(str(exc)) from exc
        print(report)
        return 0
    try:
        models, builder = args.models_of(args.models)
        probe_ops = None if args.probe_ops is None else [o.strip() for o in args.probe_ops.split(",") if o.strip()]
        build(
            models, builder, args.out, objectives=tuple(o.strip() for o in args.objectives.split(",") if o.strip()),
            runtime=args.vulkan_runtime, probe_ops=probe_ops, probe_sizes=args.probe_sizes,
            probe_transitions=not args.no_transitions, probe_shapes=args.probe_shapes, time_limit=args.time_limit,
            rounds=args.rounds, passes=args.passes, jobs=args.jobs, command=command, max_mib=args.max_mib,
        )  # fmt: skip
    except (KitError, VulkanRuntimeUnavailable, ValueError) as exc:
        raise ProblemError(str(exc)) from exc
    print(
        f"kit ready in {args.out}/part-*: copy each part to the GPU machine, run `bash PART/run.sh PART-results.tgz` "
        "there, bring the archive back and read it with `layout-solver device-kit read PART --archive ...`"
    )
    return 0
