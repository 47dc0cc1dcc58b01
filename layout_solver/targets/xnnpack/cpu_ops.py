"""The CPU kernels an XNNPACK program runs between its delegates, each priced by running it on this CPU.

ExecuTorch's portable kernels take a fast path or a generic per-element one depending on the exact shapes (a
`where` whose condition broadcasts over the last dim runs 5x slower per element than one of equal shapes; an
`expand_copy` along a leading dim is a memcpy, along the last one a gather), so no per-class curve prices them in
general. Each distinct kernel call (op, tensor shapes, dtypes and dim orders, other arguments) is run once as a
one-kernel program, timed by ETDump (the mean of `RUNS` runs), and kept in a JSON cache per CPU
(`CpuOpTimes`): the first lowering of a model pays one probe per new kernel (about 0.3 s), later ones none.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
from dataclasses import dataclass, field
from pathlib import Path

import torch

from graph_io.fx import tensor_of

RUNS = 30
# Views of the program run as ExecuTorch's et_view (memory planning aliases them): a kernel call, no work.
FREE = ("view_copy.default", "alias_copy.default")
# How the lowering names the k-th lowered module it attaches to a graph (`executorch.exir.delegate.
# get_lowered_module_name`): the first free `lowered_module_<i>`, so in the order the delegates were made.
LOWERED_MODULE = "lowered_module_"


@dataclass(frozen=True)
class TensorSpec:
    """A tensor argument: shape, dtype, and whether it is stored channels-last."""

    shape: tuple[int, ...]
    dtype: str
    channels_last: bool = False

    def make(self, generator: torch.Generator) -> torch.Tensor:
        """A tensor of this spec: normal floats, random booleans, zeros for integers (valid as any index)."""
        dtype = getattr(torch, self.dtype)
        if dtype.is_floating_point:
            out = torch.randn(self.shape, generator=generator).to(dtype)
        elif dtype == torch.bool:
            out = torch.rand(self.shape, generator=generator) > 0.5
        else:
            out = torch.zeros(self.shape, dtype=dtype)
        return out.to(memory_format=torch.channels_last) if self.channels_last else out


@dataclass(frozen=True)
class CpuOp:
    """One kernel call of a program: the op's qualified name ("aten.where.self"), its arguments (TensorSpec, a
    tuple of them, or a constant) and keyword arguments."""

    op: str
    args: tuple
    kwargs: tuple

    @property
    def key(self) -> str:
        """A stable digest of the call (the cache's key)."""
        return hashlib.sha256(repr((self.op, self.args, self.kwargs)).encode()).hexdigest()[:20]

    @property
    def name(self) -> str:
        """The op's name ("where"), as ETDump's event names it ("native_call_where.self_out")."""
        return self.op.split(".")[1]

    @property
    def free(self) -> bool:
        """A view: no kernel work (priced by the per-kernel overhead alone)."""
        return ".".join(self.op.split(".")[1:]) in FREE

    def resolve(self):
        """The torch op overload."""
        namespace, name, overload = self.op.split(".")
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)


def _spec(value):
    """An fx argument as a CpuOp argument (None where it is not static: a symbolic size)."""
    if isinstance(value, torch.fx.Node):
        val = tensor_of(value)
        if val is None:
            return _spec(value.meta.get("val"))
        channels_last = val.dim() == 4 and val.dim_order() == (0, 2, 3, 1)
        return TensorSpec(tuple(int(d) for d in val.shape), str(val.dtype).removeprefix("torch."), channels_last)
    if isinstance(value, (list, tuple)):
        return tuple(_spec(v) for v in value)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise TypeError("symbolic size")
    return value


def cpu_op(node) -> CpuOp | None:
    """The kernel call of an edge-program node that runs on the CPU; None where it calls no op overload (a Python
    operator on sizes) or its shapes are not static."""
    target = getattr(node.target, "_op", node.target)
    if not isinstance(target, torch._ops.OpOverload):
        return None
    try:
        return CpuOp(str(target), _spec(tuple(node.args)), tuple(sorted((k, _spec(v)) for k, v in node.kwargs.items())))
    except TypeError:
        return None


def _build(op: CpuOp):
    """A module calling the op on its tensor arguments, and those arguments."""
    generator = torch.Generator().manual_seed(0)
    inputs: list[torch.Tensor] = []

    def placeholder(value):
        if isinstance(value, TensorSpec):
            inputs.append(value.make(generator))
            return len(inputs) - 1
        if isinstance(value, tuple):
            return tuple(placeholder(v) for v in value)
        return ("const", value)

    slots = [placeholder(a) for a in op.args]
    kwargs = dict(op.kwargs)
    target = op.resolve()

    def fill(slot, xs):
        if isinstance(slot, int):
            return xs[slot]
        if isinstance(slot, tuple) and slot and slot[0] == "const":
            return slot[1]
        return [fill(s, xs) for s in slot]

    class Probe(torch.nn.Module):
        def forward(self, *xs):
            return target(*[fill(s, xs) for s in slots], **kwargs)

    return Probe(), tuple(inputs)


def probe_us(op: CpuOp, threads: int, runs: int = RUNS) -> float:
    """The op's kernel microseconds per call on this CPU at `threads` (its ETDump events, the mean of `runs`)."""
    from executorch.exir import to_edge

    from layout_solver.lowering.quiet import quiet
    from layout_solver.targets.xnnpack.runtime import etdump_events, per_run_ms

    module, inputs = _build(op)
    with quiet():
        buffer = to_edge(torch.export.export(module, inputs)).to_executorch().buffer
    events = etdump_events(buffer, inputs, threads, runs)
    mine = [raw for name, raw in events.items() if name.startswith(f"native_call_{op.name}.")]
    return sum(per_run_ms(raw, runs) for raw in mine) * 1e3


