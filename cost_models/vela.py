"""Ask Vela (ethos-u-vela) what TOSA operators cost on the exact target a lowering is for.

A `VelaConfig` is what Vela makes of a compile spec's command-line flags (accelerator, system config,
memory mode, config files, scheduler options): Vela's own argument handling is run on the flags and
stopped where it would hand them to its compiler core, so a probe compiles with the settings executorch's
lowering will use, and no setting is read twice. `compile_network()` compiles a TOSA flatbuffer with
Vela's compiler core (regor) in-process and returns its per-layer rows, each pointing back to the TOSA
operator it came from; a small graph compiles in about a millisecond. Answers are cached on disk by the
probe's content, the configuration and the Vela version (`ProbeStore`). `run_vela()` is the measurement
path: Vela's command line on a whole delegate, read back from its per-layer CSV.
"""

from __future__ import annotations

import contextlib
import csv
import ctypes
import gzip
import hashlib
import io
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass
from functools import cache
from importlib import metadata
from pathlib import Path

from cost_models import ethos_u55
from cost_models.ethos_u55 import TransposeCost
from cost_models.store import CACHE_ENV, JsonStore, cache_folder  # noqa: F401 - CACHE_ENV re-exported
from cost_models.store import default_store as open_store
from cost_models.tosa_probe import ProbeBuilder, ProbeGraph, clamp_through

# executorch 1.5.1's flags for EthosUCompileSpec("ethos-u55-128") (checked against it in the tests).
DEFAULT_FLAGS = (
    "--accelerator-config=ethos-u55-128",
    "--config=Arm/vela.ini",
    "--output-format=raw",
    "--system-config=Ethos_U55_High_End_Embedded",
    "--memory-mode=Shared_Sram",
)


class VelaUnsupported(RuntimeError):
    """Vela cannot place this graph on the NPU as given."""


class VelaCrashed(VelaUnsupported):
    """Vela's compiler core stopped the process compiling this graph (a native crash: `compile_network_isolated`)."""


@cache
def vela_version() -> str:
    """The installed ethos-u-vela version (part of every cache key)."""
    return metadata.version("ethos-u-vela")


def _vela_ini() -> str:
    import ethosu

    root = Path(next(iter(ethosu.__path__)))
    return str(root / "config_files" / "Arm" / "vela.ini")


# --- configuration -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VelaConfig:
    """How Vela compiles for one target: the flags, and the accelerator, system config text and compiler
    options Vela derives from them."""

    flags: tuple[str, ...]
    accelerator: str  # Vela's --accelerator-config, e.g. "ethos-u85-256"
    core: str  # the compiler core's name for it, e.g. "EthosU85"
    system_config: str
    options: str

    @property
    def key(self) -> str:
        """A digest of everything that decides a compilation (the config files' text included)."""
        text = json.dumps([self.core, self.system_config, self.options, vela_version()])
        return hashlib.sha1(text.encode()).hexdigest()[:20]


class _Captured(Exception):
    pass


_capture_lock = threading.Lock()


@cache
def vela_config(flags: tuple[str, ...] = DEFAULT_FLAGS) -> VelaConfig:
    """Vela's reading of `flags` (a compile spec's `compiler_flags`); raises ValueError naming a flag Vela
    rejects."""
    from ethosu.vela import vela

    flags = tuple(f for f in flags if not f.startswith("--output-dir") and f)
    accelerator = next((f.split("=", 1)[1] for f in flags if f.startswith("--accelerator-config=")), None)
    if accelerator is None:
        raise ValueError(f"Vela flags name no --accelerator-config: {list(flags)}")
    captured: dict = {}

    def capture(arch, input_name, core, system_config, options, *args, **kwargs):
        captured.update(core=core, system_config=system_config, options=options)
        raise _Captured

    with _capture_lock, tempfile.TemporaryDirectory() as tmp:
        network = Path(tmp) / "probe.tosa"
        network.write_bytes(b"")
        original, vela.process_regor = vela.process_regor, capture
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                # --verbose-performance only switches on the per-layer database the probes read
                vela.main([*flags, "--verbose-performance", f"--output-dir={tmp}", str(network)])
        except _Captured:
            pass
        except (SystemExit, Exception) as exc:  # argparse exits; a value Vela cannot map raises
            reason = err.getvalue().strip()[-400:] or f"{type(exc).__name__}: {exc}"
            raise ValueError(f"Vela rejects the flags {list(flags)}: {reason}") from exc
        finally:
            vela.process_regor = original
    if not captured:
        raise ValueError(f"Vela did not reach its compiler core with the flags {list(flags)}")
    return VelaConfig(flags, accelerator, captured["core"], captured["system_config"], captured["options"])


