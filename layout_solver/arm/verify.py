"""Never hand back a delegate dearer than stock's: lower it both ways, let the target's compiler price both, keep
the cheaper, and remember the decision.

`preprocess_verified` stands in for EthosUBackend.preprocess inside `solver_layouts(verify="vela")` (the
default). For each delegate it first looks the decision up by the delegate's content (its graph, tensor
shapes and constant data, the compile flags, the tool versions and this project's source): a known delegate
is lowered once, the way that won. An unknown one is lowered with the stage and without it; Vela's compiler
core prices both TOSA graphs for the delegate's own configuration; the cheaper is kept (the stock one on a
tie) and the decision stored. Every report of the delegate carries both totals in `vela_check`. The passes
both sides share (every one before the first the stage changes) run once, and stock's side runs from there in
a forked child beside the stage's side (`pipeline_fork.PipelineFork`), so on two cores the first lowering of a
model costs about one stock lowering (0.94-1.09x on five zoo models for ethos-u55-128,
benchmarks/results/compile_time.md), and every later one one.

Every Vela compile whose cycles or bytes the stage keeps runs in a child process with address-space
randomization off (`cost_models.vela.run_vela_child`): Vela 5.1.0 can otherwise compile one TOSA graph to
different command streams from run to run (benchmarks/results/determinism.md).

A stage's side that fails after the sides part (a pass raising on the stage's graph) keeps stock's program,
with a warning and the reason in `vela_check`; the lowering goes on.

`verify="model"` skips the comparison: the stage's own whole-delegate pricing decides alone.
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import hashlib
import json
import os
import shutil
import tempfile
import warnings
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from cost_models.store import JsonStore, default_store
from cost_models.vela import VelaUnsupported, compile_network_isolated, vela_config, vela_main_in_child
from layout_solver.lowering.provenance import graph_content, source_digest, tensor_bytes, tool_versions


def delegate_digest(edge_program, flags) -> str:
    """A digest of everything that decides how a delegate lowers: its graph (nodes and tensor metadata), its
    constants' values, the compile flags, the tool versions and the source of the code an Arm lowering reads."""
    digest = hashlib.sha1(graph_content(edge_program.graph.nodes))
    for name, tensor in sorted({**edge_program.state_dict, **edge_program.constants}.items()):
        digest.update(name.encode())
        if hasattr(tensor, "detach"):
            digest.update(tensor_bytes(tensor))
    digest.update(json.dumps([list(flags), tool_versions(), source_digest("arm")]).encode())
    return digest.hexdigest()


@dataclass(frozen=True)
class Decision:
    """How one delegate was lowered: the side kept and both sides' Vela totals."""

    kept: str  # "solver" or "stock"
    stock_cycles: int
    solver_cycles: int | None  # None: Vela could not compile the stage's layout (`why`)
    why: str = ""
    # The stage's own pricing of its layout, one entry per solver report (PREDICTED fields), so a later lowering
    # that keeps stock's without running the stage still reports what the stage predicted for the delegate.
    predictions: tuple[dict, ...] = ()

    def as_check(self, cached: bool) -> dict:
        """The report's `vela_check`: both totals, the side kept, whether the decision was stored before."""
        return {"stock_cycles": self.stock_cycles, "solver_cycles": self.solver_cycles, "kept": self.kept,
                "cached": cached, **({"why": self.why} if self.why else {})}  # fmt: skip


class DecisionStore(JsonStore):
    """Decisions on disk (`decisions.sqlite` in `directory`; in memory only if None)."""

    def __init__(self, directory: Path | None):
        super().__init__(directory, "decisions")

    def get(self, key: str) -> Decision | None:
        """The stored decision of `key`, or None."""
        found = super().get(key)
        return None if found is None else Decision(**{**found, "predictions": tuple(found.get("predictions", ()))})

    def put(self, key: str, decision: Decision) -> None:
        """Store `decision` under `key` (memory and disk)."""
        super().put(key, decision.__dict__)


def default_decisions() -> DecisionStore:
    """The process-wide decision store in `cost_models.store.cache_folder()`, beside the probes."""
    return default_store("decisions", DecisionStore)


def _dumped(folder: str | None) -> dict[Path, bytes]:
    """The TOSA files in the artifacts folder (none if there is no folder)."""
    return {p: p.read_bytes() for p in Path(folder).glob("*.tosa")} if folder else {}


def _written(folder: str | None, before: dict[Path, bytes]) -> dict[Path, bytes]:
    """The TOSA files in the folder that differ from `before` (written since)."""
    return {p: b for p, b in _dumped(folder).items() if before.get(p) != b}


