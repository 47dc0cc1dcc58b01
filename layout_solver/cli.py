"""`layout-solver` command line."""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import shlex
import sys
import tempfile
from importlib import resources
from pathlib import Path

from pydantic import ValidationError

from layout_solver.core.problem import InfeasibleError, Problem, ProblemError, Solution, parse_problem
from layout_solver.core.solve import DEFAULT_TIME_LIMIT, check_time_limit, solve
from layout_solver.core.summary import format_summary
from layout_solver.service.command import cmd_serve
from layout_solver.targets import (
    DEFAULT_ETHOS_U,
    DEFAULT_ZOO_TARGETS,
    TARGETS,
    calibrated_targets,
    get_target,
    stray_options,
    stray_options_message,
    target_names,
)
from layout_solver.targets.base import int_list
from layout_solver.targets.vulkan.device_kit.command import add_device_kit_parser

EXIT_BAD_INPUT = 2
EXIT_INFEASIBLE = 3


def bundled_example(name: str = "resnet_like") -> Path:
    """The path of a problem shipped with the package (`layout_solver/data/examples/NAME.json`)."""
    return Path(str(resources.files("layout_solver") / "data" / "examples" / f"{name}.json"))


def load_problem(path: Path) -> Problem:
    """The problem in `path` ("-": stdin), or a ProblemError naming the file and the defect."""
    try:
        raw = sys.stdin.buffer.read() if str(path) == "-" else path.read_bytes()
    except OSError as exc:
        raise ProblemError(f"cannot read {path}: {exc.strerror}") from exc
    return parse_problem(raw, "stdin" if str(path) == "-" else str(path))


