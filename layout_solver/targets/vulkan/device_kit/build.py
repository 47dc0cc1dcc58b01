"""`layout-solver device-kit build`: lower stock's and the solver's programs of each model (and the calibration
probes) here, and pack them with a native runner that needs nothing the GPU machine lacks.

The runner (`runner.cpp`) is compiled here against the executorch wheel's own headers and runtime libraries
(`executorch/include`, `executorch/lib`), which link only libc, libm, libstdc++ and libgcc, and loads the Vulkan
plugin (libvkbackend.so) into that runtime as the Python side does. Why native rather than the wheel's Python
runtime there: the wheel's pybindings link libtorch of the torch they were built with (2.13 here); the device
machine has Python 3.12 with torch 2.11, so the cp312 wheel's pybindings would not load beside it, and the
plugin is built for this wheel's runtime, which the native runner carries.
"""

from __future__ import annotations

import ctypes.util
import hashlib
import importlib.metadata
import io
import logging
import lzma
import os
import re
import shutil
import subprocess
import tarfile
import time
import warnings
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

from layout_solver.targets.vulkan.device_kit.manifest import PAIRS, PLAN, PROBE_PLAN, Kit, ModelEntry, ProbeEntry, Side

HERE = Path(__file__).parent
MAX_KIT_MIB = 54.0  # one part per device call: 64 MiB carried in all, the repository's own files (7 MiB) included
PROBE_MAX_MIB = 1.0  # a probe program above this is left out (weights of wide linear chains): the kit must travel
# The wheel's runtime libraries the runner needs: the runtime (program, method, module, data loaders), its event
# tracer (ETDump), and the CPU kernels for any op a program leaves outside the delegate (registered on load).
WHEEL_LIBRARIES = (
    "libexecutorch.so",
    "libexecutorch_etdump.so",
    "libexecutorch_kernels_optimized.so",
    "libexecutorch_threadpool.so",
)
SOLVER_OBJECTIVES = ("default", "mobile-gpu", "lavapipe")
PROBE_BUNDLE = "probes"


class KitError(RuntimeError):
    """The kit cannot be built: the message says what is missing or too large."""


def _wheel() -> Path:
    spec = importlib.util.find_spec("executorch")
    if spec is None or not spec.submodule_search_locations:
        raise KitError("the executorch wheel is not installed")
    return Path(next(iter(spec.submodule_search_locations)))