# How the times were taken; a cache's entries from an older way are probed again. 2: torch's own pool held to one
# thread while a probe runs (`runtime.pinned`; before, its spinning worker slowed 2-thread probes up to 2x).
TIMING_VERSION = 2


def default_cache() -> Path:
    """$LAYOUT_SOLVER_CACHE (else ~/.cache/layout-solver)/xnnpack_cpu_ops.json."""
    root = Path(os.environ.get("LAYOUT_SOLVER_CACHE", Path.home() / ".cache" / "layout-solver"))
    return root / "xnnpack_cpu_ops.json"


def device_key() -> str:
    """What the cache's times are valid for: this CPU, and the kernels' versions."""
    from importlib.metadata import version

    from cost_models.xnnpack import cpu_model

    return (f"{platform.machine()} {cpu_model()} | executorch {version('executorch')} | torch {torch.__version__}"
            f" | timing {TIMING_VERSION}")  # fmt: skip


class CpuOpTimes:
    """Measured kernel times by (device, threads, call key), read from and written to one JSON file (atomically,
    under a lock within the process); a key not there is probed."""

    _lock = threading.Lock()

    def __init__(self, path: Path | None = None):
        self.path = Path(path) if path else default_cache()
        self.device = device_key()
        self.probed = 0

    def _load(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def times(self, ops: list[CpuOp], threads: int) -> dict[str, float]:
        """Microseconds per call of each op (keyed by `CpuOp.key`), probing the ones the cache lacks; an op whose
        probe fails is left out (the run-time model prices it by its class)."""
        with self._lock:
            table = self._load()
            mine = table.setdefault(self.device, {}).setdefault(str(threads), {})
            missing = {op.key: op for op in ops if op.key not in mine and not op.free}
            for key, op in missing.items():
                try:
                    mine[key] = round(probe_us(op, threads), 3)
                except Exception:  # noqa: BLE001 - a kernel that cannot run alone is priced by its class
                    mine[key] = None
                self.probed += 1
            if missing:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
                tmp.write_text(json.dumps(table, indent=0, sort_keys=True))
                tmp.replace(self.path)
            return {op.key: (0.0 if op.free else mine[op.key]) for op in ops if op.free or mine.get(op.key) is not None}


@dataclass
class ProgramOps:
    """What an edge program (after partitioning) runs outside its delegates: each CPU kernel as the run-time
    model sees it (`cost_models.xnnpack.PredictedOp`, keyed to its call), the calls by key, the KiB of the
    program's inputs and outputs, and each delegate call's lowered module by name, in the order the program calls
    them."""

    ops: list
    calls: dict
    io_kib: float
    called: list = field(default_factory=list)

    @property
    def delegates(self) -> int:
        """How many delegate calls the program makes."""
        return len(self.called)

    def run_ops(self, delegate_ops: list[list]) -> list:
        """Every op the program runs: each delegate's (`delegate_ops`, one list per delegate in the order the
        lowering made them, its reports' order) placed at its call (`PredictedOp.segment`), then the CPU kernels.
        The lowering names its k-th delegate `lowered_module_k`; where the calls do not name each delegate once so,
        the delegates' operators stay unplaced (the run-time model then takes each call as one block)."""
        names = [f"{LOWERED_MODULE}{k}" for k in range(len(delegate_ops))]
        if sorted(self.called) != sorted(names):
            return [op for ops in delegate_ops for op in ops] + self.ops
        call_of = {name: call for call, name in enumerate(self.called)}
        placed = [op._replace(segment=call_of[name]) for name, ops in zip(names, delegate_ops) for op in ops]
        return placed + self.ops


def program_ops(exported_program) -> ProgramOps:
    """Read an edge program lowered to XNNPACK (`to_edge_transform_and_lower(...).exported_program()`)."""
    from cost_models import xnnpack as xnn_cost

    graph = exported_program.graph_module.graph
    user = set(exported_program.graph_signature.user_inputs) | set(exported_program.graph_signature.user_outputs)
    io_bytes = sum(_bytes(n) for n in graph.nodes if n.name in user)
    io_bytes += sum(_bytes(n) for n in graph.output_node().all_input_nodes if n.op != "placeholder")
    out = ProgramOps([], {}, 0.0)
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        name = getattr(node.target, "__name__", str(node.target))
        if name == "executorch_call_delegate":
            out.called.append(str(node.args[0].target))
            continue
        if name == "getitem":
            continue
        call = cpu_op(node)
        first = next((a for a in (call.args if call else ()) if isinstance(a, TensorSpec)), None)
        op_class = f"{xnn_cost.CPU_PREFIX}{call.name if call else name.split('.')[-1]}" + (
            "@channels_last" if first and first.channels_last else ""
        )
        work = max([_numel(node), *(_numel(a) for a in node.all_input_nodes)])
        val = tensor_of(node)
        elem = val.element_size() if val is not None else 4
        out.ops.append(xnn_cost.PredictedOp(op_class, float(work), elem, False, call.key if call else "",
                                            segment=out.delegates))  # fmt: skip
        if call is not None:
            out.calls[call.key] = call
    out.io_kib = io_bytes / 1024
    return out


def _numel(node) -> int:
    val = tensor_of(node)
    return int(val.numel()) if val is not None else 0


def _bytes(node) -> int:
    val = tensor_of(node)
    return int(val.numel()) * val.element_size() if val is not None else 0