def _put_back(written: dict[Path, bytes], contents: dict[Path, bytes]) -> None:
    """Each file in `written` back to its content in `contents` (removed if it has none there)."""
    for path in written:
        path.unlink(missing_ok=True) if contents.get(path) is None else path.write_bytes(contents[path])


def preprocess_verified(preprocess, edge_program, compile_specs, spec, reports: list, stage_off,
                        settings: str = "", store: DecisionStore | None = None):  # fmt: skip
    """EthosUBackend.preprocess(edge_program, compile_specs) for the cheaper of the stage's layout and stock's,
    as described in the module docstring. `preprocess` is the original; `stage_off()` the hooks' scoped switch
    that lowers the stock way; `settings` names the stage's options, part of the decision's key.

    A new delegate runs the TOSA pipeline both ways (the passes before the first one the stage changes once:
    `pipeline_fork.PipelineFork`) but hands Vela's command line only the TOSA it keeps, so whatever watches the
    lowering (a recorder of the flatbuffers Vela compiles, the artifacts folder) sees one delegate, as
    without verification."""
    from executorch.backends.arm.tosa.backend import TOSABackend

    from layout_solver.arm.pipeline_fork import PipelineFork, StockSideInChild, forked

    store = store if store is not None else default_decisions()
    key = delegate_digest(edge_program, [*spec.compiler_flags, settings])
    first = len(reports)
    known = store.get(key)
    if known is not None:
        with stage_off() if known.kept == "stock" else vela_in_child():
            result = preprocess(edge_program, compile_specs)
        _annotate(reports[first:], known, cached=True)
        return result
    tosa_spec = TOSABackend.filter_tosa_compile_specs(spec)
    folder = spec._get_intermediate_path()
    # The artifacts folder shows the kept program only: each side's files are set aside, and the folder put back
    # as it was, before the other side runs.
    before = _dumped(folder)
    # The stage's side first: the passes both sides share (most of the pipeline) run once, on its side; from
    # where the sides part, stock's runs in a child process at the same time, writing its artifacts to a folder
    # of its own (moved into the artifacts folder once the stage's files are set aside, as if written then).
    aside = tempfile.TemporaryDirectory(prefix="layout-solver-stock-side-") if folder is not None else None
    child_spec = tosa_spec if aside is None else copy.copy(tosa_spec).dump_intermediate_artifacts_to(aside.name)
    with forked(PipelineFork(in_child=(os.cpu_count() or 1) > 1)) as fork, aside or contextlib.nullcontext():
        try:
            solver, failed = TOSABackend._preprocess(edge_program, tosa_spec).processed_bytes, None
        except StockSideInChild:  # this is the child: stock's side, from the copy taken at the fork
            with stage_off():
                fork.serve_stock_side(lambda: TOSABackend._preprocess(fork.program, child_spec).processed_bytes)
        except Exception as exc:  # the stage's side alone failed: stock's is the legal answer
            if fork.program is None:
                raise  # before the sides part: stock's lowering fails the same way
            while exc.__cause__ is not None:  # the pass manager wraps a pass's error in one naming no pass
                exc = exc.__cause__
            solver, failed = None, f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
        by_solver = _written(folder, before)
        _put_back(by_solver, before)
        stock = fork.stock_from_child()
        if stock is not None and aside is not None:
            for written in Path(aside.name).iterdir():
                shutil.copyfile(written, Path(folder) / written.name)
        elif stock is None:  # no child (or it failed): stock's side here, as the child would have
            with stage_off():
                stock = TOSABackend._preprocess(fork.program, tosa_spec).processed_bytes
    by_stock = _written(folder, before)
    config = vela_config(tuple(spec.compiler_flags))
    # Both sides priced at once, each in a child with fixed addresses (Vela's cycles can depend on them): the
    # stage's TOSA is new to Vela, and a crash in its compiler core must not take the lowering with it.
    with ThreadPoolExecutor(2) as pool:
        stock_priced = pool.submit(compile_network_isolated, stock, config)
        solver_priced = None if failed is not None else pool.submit(compile_network_isolated, solver, config)
        stock_cycles = stock_priced.result().cycles
    predictions = _predictions(reports[first:])
    if failed is not None:
        decision = Decision(
            "stock", stock_cycles, None, f"the stage's side of the lowering failed: {failed}", predictions
        )
    else:
        try:
            solver_cycles = solver_priced.result().cycles
        except VelaUnsupported as exc:
            decision = Decision(
                "stock", stock_cycles, None, f"Vela could not compile the stage's layout: {exc}", predictions
            )
        else:
            kept = "solver" if solver_cycles < stock_cycles else "stock"
            decision = Decision(kept, stock_cycles, solver_cycles, predictions=predictions)
    if decision.solver_cycles is None:
        warnings.warn(f"layout-solver: {decision.why}; the delegate keeps stock's layout", stacklevel=2)
    store.put(key, decision)
    if decision.kept == "solver":  # the folder holds stock's files: back to what it was, then the stage's
        _put_back(by_stock, before)
        _put_back(by_solver, by_solver)
    _annotate(reports[first:], decision, cached=False)
    if decision.kept == "solver":
        with vela_in_child():
            return _ethos_u_result(solver, spec)
    return _ethos_u_result(stock, spec)