# --- compiling -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class VelaLayer:
    """One row of Vela's per-layer table: the TOSA operator it came from (index in the flatbuffer, -1 if
    unknown), Vela's operator ("Conv2D", "Transpose", "MemoryCopy", ...) and its cycles."""

    source: int
    operator: str
    cycles: int
    name: str = ""
    source_operator: str = ""  # Vela's name of the TOSA operator the row came from ("Conv2D", "Rescale", ...)


@dataclass(frozen=True)
class VelaNetwork:
    """Vela's NPU rows for one compiled graph."""

    layers: tuple[VelaLayer, ...]

    @property
    def cycles(self) -> int:
        """Total NPU cycles: the sum of every NPU row's op cycles (as the per-layer CSV sums)."""
        return sum(layer.cycles for layer in self.layers)

    def cycles_of(self, sources) -> int:
        """Cycles of the rows that came from the TOSA operators `sources`."""
        sources = set(sources)
        return sum(layer.cycles for layer in self.layers if layer.source in sources)

    def to_json(self) -> list:
        """The rows as JSON-able lists (what the probe store keeps)."""
        return [[x.source, x.operator, x.cycles, x.name, x.source_operator] for x in self.layers]

    @classmethod
    def from_json(cls, rows: list) -> VelaNetwork:
        """The network `to_json` wrote."""
        return cls(tuple(VelaLayer(int(r[0]), str(r[1]), int(r[2]), str(r[3]), str(r[4])) for r in rows))

    def source_operator(self, sources) -> str:
        """Vela's name of the operator the first row from `sources` came from ("" if none)."""
        sources = set(sources)
        return next((x.source_operator for x in self.layers if x.source in sources), "")


def compile_network(tosa: bytes, config: VelaConfig | None = None) -> VelaNetwork:
    """Compile `tosa` with Vela's compiler core for `config` (default: ethos-u55-128) and read its per-layer
    rows; raises VelaUnsupported when Vela rejects the graph."""
    from ethosu import regor

    config = config or vela_config()
    options = config.options if "enable_db=true" in config.options else config.options + "\nenable_db=true\n"
    try:
        compiled = regor.compile(config.core, tosa, "TOSA", config.system_config, options=options, verbose=False)
    except RuntimeError as exc:
        raise VelaUnsupported(str(exc)) from exc
    tables = compiled.opt_database.tables
    if "perf" not in tables:
        return VelaNetwork(())
    source = tables.get("source")
    ext_key, source_name = {}, {}
    if source is not None:
        header = source.header
        ext_key = {row[header.index("id")]: int(row[header.index("ext_key")]) for row in source.data}
        source_name = {row[header.index("id")]: row[header.index("operator")] for row in source.data}
    perf = tables["perf"]
    col = {name: perf.header.index(name) for name in ("source_id", "operator", "op_cycles", "name")}
    layers = tuple(
        VelaLayer(
            ext_key.get(row[col["source_id"]], -1),
            row[col["operator"]],
            int(row[col["op_cycles"]]),
            row[col["name"]],
            source_name.get(row[col["source_id"]], ""),
        )
        for row in perf.data
        if row[col["operator"]] != "Passthrough"  # a CPU operator, as Vela's per-layer CSV marks it
    )
    return VelaNetwork(layers)


STORE_FORMAT = 2  # of a stored answer; a change of it leaves earlier answers unread


# Answers of the probes that the zoo's lowerings compile, shipped with the package (`benchmarks/arm/ship_probes.py`
# writes them), so that a first lowering does not compile them again: 125 probe compiles were 3.9 s of resnet18's
# first lowering on ethos-u55-128. Keyed as the store keys them (the probe's content, the configuration, the Vela
# version and STORE_FORMAT), so another Vela or configuration reads none of them. SHIPPED_PROBES_ENV=0 leaves them
# unread (to measure a lowering that compiles every probe).
SHIPPED_PROBES = Path(__file__).parent / "data" / "vela_probes.json.gz"
SHIPPED_PROBES_ENV = "LAYOUT_SOLVER_SHIPPED_PROBES"


