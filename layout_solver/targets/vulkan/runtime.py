"""Run lowered Vulkan programs on a real Vulkan device, each in a child process.

The device is the judge of a lowering: a program that the validator accepts can
still crash the driver or compute something else. ExecuTorch's Vulkan delegate
runtime is not part of the executorch wheel; it is a shared library built from
`backends/vulkan/runtime/` that registers `VulkanBackend` when it is loaded
into a process that has already loaded the wheel's pybindings. Where it lives is
the user's business: `runtime=` / `--vulkan-runtime PATH`, or the environment
variable `LAYOUT_SOLVER_VULKAN_RUNTIME`.

Every program runs in a child process (`python -m layout_solver.targets.vulkan.runtime`),
so a driver crash (SIGSEGV) becomes a record, never the end of the caller:

    results = execute({"stock": pte_a, "solver": pte_b}, inputs)
    results["solver"].executed, results["solver"].outputs, results["solver"].run_ms

Outputs come from one child per program (a crash names its program); run times
from one more child that loads every program that ran, warms each up, then
times them in interleaved rounds, so drift on a shared machine hits all sides
alike. Medians are reported.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ENV_VAR = "LAYOUT_SOLVER_VULKAN_RUNTIME"
LIBRARY_NAME = "libvkbackend.so"
HOW_TO_GET_IT = (
    "build ExecuTorch's Vulkan delegate runtime (backends/vulkan/runtime) as a shared library for the installed "
    f"executorch wheel and pass its path with --vulkan-runtime PATH or ${ENV_VAR}"
)
HOW_TO_GET_A_DEVICE = (
    "no Vulkan device was found: install a driver (on Debian/Ubuntu the CPU driver lavapipe: "
    "`apt-get install -y libvulkan1 mesa-vulkan-drivers`) and check `vulkaninfo --summary`"
)


class VulkanRuntimeUnavailable(RuntimeError):
    """No runtime plugin, or no Vulkan device: the message says what is missing and how to get it."""


@dataclass
class ExecutionResult:
    """What one program did on the device."""

    executed: bool
    error: str | None = None
    outputs: list | None = None  # numpy arrays, in the program's output order
    run_ms: float | None = None  # median over the timed rounds
    run_ms_all: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Dispatch:
    """One shader dispatch of a program, timed on the device by the runtime's query pool.

    `operator` is the op it belongs to ("" for the runtime's own staging copies), `tensors` every
    tensor argument as (sizes, storage, packed dim) with the output last, `us` the median over runs.
    """

    node: int  # the op's index in the delegate's graph (-1 for staging); an op may dispatch several shaders
    operator: str
    kernel: str
    tensors: tuple[tuple[tuple[int, ...], str, int], ...]
    us: float


def locate_runtime(path: str | os.PathLike | None = None) -> Path:
    """The runtime plugin: `path`, else $LAYOUT_SOLVER_VULKAN_RUNTIME (a file or the folder holding it).

    Raises VulkanRuntimeUnavailable naming what was looked for.
    """
    given = path if path is not None else os.environ.get(ENV_VAR)
    if not given:
        raise VulkanRuntimeUnavailable(f"no Vulkan runtime plugin given: {HOW_TO_GET_IT}")
    candidate = Path(given).expanduser()
    if candidate.is_dir():
        candidate = candidate / LIBRARY_NAME
    if not candidate.is_file():
        raise VulkanRuntimeUnavailable(f"Vulkan runtime plugin {str(candidate)!r} does not exist: {HOW_TO_GET_IT}")
    return candidate.resolve()


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


def _run_child(request: dict, timeout: float) -> dict:
    """Run one request in a fresh interpreter; a crash or time-out becomes {"crash": message}."""
    with tempfile.TemporaryDirectory(prefix="layout-solver-vk-") as tmp:
        req, res = Path(tmp) / "request.pkl", Path(tmp) / "result.pkl"
        req.write_bytes(pickle.dumps(request))
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "layout_solver.targets.vulkan.runtime", str(req), str(res)],
                check=False,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return {"crash": f"timed out after {timeout:.0f} s"}
        if res.is_file():
            return pickle.loads(res.read_bytes())
        why = _signal_name(proc.returncode) if proc.returncode < 0 else f"exit code {proc.returncode}"
        # What the runtime said last (errors, aborts), not the import-time warnings before it.
        said = [line for line in proc.stderr.splitlines() if any(k in line for k in ("rror", "what()", "terminate"))]
        tail = " | ".join(said[-3:])
        return {"crash": f"the Vulkan program crashed the process ({why})" + (f": {tail[-400:]}" if tail else "")}


def probe(runtime: str | os.PathLike | None = None, timeout: float = 120.0) -> str:
    """Load the plugin in a child and return the device's availability; raises VulkanRuntimeUnavailable."""
    lib = locate_runtime(runtime)
    answer = _run_child({"mode": "probe", "runtime": str(lib)}, timeout)
    if "crash" in answer or answer.get("error") or answer.get("unavailable"):
        raise VulkanRuntimeUnavailable(
            answer.get("unavailable") or f"loading {lib} failed: {answer.get('crash') or answer.get('error')}"
        )
    if not answer["available"]:
        raise VulkanRuntimeUnavailable(HOW_TO_GET_A_DEVICE)
    return "VulkanBackend available"


def execute(
    programs: dict[str, bytes],
    inputs: tuple | dict[str, tuple],
    runtime: str | os.PathLike | None = None,
    warmup: int = 3,
    rounds: int = 15,
    timeout: float = 600.0,
    time_runs: bool = True,
    methods: dict[str, tuple[bytes, str]] | None = None,
) -> dict[str, ExecutionResult]:
    """Run every program on the Vulkan device; never raises for a program that fails.

    `inputs` is one tuple for every program, or a tuple per program name.
    `methods` adds runs of other methods than `forward`: run name -> (program bytes, method name).
    Raises VulkanRuntimeUnavailable when there is no plugin or no device at all.
    """
    lib = str(locate_runtime(runtime))
    runs = {name: (buffer, "forward") for name, buffer in programs.items()} | dict(methods or {})
    if not isinstance(inputs, dict):
        inputs = {name: inputs for name in runs}
    results: dict[str, ExecutionResult] = {}
    with tempfile.TemporaryDirectory(prefix="layout-solver-pte-") as tmp:
        paths = _write_programs(tmp, runs)
        answers = _per_program({"mode": "outputs", "runtime": lib}, paths, inputs, timeout)
        for name, one in answers.items():
            failure = _failure(one, name)
            if failure:
                results[name] = ExecutionResult(False, failure)
            else:
                results[name] = ExecutionResult(True, outputs=one["outputs"][name])
        ran = [name for name, r in results.items() if r.executed]
        if time_runs and ran:
            times, failure = _time_child(lib, {n: paths[n] for n in ran}, inputs, warmup, rounds, timeout)
            for name in ran:
                if times.get(name):
                    results[name].run_ms_all = times[name]
                    results[name].run_ms = statistics.median(times[name])
                else:
                    results[name].error = f"timing failed: {failure}"
    return results


def time_again(programs: dict[str, bytes], inputs: tuple, runtime=None, rounds: int = 15) -> dict[str, list[float]]:
    """Time programs that `execute` ran (on the same `inputs`) once more, in a fresh child process, interleaved as
    `execute` times them (3 warm-up runs): each program's per-round milliseconds ({} for one the child could not
    time). A second reading of a time comes from another process: within one, the rounds share whatever that
    process's placement and warm-up gave them."""
    with tempfile.TemporaryDirectory(prefix="layout-solver-pte-") as tmp:
        paths = _write_programs(tmp, {name: (buffer, "forward") for name, buffer in programs.items()})
        times, _ = _time_child(str(locate_runtime(runtime)), paths, dict.fromkeys(programs, inputs), 3, rounds, 600.0)
    return times


def _time_child(lib: str, paths: dict, inputs: dict, warmup: int, rounds: int, timeout: float):
    """One timing child over `paths`: (program name -> per-round ms for those it timed, why the rest failed)."""
    answer = _run_child(
        {
            "mode": "time",
            "runtime": lib,
            "programs": paths,
            "inputs": {n: inputs[n] for n in paths},
            "warmup": warmup,
            "rounds": rounds,
        },
        timeout,
    )
    times = {name: t for name, t in answer.get("times", {}).items() if t}
    return times, answer.get("crash") or answer.get("error")


def profile(
    programs: dict[str, bytes],
    inputs: tuple | dict[str, tuple],
    runtime: str | os.PathLike | None = None,
    warmup: int = 2,
    runs: int = 5,
    timeout: float = 1800.0,
    methods: dict[str, str] | None = None,
) -> dict[str, list[Dispatch] | str]:
    """Every shader dispatch of each program with its device time (median of `runs`), in dispatch order;
    `methods` names the method to run per program where it is not `forward`.

    The runtime records them in ExecuTorch's ETDump when it is built with ET_EVENT_TRACER_ENABLED. All
    programs run in one child; if it crashes, one child per program, so the crash is pinned on its program.
    A program that fails, or a runtime built without the event tracer, gets an error string, not a list.
    """
    lib = str(locate_runtime(runtime))
    if not isinstance(inputs, dict):
        inputs = {name: inputs for name in programs}
    with tempfile.TemporaryDirectory(prefix="layout-solver-pte-") as tmp:
        paths = _write_programs(
            tmp, {name: (buffer, (methods or {}).get(name, "forward")) for name, buffer in programs.items()}
        )
        request = {"mode": "profile", "runtime": lib, "warmup": warmup, "rounds": runs}
        answers = _per_program(request, paths, inputs, timeout)
    found: dict[str, list[Dispatch] | str] = {}
    for name, one in answers.items():
        dispatches = (one.get("dispatches") or {}).get(name)  # plain tuples: the child's classes are its __main__'s
        found[name] = (
            [Dispatch(*d) for d in dispatches]
            if dispatches
            else _failure(one, name) or "no dispatches recorded: a runtime built without ET_EVENT_TRACER_ENABLED?"
        )
    return found


def _write_programs(folder: str, runs: dict[str, tuple[bytes, str]]) -> dict[str, tuple[str, str]]:
    """Each program's bytes in a .pte file of `folder`: run name -> (path, method)."""
    paths = {}
    for name, (buffer, method) in runs.items():
        paths[name] = (str(Path(folder) / f"{len(paths)}.pte"), method)
        Path(paths[name][0]).write_bytes(buffer)
    return paths


def _per_program(request: dict, paths: dict, inputs: dict, timeout: float) -> dict[str, dict]:
    """The child's answer for each program. All programs run in one child first; if that one crashes, one
    child per program, so the crash is pinned on the program that caused it."""
    answer = _run_child(request | {"programs": paths, "inputs": {n: inputs[n] for n in paths}}, timeout)
    if answer.get("unavailable"):
        raise VulkanRuntimeUnavailable(answer["unavailable"])
    if "crash" not in answer or len(paths) == 1:
        return {name: answer for name in paths}
    return {
        name: _run_child(request | {"programs": {name: path}, "inputs": {name: inputs[name]}}, timeout)
        for name, path in paths.items()
    }


def _failure(answer: dict, name: str) -> str | None:
    return answer.get("crash") or answer.get("error") or (answer.get("errors") or {}).get(name)


# The runtime writes double arguments with printf: inf, -inf and nan, which JSON has no words for.
_BARE_NUMBER = re.compile(r"([:\[,]\s*)-?(?:inf|nan)\b")


def _dispatches(etdump: bytes, runs: int) -> list[tuple]:
    import json

    from executorch.devtools.etdump.serialize import deserialize_from_etdump_flatcc

    # A dispatch id counts within one delegate: a program of several delegates (ops between them on the CPU)
    # repeats the ids, so a dispatch is its delegate call's instruction and its id there.
    timed: dict[tuple[int, int, int], list[float]] = {}
    described: dict[tuple[int, int, int], tuple] = {}
    for run in deserialize_from_etdump_flatcc(etdump).run_data[-runs:]:
        for event in run.events or []:
            info = event.profile_event.delegate_debug_id_str if event.profile_event else None
            if not info or not info.startswith("{"):
                continue  # the framework's own events (method load, delegate call), not a dispatch
            info = json.loads(_BARE_NUMBER.sub(r"\1null", info))
            op = info.get("operator", {})
            tensors = tuple(
                (tuple(a["sizes"]), a["storage"], a["packed_dim"]) for a in op.get("args", []) if a["type"] == "TENSOR"
            )
            node = op.get("delegate_node_id", -1)
            key = (event.profile_event.chain_index, event.profile_event.instruction_id, info["dispatch_id"])
            described[key] = (node, op.get("name", ""), info["kernel_name"], tensors)
            ns = event.profile_event.end_time - event.profile_event.start_time
            timed.setdefault(key, []).append(ns / 1000.0)
    return [(*described[k], statistics.median(timed[k])) for k in sorted(described)]


# ------------------------------------------------------------ the child ----


def _load_backend(lib: str):
    import ctypes

    from executorch.extension.pybindings import portable_lib  # loads libexecutorch.so: must come first

    ctypes.CDLL(lib, mode=ctypes.RTLD_GLOBAL)
    return portable_lib


def _child(request: dict) -> dict:
    portable_lib = _load_backend(request["runtime"])
    if "VulkanBackend" not in portable_lib._get_registered_backend_names():
        return {"unavailable": f"{request['runtime']} did not register VulkanBackend: {HOW_TO_GET_IT}"}
    available = portable_lib._is_available("VulkanBackend")
    if request["mode"] == "probe":
        return {"available": available}
    if not available:
        return {"unavailable": HOW_TO_GET_A_DEVICE}
    inputs = request["inputs"]
    # A worker of torch's own pool can spin on a core that lavapipe's threads need (one took XNNPACK's second core:
    # `layout_solver.targets.xnnpack.runtime.pinned`). This process only runs programs, so torch keeps one thread
    # in it (imported after the backend: libexecutorch loads first).
    import torch

    torch.set_num_threads(1)
    # A loaded program points into its buffer without copying it: keep every buffer alive.
    buffers = {name: Path(p).read_bytes() for name, (p, _) in request["programs"].items()}
    method = {name: m for name, (_, m) in request["programs"].items()}

    def run(module, name):
        return module.run_method(method[name], inputs[name])

    if request["mode"] == "outputs":
        outputs, errors = {}, {}
        for name, buffer in buffers.items():
            try:  # an error the runtime raises (not a crash) belongs to its program
                module = portable_lib._load_for_executorch_from_buffer(buffer)
                outputs[name] = [o.detach().numpy().copy() for o in run(module, name)]
            except Exception as exc:  # noqa: BLE001 - any failure is recorded for this program, the rest go on
                errors[name] = f"{type(exc).__name__}: {exc}".strip()[:1000]
        return {"outputs": outputs, "errors": errors}
    if request["mode"] == "profile":
        dispatches, errors = {}, {}
        with tempfile.TemporaryDirectory() as tmp:
            for name, buffer in buffers.items():
                try:
                    module = portable_lib._load_for_executorch_from_buffer(
                        buffer, enable_etdump=True, debug_buffer_size=0
                    )
                    for _ in range(request["warmup"] + request["rounds"]):
                        run(module, name)
                    module.write_etdump_result_to_file(str(Path(tmp) / "run.etdp"))
                    dispatches[name] = _dispatches((Path(tmp) / "run.etdp").read_bytes(), request["rounds"])
                except Exception as exc:  # noqa: BLE001 - recorded for this program, the rest go on
                    errors[name] = f"{type(exc).__name__}: {exc}".strip()[:1000]
        return {"dispatches": dispatches, "errors": errors}
    modules = {name: portable_lib._load_for_executorch_from_buffer(buffer) for name, buffer in buffers.items()}
    for name, module in modules.items():
        for _ in range(request["warmup"]):
            run(module, name)
    times: dict[str, list[float]] = {name: [] for name in modules}
    for k in range(request["rounds"]):
        order = list(modules) if k % 2 == 0 else list(reversed(modules))
        for name in order:
            start = time.perf_counter()
            run(modules[name], name)
            times[name].append((time.perf_counter() - start) * 1000.0)
    return {"times": times}


def main(argv: list[str]) -> int:
    """Child-process entry point: run the pickled request in argv[0] on the device, write the pickled answer (or
    the runtime's error) to argv[1]; a driver crash kills only this process."""
    request_path, result_path = argv
    request = pickle.loads(Path(request_path).read_bytes())
    try:
        answer = _child(request)
    except Exception as exc:  # noqa: BLE001 - an error the runtime raised (not a crash): report it
        answer = {"error": f"{type(exc).__name__}: {exc}".strip()[:1000]}
    Path(result_path).write_bytes(pickle.dumps(answer))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


def device_name() -> str:
    """The first Vulkan device's name (the one the runtime takes), from the Vulkan loader itself (vulkaninfo is
    in vulkan-tools, which a machine with only the loader and a driver lacks), or 'unknown'."""
    import ctypes
    import ctypes.util

    try:
        vulkan = ctypes.CDLL(ctypes.util.find_library("vulkan") or "libvulkan.so.1")
    except OSError:
        return "unknown"

    class InstanceCreateInfo(ctypes.Structure):  # VkInstanceCreateInfo, no layers or extensions
        _fields_ = [
            ("sType", ctypes.c_int32),
            ("pNext", ctypes.c_void_p),
            ("flags", ctypes.c_uint32),
            ("pApplicationInfo", ctypes.c_void_p),
            ("enabledLayerCount", ctypes.c_uint32),
            ("ppEnabledLayerNames", ctypes.c_void_p),
            ("enabledExtensionCount", ctypes.c_uint32),
            ("ppEnabledExtensionNames", ctypes.c_void_p),
        ]

    instance = ctypes.c_void_p()
    if vulkan.vkCreateInstance(ctypes.byref(InstanceCreateInfo(sType=1)), None, ctypes.byref(instance)) != 0:
        return "unknown"
    try:
        count = ctypes.c_uint32(0)
        vulkan.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        if not count.value:
            return "unknown"
        devices = (ctypes.c_void_p * count.value)()
        vulkan.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), devices)
        # VkPhysicalDeviceProperties: four uint32s and the device type, then char deviceName[256]; the rest
        # (limits, sparse properties) fits in the 4 KiB given
        properties = ctypes.create_string_buffer(4096)
        vulkan.vkGetPhysicalDeviceProperties(ctypes.c_void_p(devices[0]), properties)
        return properties.raw[20:276].split(b"\0", 1)[0].decode(errors="replace") or "unknown"
    finally:
        vulkan.vkDestroyInstance(instance, None)