# Whether this thread's Vela compiles run in a child (`vela_in_child`); read by the dispatcher `routed_vela` installs.
_vela_in_child = contextvars.ContextVar("layout_solver_vela_in_child", default=False)


@contextlib.contextmanager
def vela_in_child():
    """Within (this thread, inside `routed_vela`): executorch's Vela compile runs Vela's command line in a child
    process with fixed addresses (`cost_models.vela.vela_main_in_child`), so a delegate the stage wrote compiles
    to the same bytes on every run. The rest of executorch's compile (reading and packing Vela's output) is
    unchanged."""
    token = _vela_in_child.set(True)
    try:
        yield
    finally:
        _vela_in_child.reset(token)


@contextlib.contextmanager
def routed_vela():
    """Within: executorch's Vela entry point (arm_vela's `vela.main`) runs in a child where `vela_in_child` is
    active, and in-process, as stock does, elsewhere. A per-thread switch, not a swap of the module in and out,
    since the joint lowering preprocesses delegates in threads."""
    from types import SimpleNamespace

    from executorch.backends.arm import arm_vela

    original = arm_vela.vela

    def main(argv=None):
        return vela_main_in_child(argv) if _vela_in_child.get() else original.main(argv)

    arm_vela.vela = SimpleNamespace(main=main)
    try:
        yield
    finally:
        arm_vela.vela = original


def _ethos_u_result(tosa: bytes, spec):
    """What EthosUBackend.preprocess returns for a TOSA flatbuffer (executorch 1.5.1's own tail of it): Vela's
    command stream, with any blocks the spec places outside it in a named data store."""
    from executorch.backends.arm.ethosu import EthosUBackend
    from executorch.exir._serialize._named_data_store import NamedDataStore
    from executorch.exir.backend.backend_details import PreprocessResult

    compiled = EthosUBackend._compile_tosa_flatbuffer(tosa, spec)
    if not compiled.external_blocks:
        return PreprocessResult(processed_bytes=compiled.processed_bytes)
    data_store = NamedDataStore()
    for block in compiled.external_blocks:
        data_store.add_named_data(block.key, block.payload, alignment=block.alignment, external_tag=block.placement)
    return PreprocessResult(
        processed_bytes=compiled.processed_bytes, data_store_output=data_store.get_named_data_store_output()
    )


PREDICTED = ("objective", "bound", "gap", "pricing", "predicted_by_op")  # what a solver report says it predicted


def _predictions(reports: list) -> tuple[dict, ...]:
    """The PREDICTED fields of each solver report that priced the delegate's layout."""
    return tuple({name: getattr(r, name) for name in PREDICTED} for r in reports if r.objective is not None)


def _annotate(reports: list, decision: Decision, cached: bool) -> None:
    if not reports:  # lowered the stock way only: no solver pass ran, so say what happened in a report of its own
        from layout_solver.lowering.pass_report import PassReport, record

        # the stage's prediction, from the lowering that decided: as many reports as that lowering had
        reports = [
            PassReport("stock-kept", **{**p, "predicted_by_op": Counter(p["predicted_by_op"])})
            for p in decision.predictions
        ] or [PassReport("stock-kept")]
        for report in reports:
            record(report)
    for report in reports:
        report.vela_check = decision.as_check(cached)
        report.kept_stock = decision.kept == "stock"
        if report.kept_stock and decision.solver_cycles is None:
            report.notes.append(f"stock's layout kept: {decision.why}")
        elif report.kept_stock:
            report.notes.append(
                f"stock's layout kept: Vela prices it {decision.stock_cycles:,} cycles, the solver's "
                f"{decision.solver_cycles:,}"
            )
