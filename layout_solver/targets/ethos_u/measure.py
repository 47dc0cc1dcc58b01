"""Measure an Ethos-U55 lowering: TOSA transposes, Vela cycles, op placement.

`lower_ethos_u(model)` quantizes (PT2E int8, EthosUQuantizer, symmetric),
lowers with EthosUPartitioner, keeps every delegate's .tosa, runs Vela's
command line on each with the lowering's own compile-spec flags (the target's
accelerator, system config and memory mode) and reads the per-layer tables. The TOSA
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
import re
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import torch
from executorch.exir.pass_base import ExportPass, PassResult

from cost_models import ethos_u55
from cost_models.vela import run_vela
from graph_io.fx import dtype_name
from graph_io.tosa import tosa_ops
from layout_solver.arm.hooks import inserted_passes


class RecordTransposes(ExportPass):
    """Appends every tosa.TRANSPOSE (input shape, perm, dtype) to `sink`; changes nothing."""

    def __init__(self, sink: list[dict]):
        super().__init__()
        self.sink = sink

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        for node in graph_module.graph.nodes:
            if node.op == "call_function" and "TRANSPOSE" in str(node.target):
                val = node.args[0].meta["val"]
                self.sink.append(
                    {
                        "node": node.name,
                        "shape": [int(d) for d in val.shape],
                        "perm": [int(p) for p in node.args[1]],
                        "dtype": dtype_name(val),
                    }
                )
        return PassResult(graph_module, False)


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
    program: object = None  # the EdgeProgramManager (to run it against the quantized eager model)
    vela_rows_by_delegate: list[list[dict]] = field(default_factory=list)  # vela_rows, delegate by delegate
    lower_cpu_seconds: float = 0.0  # CPU time of the lowering, all of this process's threads

    @property
    def npu_rows(self) -> list[dict]:
        """Vela's per-layer rows that run on the NPU."""
        return [r for r in self.vela_rows if r["Target"] == "NPU"]

    def metrics(self) -> dict:
        """The lowering's figures: TOSA transposes, Vela transpose rows and cycles, total NPU cycles, ops on NPU and
        CPU, lowering time, the cost model's prediction.
        """
        transpose_rows = [r for r in self.npu_rows if r["NNG Operator"] == "Transpose"]
        predicted = [t for ops in self.tosa_ops for t in ethos_u55.graph_transposes(ops)]
        return {
            # counted in the delegates' TOSA (a verified lowering runs the pipeline twice; its files are the kept one)
            "tosa_transposes": sum(op.op == "TRANSPOSE" for ops in self.tosa_ops for op in ops),
            "vela_transpose_rows": len(transpose_rows),
            "vela_transpose_cycles": sum(int(float(r["Op Cycles"])) for r in transpose_rows),
            "vela_total_cycles": sum(int(float(r["Op Cycles"])) for r in self.npu_rows),
            "npu_ops": len(self.npu_rows),
            "cpu_ops": self.cpu_ops,
            "lower_seconds": round(self.lower_seconds, 3),
            "predicted_transpose_cycles": round(sum(t.cycles for t in predicted), 1),
            "transpose_cycles_by_cause": transpose_cycles_by_cause(predicted),
            "vela_cycles_by_op": self.cycles_by_op(),
        }

    def cycles_by_op(self) -> dict[str, int]:
        """Vela's NPU cycles by the TOSA operator each row came from (Vela's names: "Conv2D", "Rescale", ...;
        the transpose Vela inserts before a REDUCE_SUM counts as "ReduceSum")."""
        totals: dict[str, int] = {}
        for r in self.npu_rows:
            key = r.get("Original Operator") or r["NNG Operator"]
            totals[key] = totals.get(key, 0) + int(float(r["Op Cycles"]))
        return dict(sorted(totals.items(), key=lambda kv: -kv[1]))


CAUSES = ("graph_input", "graph_output", "matmul_operand", "reduction_axis", "inside")


def transpose_cycles_by_cause(transposes: list[ethos_u55.GraphTranspose]) -> dict[str, float]:
    """The cost model's transpose cycles split by what put them there: the delegate's input or output contract
    (a transpose next to a delegate input/output), Vela itself (MATMUL's second operand, a REDUCE_SUM along a
    non-innermost axis), or the layout inside the graph."""
    totals = dict.fromkeys(CAUSES, 0.0)
    for t in transposes:
        cause = {"matmul operand": "matmul_operand", "reduce_sum": "reduction_axis"}.get(t.reason)
        totals[cause or t.site.replace(" ", "_")] += t.cycles
    return {k: round(v, 1) for k, v in totals.items()}


def _delegate_order(tosa: Path) -> int:
    """Sort key of a dumped delegate: its partition tag's number. A delegate of constants only (no node carries
    a delegation tag) is dumped untagged ("output_TOSA-...tosa") and comes first."""
    match = re.match(r"output_tag(\d+)_", tosa.name)
    return int(match.group(1)) if match else -1