@cache
def shipped_probes() -> dict[str, object]:
    """The shipped probe answers by store key (`SHIPPED_PROBES`); none where the file is absent."""
    try:
        with gzip.open(SHIPPED_PROBES, "rt", encoding="utf-8") as file:
            return json.load(file)["probes"]
    except FileNotFoundError:
        return {}


class ProbeStore(JsonStore):
    """Answers of compiled probes (`probes.sqlite` in `directory`; in memory only if None); where `shipped`, also
    the answers shipped with the package (`shipped_probes`), read after the folder's own."""

    def __init__(self, directory: Path | None, shipped: bool = False):
        super().__init__(directory, "probes")
        self.networks: dict[str, VelaNetwork] = {}  # decoded once; the JSON store below keeps the text
        self.shipped = shipped
        self.hits = self.misses = self.shipped_hits = 0

    def get(self, key: str) -> VelaNetwork | None:
        """The stored answer of `key` (memory first, then disk, then the shipped answers), or None."""
        found = self.networks.get(key)
        if found is None and (stored := super().get(key)) is not None:
            found = self.networks[key] = VelaNetwork.from_json(stored)
        if found is None and self._reads_shipped() and (stored := shipped_probes().get(key)) is not None:
            found = self.networks[key] = VelaNetwork.from_json(stored)
            self.shipped_hits += 1
        self.hits += found is not None
        return found

    def _reads_shipped(self) -> bool:
        return self.shipped and os.environ.get(SHIPPED_PROBES_ENV) != "0"

    def put(self, key: str, network: VelaNetwork) -> None:
        """Store `network` under `key` (memory and disk)."""
        self.misses += 1
        super().put(key, network.to_json())
        self.networks[key] = network


class _CacheFolderProbes(ProbeStore):
    """The cache folder's store: its own answers, then the shipped ones."""

    def __init__(self, directory: Path | None):
        super().__init__(directory, shipped=True)


def default_store() -> ProbeStore:
    """The process-wide probe store of `cache_folder()`, which also serves the shipped answers."""
    return open_store("probes", _CacheFolderProbes)


# Vela 5.1.0's compiler core makes some choices in the order of objects' addresses: under address-space
# randomization one TOSA graph (the stage's mobilevit_like on ethos-u55-128) compiles to 3-4 different command
# streams, in one process or in fresh ones, and to one without it (benchmarks/results/determinism.md). So every
# compile whose bytes or cycles the stage keeps runs in a child process with randomization off: the same bytes on
# every run, whatever the parent did before. A child that could not turn it off says so (FIXED_ADDRESSES_MARK).
ADDR_NO_RANDOMIZE = 0x0040000  # personality(2)
FIXED_ADDRESSES_MARK = "@fixed-addresses "
_CHILD_PRELUDE = f"""
import ctypes, sys
sys.stdout.write("{FIXED_ADDRESSES_MARK}%d\\n" % bool(ctypes.CDLL(None).personality(0xFFFFFFFF) & {ADDR_NO_RANDOMIZE}))
sys.stdout.flush()
"""


def _fix_addresses() -> None:
    """preexec_fn of a Vela child: turn address-space randomization off for the program it executes."""
    personality = ctypes.CDLL(None, use_errno=True).personality
    current = personality(0xFFFFFFFF)
    if current != -1:
        personality(current | ADDR_NO_RANDOMIZE)


_warned_randomized = threading.Event()


def run_vela_child(code: str, argv: list[str], stdin: bytes = b"", timeout: float | None = None):
    """Run Python `code` (with `argv` as sys.argv[1:]) in a child with address-space randomization off; returns
    (the CompletedProcess, its stdout after the mark). Where the system refuses to turn randomization off (some
    container sandboxes), it says so once: the bytes may then differ between runs, as they do without the stage."""
    done = subprocess.run([sys.executable, "-c", _CHILD_PRELUDE + code, *argv], input=stdin, capture_output=True,
                          timeout=timeout, check=False, preexec_fn=_fix_addresses)  # fmt: skip
    out = done.stdout.decode(errors="replace")
    mark, _, rest = out.partition("\n")
    if mark == FIXED_ADDRESSES_MARK + "0" and not _warned_randomized.is_set():
        _warned_randomized.set()
        warnings.warn("layout-solver: this system refused to turn address-space randomization off for Vela's "
                      "child process; Vela 5.1.0 can compile one graph to different bytes from run to run",
                      stacklevel=2)  # fmt: skip
    return done, (rest if mark.startswith(FIXED_ADDRESSES_MARK) else out)