def writable_target(path: str, *inputs: str) -> Path:
    """`path` as an output file, checked before any work: its directory exists and is writable, and it
    is not one of the `inputs` (nothing the user gave is overwritten)."""
    target = Path(path)
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.is_dir():
        raise ProblemError(f"cannot write {path}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
        raise ProblemError(f"cannot write {path}: permission denied")
    if target.is_dir():
        raise ProblemError(f"cannot write {path}: it is a directory")
    for given in inputs:
        if given != "-" and Path(given).exists() and target.exists() and target.samefile(given):
            raise ProblemError(f"refusing to overwrite the input {given} with the output")
    return target


def write_atomically(target: Path, text: str) -> None:
    """Write through a temporary file in the same directory: a reader never sees half a file."""
    fd, tmp = tempfile.mkstemp(dir=target.parent if str(target.parent) else ".", prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def cmd_solve(args: argparse.Namespace) -> int:
    """`layout-solver solve FILE...`: solve each problem file and print (or write) its solution; returns the exit
    code.
    """
    check_time_limit(args.time_limit)
    if args.workers is not None and args.workers < 1:
        raise ProblemError(f"--workers must be at least 1, got {args.workers}")
    out = writable_target(args.out, args.problem) if args.out else None
    trace_file = writable_target(args.trace, args.problem, *([args.out] if args.out else [])) if args.trace else None
    problem = load_problem(Path(args.problem))
    trace: list | None = [] if trace_file else None
    solution = solve(problem, time_limit=args.time_limit, workers=args.workers or os.cpu_count() or 1, trace=trace,
                     deterministic=not args.wall_clock, work_limit=args.work_limit)  # fmt: skip
    if out is not None:
        write_atomically(out, solution.model_dump_json(indent=1))
    if trace_file is not None:
        rows = ["seconds,phase,piece_vars,incumbent,bound"] + [
            f"{r.seconds:.4f},{r.phase},{r.piece_vars},{r.incumbent:.6g},{r.bound:.6g}" for r in trace
        ]
        write_atomically(trace_file, "\n".join(rows) + "\n")
    if args.json:
        print(solution.model_dump_json())
    else:
        print(format_summary(problem, solution))
        if out is not None:
            print(f"solution written to {out}")
    return 0


def cmd_schema(args: argparse.Namespace) -> int:
    """`layout-solver schema [problem|solution]`: print the JSON Schema of the problem and solution formats."""
    schemas = {"problem": Problem.model_json_schema(), "solution": Solution.model_json_schema()}
    print(json.dumps(schemas if args.which == "all" else schemas[args.which], indent=1))
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """`layout-solver demo`: solve the bundled example problems and print their summaries."""
    for name in ("resnet_like", "transformer_like"):
        path = bundled_example(name)
        problem = load_problem(path)
        solution = solve(problem, time_limit=args.time_limit)
        print(f"== {path.name}")
        print(format_summary(problem, solution, top=5))
        print()
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    """`layout-solver compare MODEL --target T`: stock versus solver on one model; returns 1 if the solver side
    failed (or crashed on the device).
    """
    from layout_solver.targets.vulkan.runtime import VulkanRuntimeUnavailable
    from layout_solver.zoo.runner import compare_named

    target = get_target(args.target)
    options = _target_options([target], args)[target.name]
    from layout_solver.zoo.models import ModelError, build
    from layout_solver.zoo.multi_method import MULTI_METHOD_ZOO

    check_time_limit(args.time_limit)
    if args.model in MULTI_METHOD_ZOO:
        return _compare_methods(args, options)
    if args.method_weights:
        raise ProblemError(f"--method-weights is for multi-method models ({', '.join(MULTI_METHOD_ZOO)})")
    try:
        build(args.model)  # a broken model is the user's error: said before any lowering
        comparison = compare_named(args.model, args.target, time_limit=args.time_limit, service=args.service, **options)
    except ModelError as exc:
        raise ProblemError(str(exc)) from exc
    except VulkanRuntimeUnavailable as exc:
        raise ProblemError(str(exc)) from exc
    _print_comparison(comparison, args.json, {side: {"transition_list", "traceback"} for side in ("stock", "solver")})
    return 1 if target.failed(comparison, options) else 0


def cmd_explain(args: argparse.Namespace) -> int:
    """`layout-solver explain MODEL --target T`: stock and solver once, each side's program as Model Explorer files
    (graphs with layouts, conversions and per-op prices) in --out; with --open, a loopback Model Explorer on them."""
    from layout_solver.lowering.quiet import output_to
    from layout_solver.zoo.models import ModelError, build
    from layout_solver.zoo.runner import explain_dir, explain_named

    target = get_target(args.target)
    options = _target_options([target], args)[target.name]
    check_time_limit(args.time_limit)
    out = Path(args.out) if args.out else explain_dir(Path("zoo-out"), args.model, target.name)
    out.mkdir(parents=True, exist_ok=True)
    log = out / "third_party.log"  # what the lowering's libraries print, not the console's
    try:
        build(args.model)  # a broken model is the user's error: said before any lowering
        with output_to(log):
            explanation = explain_named(args.model, target.name, out, time_limit=args.time_limit,
                                        service=args.service, **options)  # fmt: skip
    except (ModelError, ValueError) as exc:
        raise ProblemError(str(exc)) from exc
    print(explanation.summary())
    print(f"Model Explorer files in {out} (explain.json lists them); the libraries' own output in {log}")
    if args.open:
        from layout_solver.explain import model_explorer

        model_explorer.serve_until_interrupted(explanation.files, args.port)
    return 0


def _compare_methods(args: argparse.Namespace, options: dict) -> int:
    """`compare` on a built-in multi-method model: stock, per-method and joint solver, per method."""
    from layout_solver.targets.vulkan.runtime import VulkanRuntimeUnavailable
    from layout_solver.zoo.runner import compare_named

    if options.get("input_order", "nchw") != "nchw":
        raise ProblemError("--input-order applies to single-method models")
    try:
        comparison = compare_named(
            args.model, args.target, time_limit=args.time_limit, weights=args.method_weights, **options
        )
    except VulkanRuntimeUnavailable as exc:
        raise ProblemError(str(exc)) from exc
    _print_comparison(comparison, args.json, {side: {"traceback"} for side in ("stock", "per_method", "joint")})
    return (
        1
        if any(getattr(comparison, side) and getattr(comparison, side).error for side in ("per_method", "joint"))
        else 0
    )


def _print_comparison(comparison, as_json: bool, exclude: dict) -> None:
    """The table (on stderr with --json), then with --json one JSON line of the fields measured minus `exclude`."""
    from layout_solver.compare import format_table

    print(format_table(comparison), file=sys.stderr if as_json else sys.stdout)
    if as_json:
        print(json.dumps(comparison.model_dump(mode="json", exclude_unset=True, exclude=exclude)))


def _method_weights(text: str) -> dict[str, float]:
    """`decode=128,prefill=1` -> {"decode": 128.0, "prefill": 1.0}; every weight a positive number."""
    weights = {}
    for item in text.split(","):
        name, _, value = item.partition("=")
        try:
            weights[name.strip()] = float(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected method=weight pairs, got {item!r}") from None
        if not name.strip() or not math.isfinite(weights[name.strip()]) or weights[name.strip()] <= 0:
            raise argparse.ArgumentTypeError(f"{item!r}: a method name and a positive finite weight")
    return weights


def _target_options(targets: list, args: argparse.Namespace) -> dict[str, dict]:
    """Each target's comparison options from the command line, checked before any lowering: a flag none of
    `targets` takes is an error naming the targets that do."""
    given = {
        "input_order": args.input_order if args.input_order != "nchw" else None,
        "execute": args.execute,
        "runtime": args.vulkan_runtime,
        "cost_profile": args.cost_profile,
        "threads": args.threads,
        "verify": args.verify,
    }
    stray = stray_options(given, set().union(*(t.options for t in targets)))
    try:
        if stray:
            raise ValueError(stray_options_message(stray))
        return {t.name: t.take_options(given) for t in targets}
    except ValueError as exc:
        raise ProblemError(str(exc)) from exc


def cmd_cost(args: argparse.Namespace) -> int:
    """`layout-solver cost`: price one transpose or transition with the target's cost model (cost_models.query)."""
    from cost_models.query import TransposeQuery

    fields = {
        "target": args.target,
        "shape": list(args.shape),
        "perm": list(args.perm) if args.perm else None,
        "dtype": args.dtype,
        "form": args.form,
        "exact": args.exact,
        "src": args.src,
        "dst": args.dst,
        "cost_profile": args.cost_profile,
        "threads": args.threads,
    }
    target = get_target(args.target)
    own = {"src", "dst", "cost_profile", "threads"}  # fields of some target's query alone
    try:
        target.check_options({k: fields[k] for k in own}, accepted=target.query_options)
    except ValueError as exc:
        raise ProblemError(str(exc)) from exc
    fields = {k: v for k, v in fields.items() if k not in own or k in target.query_options}
    try:
        result = target.price_transpose(
            TransposeQuery.model_validate({k: v for k, v in fields.items() if v is not None})
        )
    except ValidationError as exc:
        raise ProblemError("; ".join(e["msg"].removeprefix("Value error, ") for e in exc.errors())) from exc
    except ValueError as exc:
        raise ProblemError(str(exc)) from exc
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:16} {value}")
    return 0


def _source_models(source: str) -> list[str]:
    """The model names of a `zoo --source`: transformers[:MODALITY] is the transformers catalog."""
    kind, _, modality = source.partition(":")
    if kind != "transformers":
        raise ValueError(f"unknown --source {source!r}: transformers[:vision|audio|text]")
    if importlib.util.find_spec("transformers") is None:
        raise ValueError("--source transformers needs transformers: pip install 'layout-solver[zoo]'")
    from layout_solver.zoo import catalog

    return catalog.default_names(modality or None)


def cmd_zoo(args: argparse.Namespace) -> int:
    """`layout-solver zoo`: every model x target, stock versus solver, written as CSV, Markdown and plots."""
    from layout_solver.zoo.models import ZOO, expand_names
    from layout_solver.zoo.multi_method import MULTI_METHOD_ZOO
    from layout_solver.zoo.runner import run_zoo

    targets = [t.strip() for t in args.target.split(",") if t.strip()]
    unknown = [t for t in targets if t not in TARGETS]
    try:
        models = expand_names([m.strip() for m in args.models.split(",")]) if args.models else []
        models += _source_models(args.source) if args.source else []
    except ValueError as exc:  # ModelError: a glob that matches nothing; an unknown source
        raise ProblemError(str(exc)) from exc
    models = models or list(ZOO)
    missing = [
        m for m in models if m not in ZOO and m not in MULTI_METHOD_ZOO and ":" not in m and not m.endswith(".pt2")
    ]
    if unknown or missing:
        raise ProblemError(
            f"unknown targets {unknown} / models {missing}; models: {', '.join([*ZOO, *MULTI_METHOD_ZOO])}"
        )
    needed = ["tqdm", "matplotlib"] + (["ray"] if args.executor == "ray" else [])
    absent = [name for name in needed if importlib.util.find_spec(name) is None]
    if absent:
        raise ProblemError(f"the zoo needs {', '.join(absent)}: pip install 'layout-solver[zoo]'")
    out = Path(args.out)
    options = _target_options([get_target(t) for t in targets], args)
    for name in targets:
        if args.service:
            options[name]["service"] = args.service
    timed = [t for t in targets if get_target(t).times_programs]
    if timed and args.jobs > 1:
        print(
            f"layout-solver: {', '.join(timed)} time both programs on this CPU; with --jobs > 1 another job shares the "
            "cores while they run: use --jobs 1 for run times you compare",
            file=sys.stderr,
        )
    if any(o.get("execute") for o in options.values()):  # programs run on a device: it must be there
        from layout_solver.targets.vulkan.runtime import VulkanRuntimeUnavailable, probe

        try:
            probe(args.vulkan_runtime)
        except VulkanRuntimeUnavailable as exc:
            raise ProblemError(str(exc)) from exc
        if args.jobs > 1:
            print(
                "layout-solver: --execute with --jobs > 1 times programs while other jobs share the cores; "
                "use --jobs 1 for run times you compare",
                file=sys.stderr,
            )
    results = run_zoo(
        models, targets, out, jobs=args.jobs, executor=args.executor, address=args.address, options=options,
        prune=args.prune, archive=args.archive, explain=args.explain,
    )  # fmt: skip
    from layout_solver.zoo.report import console_summary

    print(console_summary(results, out))
    return 0 if all(r["status"] == "ok" for r in results) else 1


def _add_vulkan_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--execute",
        action="store_true",
        help="Vulkan: run stock and solver programs on the Vulkan device against eager, and time them",
    )
    p.add_argument(
        "--vulkan-runtime", help="Vulkan: the runtime plugin libvkbackend.so (default $LAYOUT_SOLVER_VULKAN_RUNTIME)"
    )
    p.add_argument(
        "--cost-profile",
        help="Vulkan: cost profile, a built-in name (mobile-gpu, lavapipe) or a file written by `calibrate "
        "vulkan`: the solver takes its optimum. Default: every profile (the built-ins and the files in "
        "$LAYOUT_SOLVER_VULKAN_PROFILES), and no change any of them prices dearer than stock's layout, "
        "nor one whose saving a measured profile cannot resolve",
    )


def _add_xnnpack_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--threads",
        type=int_list,
        help="XNNPACK: thread counts to time both programs at, e.g. 1,2 (default 1,2; the first also prices the stage)",
    )
    p.add_argument(
        "--verify",
        choices=["model", "run"],
        help="XNNPACK: model (default): each delegate keeps stock's layout unless the profile prices the "
        "stage's cheaper; run: also time both programs during the lowering and keep the faster",
    )


