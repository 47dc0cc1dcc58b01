"""Measure an Ethos-U55 lowering: TOSA transposes, Vela cycles, op placement.

`lower_ethos_u(model)` quantizes (PT2E int8, EthosUQuantizer, symmetric),
lowers with EthosUPartitioner, keeps every delegate's .tosa, runs Vela on each
with executorch's own U55 flags and reads the per-layer tables. The TOSA
TRANSPOSE operators (shape, permutation, dtype) are recorded by a pass
inserted at the end of the Arm pipeline through the public
`register_pass_insertions_after` hook; the global registry is restored on
every exit. The TOSA files Vela compiled are also read back (`tosa_ops`), so
the cost model's prediction for the whole lowering
(`cost_models.ethos_u55.graph_transposes`) can be set against Vela's Transpose
rows.
"""

from __future__ import annotations

import contextlib
import dataclasses
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from executorch.exir.pass_base import ExportPass, PassResult

from cost_models import ethos_u55
from cost_models.calibration.vela_runner import run_vela


class RecordTransposes(ExportPass):
    """Appends every tosa.TRANSPOSE (input shape, perm, dtype) to `sink`; changes nothing."""

    def __init__(self, sink: list[dict]):
        super().__init__()
        self.sink = sink

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and "TRANSPOSE" in str(node.target):
                val = node.args[0].meta["val"]
                self.sink.append({"node": node.name, "shape": [int(d) for d in val.shape],
                                  "perm": [int(p) for p in node.args[1]],
                                  "dtype": str(val.dtype).removeprefix("torch.")})
        return PassResult(graph_module, False)


def tosa_ops(tosa: bytes) -> list[ethos_u55.TosaOp]:
    """Every operator of a TOSA flatbuffer, with what the U55 transpose accounting needs."""
    from tosa.DType import DType
    from tosa.Op import Op
    from tosa.ReduceSumAttribute import ReduceSumAttribute
    from tosa.TosaGraph import TosaGraph
    from tosa.TransposeAttribute import TransposeAttribute

    names = {v: k for k, v in vars(Op).items() if not k.startswith("_")}
    dtypes = {v: k.lower() for k, v in vars(DType).items() if not k.startswith("_")}
    text = lambda b: b.decode() if isinstance(b, bytes) else b
    graph = TosaGraph.GetRootAs(tosa, 0)
    found = []
    for r in range(graph.RegionsLength()):
        region = graph.Regions(r)
        for b in range(region.BlocksLength()):
            block = region.Blocks(b)
            tensors = {text(block.Tensors(t).Name()): block.Tensors(t) for t in range(block.TensorsLength())}
            for o in range(block.OperatorsLength()):
                op = block.Operators(o)
                inputs = tuple(text(op.Inputs(i)) for i in range(op.InputsLength()))
                shapes = tuple(tuple(int(d) for d in tensors[t].ShapeAsNumpy()) if t in tensors and
                               not tensors[t].ShapeIsNone() else () for t in inputs)
                first = tensors.get(inputs[0]) if inputs else None
                extra = {}
                if op.Op() in (Op.TRANSPOSE, Op.REDUCE_SUM):
                    attr = TransposeAttribute() if op.Op() == Op.TRANSPOSE else ReduceSumAttribute()
                    attr.Init(op.Attribute().Bytes, op.Attribute().Pos)
                    extra = {"perm": tuple(int(p) for p in attr.PermsAsNumpy())} if op.Op() == Op.TRANSPOSE \
                        else {"axis": int(attr.Axis())}
                found.append(ethos_u55.TosaOp(
                    names.get(op.Op(), str(op.Op())), inputs, tuple(text(op.Outputs(i)) for i in range(op.OutputsLength())),
                    shapes, dtypes.get(first.Type(), "other") if first is not None else "other", **extra))
    return found


@contextlib.contextmanager
def inserted_passes(before: dict | None = None, after: dict | None = None) -> Iterator[None]:
    """Scoped insertion into the Arm pipeline via its public (but global) registry.

    `before` / `after` map a stock pass type to the passes to insert. The
    registry is put back exactly as found on every exit, exceptions included.
    """
    from executorch.backends.arm._passes import arm_pass_manager as apm

    # Copy the containers, keep the user's own pass instances.
    saved = {target: dataclasses.replace(ins, before_passes=list(ins.before_passes), after_passes=list(ins.after_passes))
             for target, ins in apm._registered_pass_insertions.items()}
    try:
        for target, passes in (before or {}).items():
            apm.register_pass_insertions_before(target, list(passes))
        for target, passes in (after or {}).items():
            apm.register_pass_insertions_after(target, list(passes))
        yield
    finally:
        apm.clear_registered_pass_insertions()
        apm._registered_pass_insertions.update(saved)