# compile_network in a process of its own: stdin the TOSA flatbuffer, argv[1] the VelaConfig, stdout one JSON line
_ISOLATED_COMPILE = """
import json, sys
from cost_models.vela import VelaConfig, VelaUnsupported, compile_network
fields = json.loads(sys.argv[1])
config = VelaConfig(**{**fields, "flags": tuple(fields["flags"])})
try:
    answer = {"rows": compile_network(sys.stdin.buffer.read(), config).to_json()}
except VelaUnsupported as exc:
    answer = {"unsupported": str(exc)}
sys.stdout.write("\\n" + json.dumps(answer) + "\\n")
"""


def how_it_ended(returncode: int) -> str:
    """A child process's return code in words: "signal SIGSEGV" for a process a signal killed, else "exit N"."""
    if returncode < 0 and -returncode in signal.valid_signals():
        return f"signal {signal.Signals(-returncode).name}"
    return f"exit {returncode}"


def _ended(done: subprocess.CompletedProcess, width: int) -> str:
    """How a failed Vela child ended, with the last line it wrote to stderr (at most `width` characters)."""
    tail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [""]
    return f"({how_it_ended(done.returncode)}) {tail[0][:width]}".strip()


def compile_network_isolated(tosa: bytes, config: VelaConfig | None = None, timeout: float = 600.0) -> VelaNetwork:
    """`compile_network` in a child process (`run_vela_child`: addresses fixed, so the rows are the same on every
    run), for a graph no one has compiled before: Vela's compiler core can crash the process on a graph it
    accepts (a segfault in regor on a layout of generated:1286 for ethos-u55-128, Vela 5.1.0), and the caller
    must live to say so. Raises VelaCrashed when the child dies or runs past `timeout` seconds, VelaUnsupported
    when Vela rejects the graph. The child imports only this package and Vela (a fraction of a second)."""
    config = config or vela_config()
    try:
        done, out = run_vela_child(_ISOLATED_COMPILE, [json.dumps(asdict(config))], tosa, timeout)
    except subprocess.TimeoutExpired as exc:
        raise VelaCrashed(f"Vela's compiler core ran past {timeout:.0f} s") from exc
    if done.returncode != 0:
        raise VelaCrashed(f"Vela's compiler core stopped {_ended(done, 200)}")
    answer = json.loads(out.strip().splitlines()[-1])
    if "unsupported" in answer:
        raise VelaUnsupported(answer["unsupported"])
    return VelaNetwork.from_json(answer["rows"])


# Vela's command line (ethosu.vela.vela.main) in a process of its own: argv its arguments, exit status its own
_VELA_MAIN = """
import sys
from ethosu.vela import vela
sys.exit(vela.main(sys.argv[1:]))
"""


def vela_main_in_child(argv: list[str]) -> int:
    """`ethosu.vela.vela.main(argv)` in a child process with fixed addresses (`run_vela_child`): what it writes
    (the output folder named in `argv`) is the same on every run, so it is kept (`VELA_OUTPUTS` in the cache
    folder, by the input graph's bytes, the other arguments and Vela's version) and a later compile of the same
    graph copies it instead of compiling again. Raises VelaCrashed, with the child's last error line, where
    Vela fails."""
    argv = list(argv)
    output = Path(next(a.partition("=")[2] for a in argv if a.startswith("--output-dir=")))
    kept = cache_folder() / VELA_OUTPUTS / _vela_run_key(argv)
    if not kept.is_dir():
        done, _ = run_vela_child(_VELA_MAIN, argv)
        if done.returncode != 0:
            raise VelaCrashed(f"Vela stopped {_ended(done, 300)}")
        kept.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=kept.parent))
        shutil.copytree(output, staging, dirs_exist_ok=True)
        with contextlib.suppress(OSError):  # another process kept the same output first: theirs stands
            staging.rename(kept)
        shutil.rmtree(staging, ignore_errors=True)
        return 0
    shutil.copytree(kept, output, dirs_exist_ok=True)
    return 0


VELA_OUTPUTS = "vela-outputs"  # the folder, in the cache folder, of kept outputs of Vela's command line