def compile_runner(kit: Path) -> Path:
    """vk_runner in `kit`, linked against the wheel's libraries copied to `kit/lib` (found at $ORIGIN/lib)."""
    compiler = shutil.which(os.environ.get("CXX", "g++"))
    if compiler is None:
        raise KitError("building the kit's runner needs a C++17 compiler (g++; apt-get install g++) or $CXX")
    wheel = _wheel()
    lib = kit / "lib"
    lib.mkdir(parents=True, exist_ok=True)
    for name in WHEEL_LIBRARIES:
        shutil.copy2(wheel / "lib" / name, lib / name)
    include = wheel / "include"
    command = [
        compiler, "-std=c++17", "-O2", "-DET_EVENT_TRACER_ENABLED", "-DC10_USING_CUSTOM_GENERATED_MACROS",
        f"-I{include}", f"-I{include / 'executorch/runtime/core/portable_type/c10'}",
        "-ffile-prefix-map=" + str(include) + "=include",
        str(HERE / "runner.cpp"), "-o", str(kit / "vk_runner"), f"-L{lib}",
        # the kernels library is needed for what it registers when loaded, not for a symbol the runner calls
        "-Wl,--no-as-needed", "-lexecutorch", "-lexecutorch_etdump", "-lexecutorch_kernels_optimized", "-ldl",
        "-Wl,-rpath,$ORIGIN/lib",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode:
        raise KitError(f"compiling the runner failed: {done.stderr[-2000:]}")
    return kit / "vk_runner"


def _vulkan_loader() -> Path | None:
    """This machine's Vulkan loader (libvulkan.so.1), carried so a machine without one needs no package."""
    found = ctypes.util.find_library("vulkan")
    for candidate in (found, "/usr/lib/x86_64-linux-gnu/libvulkan.so.1", "/usr/lib64/libvulkan.so.1"):
        if candidate and Path(candidate).is_file():
            return Path(candidate).resolve()
    return None


def _key(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def _objective_label(objective: str) -> str:
    """A side's name: "default", a built-in profile's name, or a profile file's stem."""
    return objective if objective in SOLVER_OBJECTIVES else Path(objective).stem


def _lower_model(name: str, builder: Callable, objectives: tuple[str, ...], time_limit: float) -> dict:
    """In a worker: build `name` with `builder` (name -> (module, inputs)), run it eagerly, lower it stock's way
    (priced by every objective's profile) and the solver's under each objective. Returns plain data (bytes, numpy
    arrays, records)."""
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    from layout_solver.compare.outputs import eager_outputs
    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.vulkan.measure import lower_vulkan
    from layout_solver.vulkan import solver_layouts, stock_layouts

    try:
        module, inputs = builder(name)
        expected = eager_outputs(module, inputs)
        sides: dict[str, dict] = {}
        # Stock's program is the same bytes whatever prices it: priced once by the default set (the built-ins)
        # and once by each profile file.
        pricings = ["default"] + [o for o in objectives if _objective_label(o) not in SOLVER_OBJECTIVES]
        with quiet():
            for pricing in pricings:
                buffer, reports = lower_vulkan(module, inputs, lambda p=pricing: stock_layouts(p))
                record = sides.setdefault("stock", _record(buffer, reports))
                record["by_profile"] |= _priced(reports, pricing)
                if record["bytes"] != buffer:
                    raise RuntimeError("stock's lowering gave different programs from one lowering to the next")
            for objective in objectives:
                buffer, reports = lower_vulkan(module, inputs, lambda o=objective: solver_layouts(time_limit, o))
                record = _record(buffer, reports)
                record["by_profile"] |= _priced(reports, objective)
                sides[_objective_label(objective)] = record
        arrays = [t.detach().contiguous().numpy().copy() for t in inputs]
        return {"name": name, "inputs": arrays, "expected": expected, "sides": sides}
    except Exception as exc:  # noqa: BLE001 - a model that does not lower is that model's record, not the kit's end
        return {"name": name, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}


def _record(buffer: bytes, reports: list) -> dict:
    return {
        "bytes": buffer,
        "transitions": sum(len(r.transitions) for r in reports),
        "pass_seconds": round(sum(r.pass_seconds for r in reports), 4),
        "by_profile": {},
    }


def _priced(reports: list, objective: str) -> dict[str, float]:
    """The lowering's modelled microseconds by profile label: every profile of the default set, or the one the
    objective names."""
    if objective == "default":
        labels = dict.fromkeys(k for r in reports for k in r.modelled_us_by_profile)
        return {k: round(sum(r.modelled_us_by_profile.get(k, 0.0) for r in reports), 3) for k in labels}
    return {_objective_label(objective): round(sum(r.modelled_us for r in reports), 3)}


def build(
    models: list[str],
    builder: Callable,
    out: str | os.PathLike,
    objectives: tuple[str, ...] = SOLVER_OBJECTIVES,
    runtime: str | os.PathLike | None = None,
    probe_ops: list[str] | None = None,
    probe_sizes: int = 2,
    probe_transitions: bool = True,
    probe_shapes: list[tuple[int, ...]] | None = None,
    time_limit: float = 10.0,
    warmup: int = 5,
    rounds: int = 30,
    passes: int = 3,
    jobs: int = 2,
    command: str = "",
    max_mib: float = MAX_KIT_MIB,
    log: Callable[[str], None] = print,
) -> Kit:
    """Build a device kit of `models` in `out` (a new or empty folder) and return its manifest. `builder` makes a
    model from its name ((module, input tensors); a module-level function: it runs in worker processes), e.g.
    `layout_solver.zoo.models.build`.

    `objectives`: the solver's sides ("default", a built-in profile name, or a profile file, e.g. one a first
    kit measured). `probe_ops`: the calibration probes' op classes (None: all; [] none).
    """
    from layout_solver.targets.vulkan.calibrate import plan
    from layout_solver.targets.vulkan.probing import FLOAT_LABELS, PROBES, _lower_job
    from layout_solver.targets.vulkan.runtime import locate_runtime

    top = Path(out)
    if top.exists() and any(top.iterdir()):
        raise KitError(f"{top} is not empty: a kit is built in a new folder")
    unknown = sorted(set(probe_ops or []) - set(PROBES))
    if unknown:
        raise KitError(f"unknown probe op classes {unknown}; known: {', '.join(PROBES)}")
    for objective in objectives:
        if objective not in SOLVER_OBJECTIVES and not Path(objective).is_file():
            raise KitError(f"objective {objective!r} is neither {', '.join(SOLVER_OBJECTIVES)} nor a profile file")
    plugin = locate_runtime(runtime)
    start = time.perf_counter()
    kit = top / ".staging"  # everything, uncompressed; packed into parts at the end
    profile_files = _stage_runtime(kit, plugin, objectives)
    log(f"[device-kit] runner compiled, libraries copied ({time.perf_counter() - start:.0f} s)")

    stored: dict[str, str] = {}

    def store(buffer: bytes) -> tuple[str, str]:
        digest = hashlib.sha256(buffer).hexdigest()
        if digest not in stored:
            stored[digest] = f"programs/{digest[:16]}.pte"
            (kit / stored[digest]).write_bytes(buffer)
        return stored[digest], digest

    def said(line: str) -> None:
        log(f"[device-kit] {line} ({time.perf_counter() - start:.0f} s)")

    context = get_context("spawn")  # torch and executorch are not fork-safe once initialised
    with ProcessPoolExecutor(max_workers=max(1, jobs), mp_context=context) as pool:
        work = [pool.submit(_lower_model, name, builder, tuple(objectives), time_limit) for name in models]
        entries, lines = _write_models(kit, [w.result for w in work], store, said)
        probes, skipped, probe_lines = [], [], []
        if probe_ops != []:
            jobs_, planned = plan(
                probe_ops or list(PROBES), FLOAT_LABELS, probe_sizes, 4, probe_transitions, probe_shapes
            )
            probes, skipped, probe_lines = _write_probes(kit, pool.map(_lower_job, jobs_), jobs_, planned, store, said)

    manifest = Kit(
        built=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        command=command,
        executorch=importlib.metadata.version("executorch"),
        objectives=[_objective_label(o) for o in objectives],
        profile_files=profile_files,
        warmup=warmup,
        rounds=rounds,
        passes=passes,
        probe_warmup=2,
        probe_rounds=9,
        models=entries,
        probes=probes,
        probes_skipped=skipped,
    )
    parts = _pack(kit, top, manifest, lines, probe_lines, max_mib, jobs, log)
    shutil.rmtree(kit)
    sizes = ", ".join(f"{p.name} {_mib(p):.1f} MiB" for p in parts)
    log(
        f"[device-kit] {top}: {sum(map(len, lines.values()))} programs of {len(entries)} models, {len(probes)} probes "
        f"({len(stored)} distinct .pte files) in {len(parts)} part(s): {sizes}; built in "
        f"{time.perf_counter() - start:.0f} s"
    )
    return manifest


def _stage_runtime(kit: Path, plugin: Path, objectives) -> dict[str, str]:
    """The staging kit's folders, runner, libraries, plugin, Vulkan loader and profile files (label -> path)."""
    for sub in ("programs", "inputs", "expected", "lib", "profiles"):
        (kit / sub).mkdir(parents=True, exist_ok=True)
    compile_runner(kit)
    shutil.copy2(plugin, kit / "lib" / "libvkbackend.so")
    loader = _vulkan_loader()
    if loader is not None:
        shutil.copy2(loader, kit / "lib" / "libvulkan.so.1")
    profile_files = {}
    for objective in objectives:
        if objective not in SOLVER_OBJECTIVES:
            profile_files[_objective_label(objective)] = f"profiles/{Path(objective).name}"
            shutil.copy2(objective, kit / profile_files[_objective_label(objective)])
    return profile_files


def _write_models(kit: Path, results: list[Callable], store: Callable, said: Callable):
    """Each lowered model's inputs, eager outputs and programs in the staging kit, in the order asked:
    (manifest entries, plan lines by model key)."""
    import numpy as np

    entries: list[ModelEntry] = []
    lines: dict[str, list[tuple]] = {}  # model key -> (program, .pte, inputs) per side
    for k, result in enumerate(results, 1):
        done = result()
        key = _key(done["name"])
        if "error" in done:
            entries.append(
                ModelEntry(name=done["name"], key=key, inputs=[], expected=[], sides={}, error=done["error"])
            )
            said(f"{k}/{len(results)} {done['name']}: not lowered: {done['error'][:200]}")
            continue
        inputs = []
        for i, array in enumerate(done["inputs"]):
            inputs.append(f"inputs/{key}.in{i}.bin")
            (kit / inputs[-1]).write_bytes(np.ascontiguousarray(array).tobytes())
        expected = []
        for i, array in enumerate(done["expected"]):
            expected.append(f"expected/{key}.out{i}.npy")
            np.save(kit / expected[-1], array)
        sides = {}
        for side, record in done["sides"].items():
            pte, digest = store(record["bytes"])
            program = f"{key}~{side}"
            sides[side] = Side(
                program=program, pte=pte, sha256=digest, transitions=record["transitions"],
                modelled_us_by_profile=record["by_profile"], pass_seconds=record["pass_seconds"],
            )  # fmt: skip
            lines.setdefault(key, []).append((program, pte, inputs))
        entries.append(ModelEntry(name=done["name"], key=key, inputs=inputs, expected=expected, sides=sides))
        changed = sum(s.sha256 != sides["stock"].sha256 for n, s in sides.items() if n != "stock")
        said(f"{k}/{len(results)} {done['name']}: {len(sides) - 1} solver sides, {changed} differ from stock")
    return entries, lines


def _write_probes(kit: Path, lowered_jobs, jobs: list, planned: list, store: Callable, said: Callable):
    """The probe programs that lowered (and fit) in the staging kit: (probe entries, skipped, plan lines)."""
    skipped, probe_lines = [], []
    lowered: dict[str, str] = {}
    for k, (job, buffer, example) in enumerate(lowered_jobs, 1):
        if buffer is None:
            skipped.append(f"{job.name}: the registry refuses the pins")
        elif len(buffer) > PROBE_MAX_MIB * 2**20:
            skipped.append(f"{job.name}: {len(buffer) / 2**20:.1f} MiB (cap {PROBE_MAX_MIB} MiB)")
        else:
            program = f"probe{len(lowered):04d}"
            pte, _ = store(buffer)
            # One input per op class and shape: a probe's values only have to keep its chain finite.
            stem = f"inputs/probe-{job.op}-{'x'.join(map(str, job.shape))}"
            inputs = [f"{stem}.in{i}.bin" for i in range(len(example))]
            for path, tensor in zip(inputs, example):
                if not (kit / path).is_file():
                    (kit / path).write_bytes(tensor.contiguous().numpy().tobytes())
            probe_lines.append((program, pte, inputs))
            lowered[job.name] = program
        if k % 25 == 0 or k == len(jobs):
            said(f"probes lowered {k}/{len(jobs)}")
    probes = [
        ProbeEntry(kind=p.kind, key=p.key, shape=list(p.shape), program=lowered[p.program])
        for p in planned
        if p.program in lowered
    ]
    return probes, skipped, probe_lines


def _mib(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 2**20


# LZMA2 with a window wider than a model's programs: the programs of one model are the same weights around other
# layout decisions, so every copy after the first packs to almost nothing (resnet18's three: 134 MiB -> 40 MiB).
_XZ_FILTERS = [{"id": lzma.FILTER_LZMA2, "preset": 1, "dict_size": 192 * 2**20}]


def _packed(staging: Path, files: list[str]) -> bytes:
    """`files` (paths in `staging`) as one .tar.xz."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in files:
            info = tar.gettarinfo(str(staging / name), arcname=name)
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""  # the same bytes every build
            with open(staging / name, "rb") as handle:
                tar.addfile(info, handle)
    return lzma.compress(raw.getvalue(), format=lzma.FORMAT_XZ, filters=_XZ_FILTERS)


def _pack(
    staging: Path,
    top: Path,
    manifest: Kit,
    lines: dict[str, list[tuple]],
    probe_lines: list[tuple],
    max_mib: float,
    jobs: int,
    log: Callable[[str], None],
) -> list[Path]:
    """The kit as parts `top/part-1`, `part-2`, ... of at most `max_mib` each: each a whole kit (runner, libraries,
    run.sh) holding some models' programs (and, in the first, the probes), packed per model as .tar.xz. Each part
    travels in one device call and runs there by itself."""
    from concurrent.futures import ThreadPoolExecutor

    bundles: dict[str, list[str]] = {}  # bundle name -> files
    for entry in manifest.models:
        if entry.error is None:
            bundles[entry.key] = sorted({s.pte for s in entry.sides.values()}) + entry.inputs
    if probe_lines:
        bundles[PROBE_BUNDLE] = sorted({f for _, pte, inputs in probe_lines for f in (pte, *inputs)})
    libraries = sorted(f"lib/{f.name}" for f in (staging / "lib").iterdir())
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:  # lzma lets go of the GIL while it compresses
        packed_libs = pool.submit(_packed, staging, libraries)
        packed = dict(zip(bundles, pool.map(lambda files: _packed(staging, files), bundles.values())))
        packed_libs = packed_libs.result()
    fixed = (len(packed_libs) + (staging / "vk_runner").stat().st_size + (HERE / "run.sh").stat().st_size) / 2**20
    fixed += sum(f.stat().st_size for f in (staging / "profiles").iterdir()) / 2**20 + 0.5  # manifest and plans
    expected_mib = {e.key: sum((staging / x).stat().st_size for x in e.expected) / 2**20 for e in manifest.models}
    room = max_mib - fixed
    sized = {name: len(data) / 2**20 + expected_mib.get(name, 0.0) for name, data in packed.items()}
    too_big = [f"{name} ({size:.1f} MiB)" for name, size in sized.items() if size > room]
    if too_big:
        raise KitError(
            f"{', '.join(too_big)} packed exceed what one part holds ({room:.1f} MiB of {max_mib} MiB beside the "
            "runner and libraries): leave them out or raise --max-mib"
        )
    # First fit, largest first: as few parts (device calls) as the sizes allow.
    parts: list[list[str]] = []
    free: list[float] = []
    for name in sorted(sized, key=lambda n: (-sized[n], n)):
        slot = next((i for i, f in enumerate(free) if f >= sized[name]), None)
        if slot is None:
            parts.append([])
            free.append(room)
            slot = len(parts) - 1
        parts[slot].append(name)
        free[slot] -= sized[name]
    if not parts:
        parts = [[]]
    folders = []
    for number, names in enumerate(parts, 1):
        part = top / f"part-{number}"
        folders.append(part)
        (part / "bundles").mkdir(parents=True)
        (part / "expected").mkdir()
        (part / "lib.tar.xz").write_bytes(packed_libs)
        shutil.copy2(staging / "vk_runner", part / "vk_runner")
        shutil.copy2(HERE / "run.sh", part / "run.sh")
        (part / "run.sh").chmod(0o755)
        shutil.copytree(staging / "profiles", part / "profiles")
        mine = [e for e in manifest.models if e.key in names]
        for name in names:
            (part / "bundles" / f"{name}.tar.xz").write_bytes(packed[name])
        for entry in mine:
            for path in entry.expected:
                shutil.copy2(staging / path, part / path)
        failed = [e for e in manifest.models if e.error is not None] if number == 1 else []
        has_probes = PROBE_BUNDLE in names
        subset = manifest.model_copy(
            update={
                "models": [e for e in manifest.models if e in mine or e in failed],
                "probes": manifest.probes if has_probes else [],
                "probes_skipped": manifest.probes_skipped if has_probes else [],
                "part": number,
                "parts": len(parts),
            }
        )
        (part / "kit.json").write_text(subset.model_dump_json(indent=1) + "\n")
        (part / PLAN).write_text(_plan_text(line for e in mine for line in lines[e.key]))
        (part / PAIRS).write_text(
            "".join("\t".join([e.key, *(s.program for s in e.sides.values())]) + "\n" for e in mine)
        )
        (part / PROBE_PLAN).write_text(_plan_text(probe_lines) if has_probes else "")
        (part / "settings.sh").write_text(
            f"WARMUP={manifest.warmup}\nROUNDS={manifest.rounds}\nPASSES={manifest.passes}\n"
            f"PROBE_WARMUP={manifest.probe_warmup}\nPROBE_ROUNDS={manifest.probe_rounds}\n"
        )
        log(f"[device-kit] {part.name}: {len(mine)} models{', the probes' if has_probes else ''}, {_mib(part):.1f} MiB")
    return folders


def _plan_text(lines) -> str:
    """Plan lines (program, .pte, inputs) as vk_runner reads them: tab-separated, the method, inputs by commas."""
    return "".join("\t".join([name, pte, "forward", ",".join(inputs)]) + "\n" for name, pte, inputs in lines)