@contextlib.contextmanager
def recording_transposes() -> Iterator[list[dict]]:
    """Inside the block, every Arm lowering appends its TOSA TRANSPOSEs (shape, perm, dtype) to the yielded list."""
    from executorch.backends.arm._passes.ensure_unique_output_nodes_pass import EnsureUniqueOutputNodesPass

    sink: list[dict] = []
    with inserted_passes(after={EnsureUniqueOutputNodesPass: [RecordTransposes(sink)]}):
        yield sink


@dataclass
class EthosULowering:
    """One measured Ethos-U lowering: its transposes, Vela's per-layer rows, CPU ops and the kept .tosa files."""

    lower_seconds: float
    transposes: list[dict]
    vela_rows: list[dict] = field(default_factory=list)
    cpu_ops: int = 0
    tosa_files: list[Path] = field(default_factory=list)
    tosa_ops: list[list] = field(default_factory=list)  # per delegate: its TOSA operators, read back

    @property
    def npu_rows(self) -> list[dict]:
        return [r for r in self.vela_rows if r["Target"] == "NPU"]

    def metrics(self) -> dict:
        transpose_rows = [r for r in self.npu_rows if r["NNG Operator"] == "Transpose"]
        return {
            "tosa_transposes": len(self.transposes),
            "vela_transpose_rows": len(transpose_rows),
            "vela_transpose_cycles": sum(int(float(r["Op Cycles"])) for r in transpose_rows),
            "vela_total_cycles": sum(int(float(r["Op Cycles"])) for r in self.npu_rows),
            "npu_ops": len(self.npu_rows),
            "cpu_ops": self.cpu_ops,
            "lower_seconds": round(self.lower_seconds, 3),
            "predicted_transpose_cycles": round(sum(t.cycles for ops in self.tosa_ops
                                                    for t in ethos_u55.graph_transposes(ops)), 1),
        }


def quantize(module: torch.nn.Module, inputs: tuple, spec):
    """PT2E int8 (EthosUQuantizer, symmetric), calibrated on `inputs`: the exported quantized program."""
    from executorch.backends.arm.quantizer import EthosUQuantizer, get_symmetric_quantization_config
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = EthosUQuantizer(spec)
    quantizer.set_global(get_symmetric_quantization_config())
    exported = torch.export.export(module, inputs)
    prepared = prepare_pt2e(exported.module(check_guards=False), quantizer)  # torch 2.13: no guards
    prepared(*inputs)
    return torch.export.export(convert_pt2e(prepared), inputs)


def quantize_for(module: torch.nn.Module, inputs: tuple, target: str = "ethos-u55-128"):
    """The int8 exported program `lower_ethos_u` would lower for `target` (to lower several times from one)."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec

    return quantize(module, inputs, EthosUCompileSpec(target))


def lower_ethos_u(module: torch.nn.Module, inputs: tuple, target: str = "ethos-u55-128",
                  keep_tosa: Path | None = None, quantized=None) -> EthosULowering:
    """Quantize (unless given the `quantized` exported program, which is consumed) and lower with the Arm
    pipeline as configured by any active context (e.g. canonical_transposes()); copy each delegate's .tosa
    into `keep_tosa` if given."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
    from executorch.exir import to_edge_transform_and_lower

    with tempfile.TemporaryDirectory() as tmp:
        spec = EthosUCompileSpec(target).dump_intermediate_artifacts_to(tmp)
        if quantized is None:
            quantized = quantize(module, inputs, spec)
        start = time.perf_counter()
        with recording_transposes() as transposes:
            program = to_edge_transform_and_lower(quantized, partitioner=[EthosUPartitioner(spec)])
        elapsed = time.perf_counter() - start
        graph = program.exported_program().graph_module.graph
        cpu_ops = sum(1 for n in graph.nodes if n.op == "call_function" and "delegate" not in str(n.target)
                      and "getitem" not in str(n.target))
        rows = []
        files = sorted(Path(tmp).glob("output_tag*.tosa"), key=lambda f: int(f.name.split("_tag")[1].split("_")[0]))
        kept, graphs = [], []
        for tosa in files:
            graphs.append(tosa_ops(tosa.read_bytes()))
            with tempfile.TemporaryDirectory() as work:
                rows += run_vela(tosa.read_bytes(), Path(work))
            if keep_tosa is not None:
                keep_tosa.mkdir(parents=True, exist_ok=True)
                kept.append(keep_tosa / tosa.name)
                kept[-1].write_bytes(tosa.read_bytes())
        return EthosULowering(elapsed, list(transposes), rows, cpu_ops, kept, graphs)