def _vela_run_key(argv: list[str]) -> str:
    """What decides what Vela's command line writes: every argument but the output folder, a file argument by
    its content (the input graph), and Vela's version."""
    digest = hashlib.sha256(f"{vela_version()}|{STORE_FORMAT}".encode())
    for arg in argv:
        if arg.startswith("--output-dir="):
            continue
        digest.update(arg.encode() if arg.startswith("-") or not Path(arg).is_file() else Path(arg).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def compile_probe(
    probe: ProbeGraph | Callable[[], ProbeGraph], config: VelaConfig | None = None, key: str | None = None,
    store: ProbeStore | None = None,
) -> VelaNetwork:  # fmt: skip
    """`compile_network` of a probe, cached by (probe content or `key`, configuration, Vela version). A callable
    probe is built only on a cache miss (then `key` must name it). Rejections are cached too (no rows)."""
    config = config or vela_config()
    store = store if store is not None else default_store()
    name = key if key is not None else probe.key
    full = hashlib.sha1(f"{name}|{config.key}|{STORE_FORMAT}".encode()).hexdigest()
    found = store.get(full)
    if found is not None:
        return found
    graph = probe() if callable(probe) else probe
    try:
        network = compile_network(graph.serialize(), config)
    except VelaUnsupported:
        network = VelaNetwork((VelaLayer(-2, "Rejected", 0),))
    store.put(full, network)
    return network


def rejected(network: VelaNetwork) -> bool:
    """True for the cached answer of a probe Vela rejected."""
    return len(network.layers) == 1 and network.layers[0].source == -2


def run_vela(tosa: bytes, workdir: Path, flags: tuple[str, ...] = DEFAULT_FLAGS) -> list[dict]:
    """Vela's command line on `tosa` with `flags` (a compile spec's flags); the per-layer CSV rows."""
    from ethosu.vela import vela

    path = workdir / "op.tosa"
    path.write_bytes(tosa)
    out = workdir / "out"
    flags = [f for f in flags if not f.startswith("--output-dir")]
    args = [*flags, "--verbose-performance", f"--output-dir={out}", str(path)]
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        try:
            code = vela.main(args)
        except RuntimeError as exc:
            raise VelaUnsupported(str(exc)) from exc
    csv_path = out / "op_per-layer.csv"
    if code not in (0, None) or not csv_path.exists():
        raise RuntimeError(f"vela failed (exit {code}) on {path}")
    with csv_path.open() as f:
        return list(csv.DictReader(f))


# --- single-operator measurements ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class VelaMeasurement:
    """Vela's figures for one transpose: its NPU ops and cycles, cycles per row, and the Vela version."""

    shape: tuple[int, ...]
    perm: tuple[int, ...]
    dtype: str
    npu_ops: int  # rows of Vela's per-layer table that ran on the NPU
    cycles: int  # sum of their Op Cycles
    rows: tuple[tuple[str, int], ...]  # (Vela operator, cycles) per row
    vela_version: str


_DEFAULT = object()


def _store_for(cache_dir) -> ProbeStore:
    """The process-wide store for the default cache folder; a store of its own for any other (None: memory)."""
    return default_store() if cache_dir is _DEFAULT else ProbeStore(cache_dir)


def _measured(probe: ProbeGraph, config: VelaConfig | None, cache_dir=_DEFAULT) -> VelaNetwork:
    network = compile_probe(probe, config, store=_store_for(cache_dir))
    if rejected(network):
        raise VelaUnsupported(f"Vela rejects the probe {probe.key[:12]}")
    return network


def transpose_probe(shape, perm, dtype: str = "int8") -> ProbeGraph:
    """One TRANSPOSE of an input of `shape`."""
    b = ProbeBuilder()
    x = b.input(shape, dtype)
    b.op("TRANSPOSE", [x], [shape[p] for p in perm], dtype, "TransposeAttribute", perms=tuple(perm))
    return b.build()


def measure_transpose(
    shape, perm, dtype: str = "int8", config: VelaConfig | None = None, cache_dir=_DEFAULT
) -> VelaMeasurement:
    """Vela's cycles for TRANSPOSE(shape, perm) (default target ethos-u55-128); raises VelaUnsupported when Vela
    rejects it."""
    shape, perm = tuple(int(d) for d in shape), tuple(int(p) for p in perm)
    network = _measured(transpose_probe(shape, perm, dtype), config, cache_dir)
    rows = tuple((x.operator, x.cycles) for x in network.layers)
    return VelaMeasurement(shape, perm, dtype, len(rows), network.cycles, rows, vela_version())


def matmul_probe(n: int, h: int, c: int, w: int, dtype: str = "int8") -> ProbeGraph:
    """One MATMUL of (n, h, c) by (n, c, w), both graph inputs, zero points 0."""
    b = ProbeBuilder()
    a, x = b.input((n, h, c), dtype), b.input((n, c, w), dtype)
    zps = [b.const([0], dtype), b.const([0], dtype)]
    b.op("MATMUL", [a, x, *zps], (n, h, w), "int32" if dtype == "int8" else "int48", "MatMulAttribute")
    return b.build()


def measure_matmul(
    n: int, h: int, c: int, w: int, dtype: str = "int8", config: VelaConfig | None = None, cache_dir=_DEFAULT
) -> int:
    """Vela's NPU cycles for MATMUL (n, h, c) x (n, c, w), the transpose Vela inserts for its second operand
    included; raises VelaUnsupported when Vela rejects it.

    The cost is not symmetric in h and w: Vela computes one output column at a time, so a product with few
    rows and many columns pays a per-column overhead (benchmarks/results/arm_modes.md).
    """
    return _measured(matmul_probe(n, h, c, w, dtype), config, cache_dir).cycles


def slice_probe(shape, start, size, dtype: str = "int8") -> ProbeGraph:
    """One SLICE of an input of `shape` (its result is the graph's output, so Vela must materialise it)."""
    b = ProbeBuilder()
    x = b.input(shape, dtype)
    bounds = [b.const(list(start), "shape"), b.const(list(size), "shape")]
    b.op("SLICE", [x, *bounds], size, dtype, "SliceAttribute")
    return b.build()


def measure_slice(shape, start, size, dtype: str = "int8", config: VelaConfig | None = None, cache_dir=_DEFAULT) -> int:
    """Vela's NPU cycles for a SLICE it cannot fuse into a consumer (a MemoryCopy); raises VelaUnsupported when
    Vela rejects it. Vela reads a slice straight into an elementwise, CONCAT or compute consumer, but copies it
    out first when a TRANSPOSE or RESHAPE reads it."""
    shape, start, size = (tuple(int(d) for d in v) for v in (shape, start, size))
    return _measured(slice_probe(shape, start, size, dtype), config, cache_dir).cycles


def pad_probe(shape, padding, dtype: str = "int8") -> ProbeGraph:
    """One PAD of an input of `shape`; `padding` is (before, after) per axis, flattened."""
    b = ProbeBuilder()
    x = b.input(shape, dtype)
    pads, value = b.const(list(padding), "shape"), b.const([0], dtype)
    out = [d + padding[2 * i] + padding[2 * i + 1] for i, d in enumerate(shape)]
    b.op("PAD", [x, pads, value], out, dtype, "PadAttribute")
    return b.build()


def measure_pad(shape, padding, dtype: str = "int8", config: VelaConfig | None = None, cache_dir=_DEFAULT) -> int:
    """Vela's NPU cycles for PAD(shape, padding); raises VelaUnsupported when Vela rejects it. Vela copies the
    input into the padded output and fills the borders, so the cost follows the physical order."""
    shape, padding = tuple(int(d) for d in shape), tuple(int(p) for p in padding)
    return _measured(pad_probe(shape, padding, dtype), config, cache_dir).cycles


def rescale_then_transpose_probe(shape, dtype_in: str, dtype_out: str) -> ProbeGraph:
    """RESCALE (per tensor) feeding a TRANSPOSE: Vela cannot fuse the RESCALE anywhere, so it runs standalone."""
    b = ProbeBuilder()
    x = b.input(shape, dtype_in)
    consts = [b.const([1 << 30], "int32"), b.const([30], "int8"), b.const([0], dtype_in), b.const([0], dtype_out)]
    _, scaled = b.op("RESCALE", [x, *consts], shape, dtype_out, "RescaleAttribute", scale32=True,
                     rounding_mode="RoundingMode.SINGLE_ROUND", per_channel=False, input_unsigned=False,
                     output_unsigned=False)  # fmt: skip
    perm = list(range(len(shape) - 3)) + [len(shape) - 2, len(shape) - 3, len(shape) - 1]
    b.op("TRANSPOSE", [scaled], [shape[p] for p in perm], dtype_out, "TransposeAttribute", perms=tuple(perm))
    return b.build()


def conv_then_rescale(b: ProbeBuilder, x: int, shape, out_channels: int) -> int:
    """A 1x1 CONV2D (int8 -> int32) of NHWC `x` and its RESCALE back to int8, as executorch's INT pipeline writes
    one; returns the int8 result."""
    import numpy as np

    n, h, w, c = shape
    weights = b.const(np.random.default_rng(0).integers(-50, 50, (out_channels, 1, 1, c)), "int8")
    inputs = [x, weights, b.const(np.zeros(out_channels), "int32"), b.const([0], "int8"), b.const([0], "int8")]
    _, y = b.op("CONV2D", inputs, [n, h, w, out_channels], "int32", "Conv2dAttribute", pad=[0, 0, 0, 0],
                stride=[1, 1], dilation=[1, 1], local_bound=False, acc_type="DType.INT32")  # fmt: skip
    scale = [b.const([1 << 30], "int32"), b.const([40], "int8"), b.const([0], "int32"), b.const([0], "int8")]
    return b.op("RESCALE", [y, *scale], [n, h, w, out_channels], "int8", "RescaleAttribute", scale32=True,
                rounding_mode="RoundingMode.SINGLE_ROUND", per_channel=False, input_unsigned=False,
                output_unsigned=False)[1]  # fmt: skip


def writes_transposes_in_place(config: VelaConfig | None = None, store: ProbeStore | None = None) -> bool:
    """Whether Vela writes a TRANSPOSE as the output of the op that computes its input on this configuration
    (Ethos-U85 does, Ethos-U55 does not): asked of Vela with a convolution whose result is transposed, whose
    TRANSPOSE row then has no cycles of its own."""
    shape = (1, 8, 8, 16)
    b = ProbeBuilder()
    y = conv_then_rescale(b, clamp_through(b, b.input(shape, "int8"), shape, "int8"), shape, 16)
    index, _ = b.op("TRANSPOSE", [y], [1, 16, 8, 8], "int8", "TransposeAttribute", perms=(0, 3, 1, 2))
    graph = b.build()
    network = compile_probe(graph, config, store=store)
    return not rejected(network) and network.cycles_of([graph.tosa_index(index)]) == 0


def transpose_as_given(shape, perm, dtype: str = "int8", config: VelaConfig | None = None) -> TransposeCost:
    """Vela's price of TRANSPOSE(shape, perm) exactly as written; one too large for an NPU transpose is priced as
    executorch's DecomposePermuteForU55Pass writes it (chunks Vela accepts, each element copied out and back)."""
    shape, perm = tuple(int(d) for d in shape), tuple(int(p) for p in perm)
    if ethos_u55.is_identity(perm):
        return TransposeCost(0.0, 0, shape, perm, "reshape")
    try:
        m = measure_transpose(shape, perm, dtype, config)
        return TransposeCost(float(m.cycles), m.npu_ops, shape, perm, "vela")
    except VelaUnsupported:
        pass
    chunks = ethos_u55._chunk_plan(list(shape), list(perm), dtype)
    cycles = sum(measure_transpose(c, perm, dtype, config).cycles for c in chunks)
    copies = 2 * copy_cycles(math.prod(shape), dtype, config)
    return TransposeCost(cycles + copies, len(chunks), shape, perm, "chunked")


def copy_cycles(elements: int, dtype: str = "int8", config: VelaConfig | None = None) -> float:
    """Vela's MemoryCopy of `elements` elements (what a reshape becomes when Vela cannot bypass it): a TRANSPOSE
    that only moves a unit axis compiles into exactly that copy."""
    return float(measure_transpose((1, int(elements)), (1, 0), dtype, config).cycles)


def transpose_cost(shape, perm, dtype: str = "int8", form: str = "cheapest", config: VelaConfig | None = None):
    """TRANSPOSE(shape, perm) in `form` (see ethos_u55.transpose_cost), every candidate priced by Vela."""
    return ethos_u55.transpose_cost(
        shape,
        perm,
        dtype,
        form=form,
        as_given=lambda s, p, d: transpose_as_given(s, p, d, config),
        copy=lambda e, d: copy_cycles(e, d, config),
    )