def quantize(module: torch.nn.Module, inputs: tuple, spec):
    """PT2E int8 (symmetric), calibrated on `inputs`, with the quantizer of `spec`'s pipeline (EthosUQuantizer
    for an Ethos-U compile spec, TOSAQuantizer for a TOSA one): the exported quantized program."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec
    from executorch.backends.arm.quantizer import EthosUQuantizer, TOSAQuantizer, get_symmetric_quantization_config
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = (EthosUQuantizer if isinstance(spec, EthosUCompileSpec) else TOSAQuantizer)(spec)
    quantizer.set_global(get_symmetric_quantization_config())
    exported = torch.export.export(module, inputs)
    prepared = prepare_pt2e(exported.module(check_guards=False), quantizer)  # torch 2.13: no guards
    prepared(*inputs)
    return _leaf_constants(torch.export.export(convert_pt2e(prepared), inputs))


def _leaf_constants(program):
    """`program` with every constant a leaf tensor. A constant the model computed with autograd on (flaubert's
    and xlm's position embeddings, lifted by export as `_tensor_constant0`) keeps its grad_fn, and deepcopy
    refuses it, so no copy of the program could be lowered; its values are what is kept."""
    stores = (program._state_dict, program.constants, program.graph_module.__dict__, program.graph_module._buffers)
    for store in stores:
        for name, value in list(store.items()):
            if isinstance(value, torch.Tensor) and not value.is_leaf:
                store[name] = value.detach()
    return program


def quantize_for(module: torch.nn.Module, inputs: tuple, target: str = "ethos-u55-128"):
    """The int8 exported program `lower_ethos_u` would lower for `target` (to lower several times from one)."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec

    return quantize(module, inputs, EthosUCompileSpec(target))


def lower_ethos_u(
    module: torch.nn.Module, inputs: tuple, target: str = "ethos-u55-128", keep_tosa: Path | None = None, quantized=None
) -> EthosULowering:
    """Quantize (unless given the `quantized` exported program, which is consumed) and lower with the Arm
    pipeline as configured by any active context (e.g. canonical_transposes()); copy each delegate's .tosa
    into `keep_tosa` if given."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec, EthosUPartitioner
    from executorch.exir import to_edge_transform_and_lower

    with tempfile.TemporaryDirectory() as tmp:
        spec = EthosUCompileSpec(target).dump_intermediate_artifacts_to(tmp)
        if quantized is None:
            quantized = quantize(module, inputs, spec)
        start, cpu_start = time.perf_counter(), time.process_time()
        with recording_transposes() as transposes:
            program = to_edge_transform_and_lower(quantized, partitioner=[EthosUPartitioner(spec)])
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        graph = program.exported_program().graph_module.graph
        cpu_ops = sum(
            1
            for n in graph.nodes
            if n.op == "call_function" and "delegate" not in str(n.target) and "getitem" not in str(n.target)
        )
        rows = []
        files = sorted(Path(tmp).glob("output*.tosa"), key=_delegate_order)
        kept, graphs, rows_by_delegate = [], [], []
        for tosa in files:
            graphs.append(tosa_ops(tosa.read_bytes()))
            with tempfile.TemporaryDirectory() as work:
                rows_by_delegate.append(run_vela(tosa.read_bytes(), Path(work), tuple(spec.compiler_flags)))
                rows += rows_by_delegate[-1]
            if keep_tosa is not None:
                keep_tosa.mkdir(parents=True, exist_ok=True)
                kept.append(keep_tosa / tosa.name)
                kept[-1].write_bytes(tosa.read_bytes())
        return EthosULowering(elapsed, list(transposes), rows, cpu_ops, kept, graphs, program, rows_by_delegate, cpu)


INPUT_ORDERS = ("nchw", "nhwc")


def declare_input_order(inputs: tuple, order: str) -> tuple:
    """The example inputs with the application's graph-input contract: "nchw" (the default: the delegate
    reads the logical order) or "nhwc" (4-D inputs arrive channels-last). ExecuTorch carries the
    contract as the inputs' dim order (its NormalizeDelegateIOLayoutPass makes the delegate read the
    physical order), so stock and solver lower under the same contract."""
    import torch

    if order not in INPUT_ORDERS:
        raise ValueError(f"unknown input order {order!r}; expected one of {INPUT_ORDERS}")
    if order == "nchw":
        return inputs
    return tuple(
        t.to(memory_format=torch.channels_last) if isinstance(t, torch.Tensor) and t.dim() == 4 else t for t in inputs
    )


def solver_metrics(reports: list) -> dict:
    """The solver side's figures from its pass reports: timings, objective (the predicted NPU cycles of the
    delegates the stage laid out), bound and gap, what priced them, and how verification went: each delegate's
    Vela totals both ways and how many kept stock's layout."""
    solved = [r for r in reports if r.objective is not None]
    checked = [r.vela_check for r in reports if r.vela_check]
    metrics = {
        "solve_seconds": round(sum(r.solve_seconds for r in solved), 4),
        "pass_seconds": round(sum(r.pass_seconds for r in solved), 4),
        "objective": round(sum(r.objective for r in solved), 1),
        "bound": round(sum(r.bound for r in solved), 1),
        "gap": max((r.gap for r in solved), default=0.0),
        "pinned_unknown": [p for r in solved for p in r.pinned_unknown],
        "problem_ops": sum(r.problem_ops for r in solved),
        "solver_notes": [n for r in reports for n in r.notes],
        "modes_chosen": dict(sum((r.modes_chosen for r in solved), Counter())),
        "pricing": ", ".join(sorted({r.pricing for r in solved if r.pricing})),
        "unpriced": [u for r in solved for u in r.unpriced],
    }
    if solved and all(r.pricing.startswith("vela") for r in solved):
        metrics["predicted_total_cycles"] = metrics["objective"]
        metrics["predicted_cycles_by_op"] = dict(sum((r.predicted_by_op for r in solved), Counter()).most_common())
    if checked and len(checked) == len(reports):
        metrics.update(
            verified_stock_cycles=sum(c["stock_cycles"] for c in checked),
            # None where Vela could not compile the stage's layout of a delegate (that delegate kept stock's)
            verified_solver_cycles=None
            if any(c["solver_cycles"] is None for c in checked)
            else sum(c["solver_cycles"] for c in checked),
            delegates_kept_stock=sum(c["kept"] == "stock" for c in checked),
            verification_cached=all(c["cached"] for c in checked),
        )
    return metrics
