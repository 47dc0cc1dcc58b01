"""Same input, same program: each model lowered in two processes, one of them beside a CPU hog on every core, and
the .pte bytes compared (stock's too: a difference stock shares is not the stage's). Targets: xnnpack,
xnnpack-int8, vulkan, ethos-u55-128, ethos-u85-256 (int8, the stage verified by Vela as by default). Each process
starts from empty probe and decision caches, so both lower for the first time (beside the probe answers shipped
with the package, as a user's first lowering is; the table counts the probes each Ethos-U lowering compiled and
those it read from the shipped file).

Run: .venv/bin/python -m benchmarks.zoo.determinism [--set zoo,outside | --models a,b]
        [--targets xnnpack,xnnpack-int8,vulkan,ethos-u55-128,ethos-u85-256] [--out benchmarks/results/determinism.md]

Each process lowers every model once per side and prints one JSON line per program (its sha256 and size); the
second runs while `os.cpu_count()` busy processes compete for the cores, so a layout decision that depends on
the wall clock (a solver budget cut short, a probe timed) shows as different bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import multiprocessing
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks import harness
from cost_models.store import CACHE_ENV

SIDES = ("stock", "solver")
REPO = Path(__file__).resolve().parents[2]  # `-m benchmarks...` from any working directory
ETHOS_U = ("ethos-u55-128", "ethos-u85-256")
TARGETS = ("xnnpack", "xnnpack-int8", "vulkan", *ETHOS_U)


def _lowerings() -> dict[str, dict]:
    """Per target, per side: a function (module, inputs) -> the program's bytes."""
    from layout_solver import vulkan, xnnpack
    from layout_solver.targets.vulkan.measure import lower_vulkan
    from layout_solver.targets.xnnpack.lowering import lower

    xnn = {side: (lambda m, i, c=context: lower(m, i, c).buffer)
           for side, context in (("stock", xnnpack.stock_layouts), ("solver", xnnpack.solver_layouts))}  # fmt: skip
    vk = {side: (lambda m, i, c=context: lower_vulkan(m, i, c)[0])
          for side, context in (("stock", vulkan.stock_layouts), ("solver", vulkan.solver_layouts))}  # fmt: skip
    ethos = {target: {side: functools.partial(_lower_ethos_u, target, side) for side in SIDES} for target in ETHOS_U}
    return {"xnnpack": xnn, "xnnpack-int8": xnn, "vulkan": vk, **ethos}