def _add_ethos_u_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--input-order",
        choices=["nchw", "nhwc"],
        default="nchw",
        help="Ethos-U: the graph-input contract; nhwc when the application feeds 4-D inputs "
        "channels-last (camera frames usually are), so no input transpose is needed "
        "(default %(default)s, the delegate's identity contract)",
    )


def _add_service_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--service",
        help="solve on this layout-solver service (http://host:port; default "
        "$LAYOUT_SOLVER_SERVICE, else in-process); falls back in-process and says so",
    )


def cmd_calibrate(args: argparse.Namespace) -> int:
    """`layout-solver calibrate TARGET`: measure the present device's costs for the target and write them."""
    target = get_target(args.kind)
    settings = target.calibration_settings(args)
    settings.update(command=shlex.join(["layout-solver", *args.argv]),
                    log=lambda line: print(line, file=sys.stderr, flush=True))  # fmt: skip
    try:
        print(target.calibrate(args.out, **settings))
    except ValueError as exc:
        raise ProblemError(str(exc)) from exc
    return 0


def _kit_models(text: str) -> tuple[list[str], object]:
    """`device-kit build --models`: the names (`zoo`, `outside` and anything `zoo` takes) and the zoo's builder."""
    from layout_solver.zoo.models import build, expand_names

    return expand_names([m.strip() for m in text.split(",") if m.strip()]), build