def _lower_ethos_u(target: str, side: str, module, inputs) -> bytes:
    """The int8 program for `target`, stock's or the stage's (verified by Vela, as by default). No artifacts folder:
    the compile spec carries its path into the program, so two processes' temporary folders would differ in the
    bytes for a reason that is not the lowering's (a user who dumps to one path gets one program)."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from layout_solver import arm
    from layout_solver.targets.ethos_u.measure import quantize

    spec = EthosUCompileSpec(target)
    quantized = quantize(module, inputs, spec)
    with arm.solver_layouts() if side == "solver" else contextlib.nullcontext():
        program = to_edge_transform_and_lower(quantized, partitioner=[EthosUPartitioner(spec)])
    return program.to_executorch().buffer


def lower_all(models: list[str], targets: list[str]) -> Iterator[dict]:
    """Every (model, target, side) lowered once in this process: its bytes' digest, or the error."""
    from layout_solver.targets.xnnpack.lowering import quantize
    from layout_solver.zoo.models import build

    unknown = sorted(set(targets) - set(TARGETS))
    if unknown:
        raise SystemExit(f"determinism: no lowering for {', '.join(unknown)} (targets: {', '.join(TARGETS)})")
    lowerings = _lowerings()
    for model in models:
        for target in targets:
            try:
                module, inputs = build(model)
                if target == "xnnpack-int8":
                    module = quantize(module, inputs)
            except Exception as exc:  # noqa: BLE001 - a model that does not build is reported, not fatal
                yield {"model": model, "target": target, "side": "build", "error": f"{type(exc).__name__}: {exc}"}
                continue
            for side in SIDES:
                record = {"model": model, "target": target, "side": side}
                probes = _probe_counts() if target in ETHOS_U else None
                try:
                    started = time.perf_counter()
                    buffer = lowerings[target][side](module, inputs)
                    record |= {"sha256": hashlib.sha256(buffer).hexdigest(), "bytes": len(buffer),
                               "seconds": round(time.perf_counter() - started, 2)}  # fmt: skip
                    if probes is not None:  # Vela probes compiled, and answered from the shipped file
                        record["probes"] = [after - before for before, after in zip(probes, _probe_counts())]
                except Exception as exc:  # noqa: BLE001 - a lowering that fails is the same failure twice or not
                    record["error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
                yield record


def _probe_counts() -> tuple[int, int]:
    """The process's Vela probe store so far: answers compiled, answers read from the shipped file."""
    from cost_models import vela

    store = vela.default_store()
    return store.misses, store.shipped_hits


def _spin(stop) -> None:
    while not stop.is_set():
        pass


@contextlib.contextmanager
def cpu_hog(processes: int | None = None) -> Iterator[None]:
    """Busy processes on every core while the block runs."""
    stop = multiprocessing.Event()
    hogs = [
        multiprocessing.Process(target=_spin, args=(stop,), daemon=True) for _ in range(processes or os.cpu_count())
    ]
    for hog in hogs:
        hog.start()
    try:
        yield
    finally:
        stop.set()
        for hog in hogs:
            hog.join(timeout=5)
            if hog.is_alive():
                hog.kill()


def run_process(models: list[str], targets: list[str], loaded: bool, log=print) -> dict[tuple, dict]:
    """One fresh process lowering every model (beside a CPU hog where `loaded`); its records by (model, target,
    side)."""
    command = [sys.executable, "-m", "benchmarks.zoo.determinism", "--child",
               "--models", ",".join(models), "--targets", ",".join(targets)]  # fmt: skip
    records: dict[tuple, dict] = {}
    with (
        tempfile.TemporaryDirectory() as cache,  # an empty probe and decision cache: each process lowers first time
        cpu_hog() if loaded else contextlib.nullcontext(),
        subprocess.Popen(
            command,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO,
            env={**os.environ, "LAYOUT_SOLVER_CACHE": cache, CACHE_ENV: str(Path(cache) / "vela")},
        ) as child,
    ):
        for line in child.stdout:
            if line.startswith("{"):
                record = json.loads(line)
                records[(record["model"], record["target"], record["side"])] = record
                log(f"  {'loaded' if loaded else 'quiet '} {record['model']} {record['target']} "
                    f"{record['side']}: {record.get('sha256', record.get('error', ''))[:16]}")  # fmt: skip
    if child.returncode:
        raise RuntimeError(f"the lowering process exited {child.returncode}")
    return records


def compare_runs(quiet: dict[tuple, dict], loaded: dict[tuple, dict]) -> list[dict]:
    """Per (model, target, side): whether both processes wrote the same bytes (None where either failed)."""
    rows = []
    for key in sorted(set(quiet) | set(loaded)):
        a, b = quiet.get(key, {}), loaded.get(key, {})
        same = a["sha256"] == b["sha256"] if "sha256" in a and "sha256" in b else None
        rows.append({"model": key[0], "target": key[1], "side": key[2], "same": same,
                     "error": a.get("error") or b.get("error") or "",
                     "seconds": (a.get("seconds"), b.get("seconds")), "probes": a.get("probes")})  # fmt: skip
    return rows


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--set", default="zoo,outside")
    parser.add_argument("--models", default="")
    parser.add_argument("--targets", default=",".join(TARGETS[:3]), help="default: the three without Vela")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    targets = args.targets.split(",")
    if args.models:
        models = args.models.split(",")
    else:
        from benchmarks.xnnpack.zoo import model_names

        models = model_names(args.set.split(","))
    if args.child:
        from layout_solver.lowering.quiet import quiet

        with quiet():
            for record in lower_all(models, targets):
                print(json.dumps(record), flush=True)
        return
    started = time.perf_counter()
    quiet = run_process(models, targets, loaded=False, log=lambda m: print(m, file=sys.stderr, flush=True))
    loaded = run_process(models, targets, loaded=True, log=lambda m: print(m, file=sys.stderr, flush=True))
    rows = compare_runs(quiet, loaded)
    lines = [f"Provenance: {harness.provenance()}", "",
             (f"{len(models)} models x {len(targets)} targets, each lowered in two processes (the second beside "
              f"{os.cpu_count()} busy processes), {time.perf_counter() - started:.0f} s in all."), ""]  # fmt: skip
    for side in SIDES:
        mine = [r for r in rows if r["side"] == side]
        differ = [r for r in mine if r["same"] is False]
        failed = [r for r in mine if r["same"] is None]
        lines.append(f"- {side}: {sum(1 for r in mine if r['same'])} of {len(mine)} programs byte-identical, "
                     f"{len(differ)} differ, {len(failed)} not lowered")  # fmt: skip
    lines.append("")
    lines += harness.table(["model", "target", "side", "same bytes", "lowering s (quiet, loaded)",
                            "Vela probes compiled / shipped (quiet)", "error"],
                           [[r["model"], r["target"], r["side"], {True: "yes", False: "NO", None: "-"}[r["same"]],
                             r["seconds"], " / ".join(map(str, r["probes"] or [])), r["error"][:120]]
                            for r in rows])  # fmt: skip
    harness.emit(lines, args.out)


if __name__ == "__main__":
    main()