def build_parser() -> argparse.ArgumentParser:
    """The argparse parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="layout-solver", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("solve", help="solve a problem snapshot (JSON)")
    p.add_argument("problem", help="PROBLEM.json, or - for stdin")
    p.add_argument(
        "--time-limit",
        type=float,
        default=DEFAULT_TIME_LIMIT,
        help="seconds, a positive finite number (default %(default)s); the answer comes within it "
        "plus the time to check it (well under a second below 10k ops)",
    )
    p.add_argument("--workers", type=int, help="solver threads for wide pieces (default: all cores)")
    p.add_argument("--work-limit", type=float, default=None,
                   help="the search's work budget in units the engines count themselves (default: 0.25 per second "
                   "of --time-limit): the same answer on any machine under any load; the time limit is then a "
                   "safety net")  # fmt: skip
    p.add_argument("--wall-clock", action="store_true",
                   help="stop the search at --time-limit itself (more search on a fast machine, but the answer "
                   "may then depend on the machine's load)")  # fmt: skip
    p.add_argument("--json", action="store_true", help="print the solution as one JSON object")
    p.add_argument("--out", help="write the solution JSON here (checked before solving, written atomically)")
    p.add_argument("--trace", help="write incumbent and bound over time here (CSV)")
    p.set_defaults(func=cmd_solve)
    p = sub.add_parser("schema", help="print the JSON Schema of problems and solutions")
    p.add_argument("which", nargs="?", choices=["problem", "solution", "all"], default="all")
    p.set_defaults(func=cmd_schema)
    p = sub.add_parser("compare", help="lower a model with the stock pipeline and with the solver, side by side")
    p.add_argument(
        "model", help="built-in zoo name (multi-method: decoder_kv, convnext_two_res) or path/to/file.py:factory"
    )
    p.add_argument("--target", choices=target_names(), required=True, metavar="TARGET",
                   help="vulkan, xnnpack, xnnpack-int8, tosa-int or an Ethos-U configuration: "
                   + ", ".join(target_names("ethos-u")))  # fmt: skip
    p.add_argument(
        "--method-weights",
        type=_method_weights,
        help="multi-method models: how often each method runs, e.g. decode=128,prefill=1 (default: the model's own)",
    )
    p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT)
    p.add_argument("--json", action="store_true", help="last line of stdout: one JSON object")
    _add_service_argument(p)
    _add_vulkan_arguments(p)
    _add_ethos_u_arguments(p)
    _add_xnnpack_arguments(p)
    p.set_defaults(func=cmd_compare)
    p = sub.add_parser("explain", help="draw stock's and the solver's layouts as Model Explorer files")
    p.add_argument("model", help="built-in zoo name, path/to/file.py:factory, model.pt2 or transformers:NAME")
    p.add_argument("--target", choices=target_names(), required=True, metavar="TARGET",
                   help="vulkan, xnnpack, xnnpack-int8 or an Ethos-U configuration")  # fmt: skip
    p.add_argument("--out", help="directory for the files (default zoo-out/explain/MODEL-TARGET)")
    p.add_argument("--open", action="store_true", help="serve Model Explorer on loopback and print the addresses")
    p.add_argument("--port", type=int, default=0, help="--open: the server's port (default: a free one)")
    p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT)
    _add_service_argument(p)
    _add_vulkan_arguments(p)
    _add_ethos_u_arguments(p)
    _add_xnnpack_arguments(p)
    p.set_defaults(func=cmd_explain)
    p = sub.add_parser("cost", help="price one layout change with a target's cost model")
    kinds = p.add_subparsers(dest="kind", required=True)
    t = kinds.add_parser("transpose", help="Ethos-U55 or XNNPACK transpose, or Vulkan transition (--src/--dst)")
    t.add_argument("--target", choices=target_names(), default=DEFAULT_ETHOS_U, metavar="TARGET",
                   help="vulkan or an Ethos-U configuration (default %(default)s)")  # fmt: skip
    t.add_argument("--shape", type=int_list, required=True)
    t.add_argument("--perm", type=int_list, help="Ethos-U55: the permutation")
    t.add_argument("--src", help="Vulkan: source representation (default TEXTURE_3D:TENSOR_CHANNELS_PACKED)")
    t.add_argument("--dst", help="Vulkan: target representation (default TEXTURE_3D:TENSOR_WIDTH_PACKED)")
    t.add_argument("--dtype", help="default int8 (Ethos-U55), float32 (Vulkan)")
    t.add_argument(
        "--form",
        choices=["cheapest", "as_given"],
        default="cheapest",
        help="Ethos-U55: price the cheaper of the transpose and its canonical form, or exactly as given",
    )
    t.add_argument("--exact", action="store_true", help="also ask Vela (cached on disk)")
    t.add_argument(
        "--cost-profile",
        help="Vulkan, XNNPACK: built-in profile name (mobile-gpu, lavapipe; ci-x86, ci-x86-xeon, host: the one measured on this CPU) or profile file",
    )
    t.add_argument("--threads", type=int, help="XNNPACK: the thread count the program runs with (default 1)")
    t.add_argument("--json", action="store_true")
    t.set_defaults(func=cmd_cost)
    p = sub.add_parser("zoo", help="stock versus solver on many models and targets, in parallel, resumable")
    p.add_argument("--target", default=",".join(DEFAULT_ZOO_TARGETS),
                   help="comma-separated targets (default %(default)s)")  # fmt: skip
    p.add_argument(
        "--models",
        help="comma-separated zoo names, path.py:factory, saved programs (model.pt2, 'DIR/*.pt2'), "
        "transformers:NAME[/TASK] (the catalog) or generated:SEED / generated:A-B (seeded random Arm test graphs; "
        "default: the whole zoo)",
    )
    p.add_argument(
        "--source",
        help="transformers[:vision|audio|text]: every architecture of the installed transformers' catalog (of one "
        "modality), added to --models",
    )
    p.add_argument("--jobs", type=int, default=2, help="worker processes (default %(default)s)")
    p.add_argument("--executor", choices=["local", "ray"], default="local")
    p.add_argument("--address", help="with --executor ray: join this cluster instead of starting one")
    p.add_argument("--out", default="zoo-out", help="output directory (default %(default)s)")
    p.add_argument(
        "--prune",
        action="store_true",
        help="after the run, delete the results in OUT/cache this run did not use (other code, tools, models or "
        "targets)",
    )
    p.add_argument("--explain", action="store_true",
                   help="draw both sides of every model as Model Explorer files in OUT/explain (see `explain`)")  # fmt: skip
    p.add_argument(
        "--archive",
        action="store_true",
        help="after the run, write OUT/cache as one compressed file, OUT/cache.jsonl.gz (what a repository keeps; "
        "a later run with the same OUT reads it as its cache)",
    )
    _add_service_argument(p)
    _add_vulkan_arguments(p)
    _add_ethos_u_arguments(p)
    _add_xnnpack_arguments(p)
    p.set_defaults(func=cmd_zoo)
    p = sub.add_parser("calibrate", help="measure a device's cost profile")
    kinds = p.add_subparsers(dest="kind", required=True)
    for target in calibrated_targets():  # each target that measures a cost profile says its own flags
        c = kinds.add_parser(target.name, help=target.calibration_help)
        target.add_calibration_arguments(c)
        c.set_defaults(func=cmd_calibrate)
    add_device_kit_parser(sub, _kit_models)
    p = sub.add_parser("serve", help="run the solver as an HTTP/JSON service (POST /v1/solve; docs at /docs)")
    p.add_argument("--host", default="127.0.0.1", help="interface to bind (default %(default)s: this machine only)")
    p.add_argument("--port", type=int, default=8731, help="default %(default)s; 0 picks a free port")
    p.add_argument("--workers", type=int, help="solver processes (default: all cores)")
    p.add_argument("--cache", help="solution cache directory (default ~/.cache/layout-solver/solutions)")
    p.add_argument("--cache-size-mb", type=float, default=1024, help="cache bound (default %(default)s MiB)")
    p.add_argument("--max-body-mb", type=float, default=64, help="request body limit (default %(default)s MiB)")
    p.add_argument("--token", help="bearer token every route but /healthz requires (default $LAYOUT_SOLVER_TOKEN)")
    p.add_argument("--log-level", default="warning", choices=["critical", "error", "warning", "info", "debug"])
    p.set_defaults(func=cmd_serve)
    p = sub.add_parser("demo", help="solve the bundled example problems")
    p.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT)
    p.set_defaults(func=cmd_demo)
    return parser


def main(argv: list[str] | None = None) -> int:
    """The CLI entry point: parse `argv`, run the subcommand, turn bad input into a message and exit code 2 (3:
    infeasible).
    """
    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what the user typed, for provenance
    try:
        return args.func(args)
    except InfeasibleError as exc:
        print(f"layout-solver: {exc}", file=sys.stderr)
        return EXIT_INFEASIBLE
    except ProblemError as exc:
        print(f"layout-solver: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except BrokenPipeError:  # `layout-solver ... | head`: the reader left; not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("layout-solver: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
