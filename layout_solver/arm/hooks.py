"""Every scoped change the Arm integration makes to ExecuTorch, in one place; each is restored on every
exit, exceptions included.

* `inserted_passes`: passes put into the Arm pipeline through its public (but global) insertion registry;
* `views_only_propagation`: ArmPassManager swapped for a subclass that runs the stock permute/view
  propagation heuristics on views only (the solver places the permutes), exposes the exported program
  being lowered, and runs the passes both sides of a verified delegate share once (`pipeline_fork.py`);
* `solver_layouts` / `canonical_transposes`: the user-facing blocks built from those two.
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path

from layout_solver.arm.pipeline_fork import STAGE_PASS, active_fork
from layout_solver.core.multimethod import SubproblemCache
from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.lowering.client import solve_problem
from layout_solver.lowering.joint_lowering import JointReports, joint_preprocess, per_thread_pass
from layout_solver.lowering.pass_report import collecting_reports

# Stock heuristics the solver takes over: they push permutes through views and merge them without a cost
# model (on a ViT, into 10-op rank-5 transposes). Inside solver_layouts they still move views (see
# `views_only`), never permutes.
REPLACED_STOCK_PASSES = ("PropagateViewCopyPermuteDownPass", "PropagateViewCopyPermuteUpPass")

# The exported program the Arm pipeline is transforming, so the solver pass can
# tell parameters and constants (whose transposes fold) from real inputs.
_current_program: contextvars.ContextVar = contextvars.ContextVar("layout_solver_arm_program", default=None)


def current_program():
    """The exported program the Arm pipeline is lowering right now (None outside a lowering)."""
    return _current_program.get()


# The Ethos-U compile spec of the delegate being preprocessed (None for TOSA pipelines with no Vela behind them):
# the TOSA stage sees only the filtered TOSA spec, and the solver prices for the Vela configuration.
_current_ethos_u_spec: contextvars.ContextVar = contextvars.ContextVar("layout_solver_ethos_u_spec", default=None)
# False while a delegate is lowered the stock way inside solver_layouts (verify="vela" lowers both).
_stage_on: contextvars.ContextVar[bool] = contextvars.ContextVar("layout_solver_arm_stage_on", default=True)

VERIFY_MODES = ("model", "vela")


def current_ethos_u_spec():
    """The EthosUCompileSpec of the delegate being preprocessed, or None (a TOSA or VGF lowering)."""
    return _current_ethos_u_spec.get()


def stage_on() -> bool:
    """Whether the solver stage changes the delegate being lowered (False on verify's stock side)."""
    return _stage_on.get()


@contextlib.contextmanager
def _stage_off() -> Iterator[None]:
    token = _stage_on.set(False)
    try:
        yield
    finally:
        _stage_on.reset(token)


def _declined(graph_module) -> bool:
    """Whether the stage leaves this delegate to stock's pipeline (`layout_solver.arm.admission`); if so, a
    warning and a "stock-fallback" report say why."""
    from layout_solver.arm.admission import declined
    from layout_solver.lowering.pass_report import PassReport, record

    reason = declined(graph_module)
    if reason is not None:
        warnings.warn(f"layout-solver: the Arm stage left a delegate to stock's pipeline: {reason}", stacklevel=3)
        record(PassReport("stock-fallback", notes=[f"declined, lowered as stock lowers it: {reason}"]))
    return reason is not None


@contextlib.contextmanager
def ethos_u_preprocess(verify: str = "vela", reports: list | None = None, settings: str = "") -> Iterator[None]:
    """Scoped wrapper of EthosUBackend.preprocess: each delegate's compile spec is visible to the solver pass
    (`current_ethos_u_spec`), and with verify="vela" each delegate is lowered the cheaper way Vela finds
    (`layout_solver.arm.verify`; its reports' `vela_check` has both totals). `settings` names the stage's
    options (a decision holds for one setting). Restored on every exit."""
    reports = reports if reports is not None else []
    from executorch.backends.arm.ethosu import EthosUBackend, EthosUCompileSpec

    from layout_solver.arm.verify import routed_vela, vela_in_child

    if verify not in VERIFY_MODES:
        raise ValueError(f"verify must be one of {VERIFY_MODES}, not {verify!r}")
    original = EthosUBackend.__dict__["preprocess"]

    def preprocess(edge_program, compile_specs):
        spec = EthosUCompileSpec._from_list(compile_specs)
        token = _current_ethos_u_spec.set(spec)
        try:
            if stage_on() and _declined(edge_program.graph_module):
                with _stage_off():
                    return original.__func__(edge_program, compile_specs)
            if verify == "vela" and stage_on():
                from layout_solver.arm.verify import preprocess_verified

                return preprocess_verified(
                    original.__func__, edge_program, compile_specs, spec, reports, _stage_off, settings
                )
            with vela_in_child() if stage_on() else contextlib.nullcontext():  # a graph the stage may have written
                return original.__func__(edge_program, compile_specs)
        finally:
            _current_ethos_u_spec.reset(token)

    EthosUBackend.preprocess = staticmethod(preprocess)
    try:
        with routed_vela():
            yield
    finally:
        EthosUBackend.preprocess = original


@contextlib.contextmanager
def partitions_in_graph_order() -> Iterator[None]:
    """Scoped: the Arm partitioner (TOSAPartitioner, and so its Ethos-U and VGF subclasses) lists its partitions in
    the order of their first node in the graph, not in the order of a set of strings.

    executorch 1.5.1's TOSAPartitioner collects its partition tags in a set, so their order follows the process's
    string-hash seed. executorch fuses the partitions in that order, and each fusion re-sorts the whole graph
    (torch.fx's `legalize_graph`), so a delegate's nodes reached preprocess in another topological order from one
    process to the next, and its TOSA graph, so the program's bytes, followed (outside:beit on ethos-u55-128: the
    tagged graph the same in every process, three of its seven delegates in other orders; stock's program differed
    too). Which nodes each partition holds is unchanged."""
    from executorch.backends.arm.tosa.partitioner import TOSAPartitioner

    original = TOSAPartitioner.__dict__["partition"]

    def partition(self, exported_program):
        result = original(self, exported_program)
        nodes = list(result.tagged_exported_program.graph.nodes)
        first: dict[str, int] = {}
        for index, node in enumerate(nodes):
            first.setdefault(node.meta.get("delegation_tag"), index)
        # a tag the partitioner emptied again (a partition that would lower to nothing) has no node: last, by name
        tags = sorted(result.partition_tags, key=lambda tag: (first.get(tag, len(nodes)), tag))
        result.partition_tags = {tag: result.partition_tags[tag] for tag in tags}
        return result

    TOSAPartitioner.partition = partition
    try:
        yield
    finally:
        TOSAPartitioner.partition = original


@contextlib.contextmanager
def inserted_passes(before: dict | None = None, after: dict | None = None) -> Iterator[None]:
    """Scoped insertion into the Arm pipeline via its public (but global) registry.

    `before` / `after` map a stock pass type to the passes to insert. The
    registry is put back exactly as found on every exit, exceptions included.
    """
    from executorch.backends.arm._passes import arm_pass_manager as apm

    # Copy the containers, keep the user's own pass instances.
    saved = {
        target: dataclasses.replace(ins, before_passes=list(ins.before_passes), after_passes=list(ins.after_passes))
        for target, ins in apm._registered_pass_insertions.items()
    }
    try:
        for target, passes in (before or {}).items():
            apm.register_pass_insertions_before(target, list(passes))
        for target, passes in (after or {}).items():
            apm.register_pass_insertions_after(target, list(passes))
        yield
    finally:
        apm.clear_registered_pass_insertions()
        apm._registered_pass_insertions.update(saved)


def _node_lines(graph) -> list[str]:
    """Every node as FX prints it (name, target, arguments): equal lines, equal graph."""
    return [node.format_node() for node in graph.nodes]


def views_only(stock: type) -> type:
    """The stock propagation pass `stock`, moving view_copy nodes only.

    Permutes stay where they are, for the solver to place with its cost model (the stock region
    cancellation of permutes, RemovePermutesAroundElementwiseTosaOps, is left out too). Views still sink
    and rise through elementwise ops and cancel as stock's do: a view left between a SLICE and the op that
    reads it makes Vela copy the slice out (BEiT's relative-position arithmetic: int32 MemoryCopies that made
    the program dearer than stock when the whole pass was skipped).
    """

    class ViewsOnly(stock):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if not hasattr(self, "_targets"):  # the nodes the stock pass moves (executorch 1.5.1)
                raise RuntimeError(f"{stock.__name__} no longer names the nodes it moves; update views_only()")
            self._targets = {self._VIEW_TARGET, self._VIEW_DEFAULT_TARGET}
            if not hasattr(self, "_retrace"):  # the whole-graph retrace the stock pass runs after each change
                raise RuntimeError(f"{stock.__name__} no longer retraces through _retrace; update views_only()")
            self._retraced: list[str] | None = None

        def make_fusion_pass(self):
            return None

        def call(self, graph_module):
            self._retraced = None
            return super().call(graph_module)

        def fuse_vertical(self, graph_module):
            result = super().fuse_vertical(graph_module)
            if result.graph_module is not graph_module:
                # A new module comes only from a retrace (CanonicalizeViewCopyPermutePass, the one fusion left
                # here, retraces what it changed), which the stock pass then repeats.
                self._retraced = _node_lines(result.graph_module.graph)
            return result

        def _retrace(self, graph_module):
            # The stock pass retraces right after the canonicalizer's own retrace, and once more at its end
            # whenever it changed anything, even when nothing changed since the previous retrace (every one of
            # its retraces on a small CNN, ~25 ms each). A graph whose nodes read exactly as they did after the
            # last retrace keeps that retrace's metadata, so it is not retraced again.
            if self._retraced == _node_lines(graph_module.graph):
                return graph_module
            graph_module = super()._retrace(graph_module)
            self._retraced = _node_lines(graph_module.graph)
            return graph_module

    setattr(ViewsOnly, STAGE_PASS, True)
    ViewsOnly.__name__ = ViewsOnly.__qualname__ = f"ViewsOnly{stock.__name__}"
    return ViewsOnly


@contextlib.contextmanager
def views_only_propagation(names=REPLACED_STOCK_PASSES) -> Iterator[None]:
    """Scoped substitution of ArmPassManager (tosa/backend.py imports the name lazily) by a subclass that
    runs the named stock propagation passes views-only (`views_only`; none if `names` is empty) and exposes
    the exported program to the solver pass; restored on every exit. A pass the user's compile spec skips
    stays skipped."""
    import executorch.backends.arm._passes as arm_passes

    replaced = {getattr(arm_passes, n): views_only(getattr(arm_passes, n)) for n in names}
    original = arm_passes.ArmPassManager

    class SolverArmPassManager(original):
        def add_pass(self, pipeline_pass):
            variant = replaced.get(type(pipeline_pass))
            if variant is not None and type(pipeline_pass) not in self._skip_pass_types and stage_on():
                pipeline_pass = variant(pipeline_pass.compile_spec, pipeline_pass.exported_program)
            return super().add_pass(pipeline_pass)

        def transform_to_backend_pipeline(self, exported_program, graph_module):
            token = _current_program.set(exported_program)
            try:
                if stage_on() and _declined(graph_module):
                    with _stage_off():  # stock's passes (the solver pass sees the stage off and does nothing)
                        return super().transform_to_backend_pipeline(exported_program, graph_module)
                return super().transform_to_backend_pipeline(exported_program, graph_module)
            finally:
                _current_program.reset(token)

        def _transform(self, exported_program, graph_module):
            fork = active_fork()
            if fork is not None and graph_module is exported_program.graph_module:
                fork.capture(self.passes) if stage_on() else fork.resume(self.passes)
            return super()._transform(exported_program, graph_module)

    arm_passes.ArmPassManager = SolverArmPassManager
    try:
        yield
    finally:
        arm_passes.ArmPassManager = original


@contextlib.contextmanager
def solver_layouts(
    time_limit: float = DEFAULT_TIME_LIMIT,
    replace_stock: bool = True,
    service: str | None = None,
    method_weights: dict[str, float] | None = None,
    constant_byte_cost: float = 0.0,
    cache_dir: str | Path | None = None,
    pinned_kinds: Iterable[str] = (),
    verify: str = "vela",
) -> Iterator[JointReports]:
    """Inside this block, Ethos-U lowering lays tensors out with the solver.

    The stage prices every op in every mode and every transpose for the target the lowering is for (Vela
    with the delegate's own Ethos-U compile spec; target-neutral moved bytes for TOSA pipelines no compiler
    stands behind; `layout_solver.arm.pricing`): the objective is the delegate's predicted cost.
    `verify="vela"` (the default) never hands back a delegate dearer than stock's: the first time a delegate
    is seen it is lowered with the stage and without it, Vela prices both, the cheaper is kept and the
    decision is stored by the delegate's content (`layout_solver.arm.verify`), so later lowerings of it run
    once. Each report's `vela_check` has both totals. `verify="model"` trusts the stage's pricing alone (one
    lowering, no comparison). TOSA pipelines with no Vela behind them are never lowered twice.

    `service`: URL of a `layout-solver serve` instance to solve on (default
    $LAYOUT_SOLVER_SERVICE; unset: in-process); on any failure the problem is
    solved in-process and the report's notes say so.

    The stock permute-propagation heuristics move views only (replace_stock;
    see `views_only`), the solver pass (which then writes each transpose in its canonical form) runs just
    before InsertConstShapesPass through the public pass-insertion registry;
    everything after (ExirToTosaPass, Vela) is unchanged. The partitioner lists its partitions in graph order
    (`partitions_in_graph_order`), so the same model lowers to the same bytes in every process. All of it is
    restored on every exit. Yields one PassReport per delegate.

    `method_weights` ({"decode": 128, "prefill": 1}) makes a multi-method
    lowering one joint problem over all partitions of all methods (see
    `layout_solver.lowering.joint_lowering`): parameters and constants with equal bytes
    are linked (one home order), identical partitions are solved once (with
    `cache_dir`, across runs too); the reports' `.joint` says how it went.
    `constant_byte_cost` prices an extra stored order of a linked constant per
    byte. It defaults to 0 because on Ethos-U it is never paid: each delegate's
    Vela command stream carries its own (re-encoded) weights, so stock already
    stores one copy per delegate and a per-method layout adds none. Set it if
    your deployment shares weights across delegates. Single-method programs
    are lowered exactly as without it.

    `pinned_kinds` keeps the ops of these op-rule kinds (`layout_solver.arm.op_rules`: "matmul",
    "reduction", "elementwise", ...) in the identity order, to measure what one rule buys or to rule it
    out; unknown kinds are an error.
    """
    from executorch.backends.arm._passes.insert_const_shapes import InsertConstShapesPass
    from executorch.backends.arm.ethosu import EthosUBackend

    from layout_solver.arm.canonical import CanonicalTransposePass
    from layout_solver.arm.op_rules import RULES
    from layout_solver.arm.passes import SolverLayoutPass

    pinned_kinds, known = frozenset(pinned_kinds), {rule.kind for rule in RULES.values()}
    if pinned_kinds - known:
        raise ValueError(f"unknown op-rule kinds {sorted(pinned_kinds - known)}; known: {sorted(known)}")
    reports = JointReports()
    with contextlib.ExitStack() as stack:
        stack.enter_context(collecting_reports(reports))
        stack.enter_context(partitions_in_graph_order())
        if method_weights:
            stack.enter_context(
                joint_preprocess(
                    EthosUBackend,
                    method_weights,
                    lambda p: solve_problem(p, time_limit, service),
                    reports,
                    constant_byte_cost,
                    SubproblemCache(cache_dir),
                )
            )
        stack.enter_context(views_only_propagation(REPLACED_STOCK_PASSES if replace_stock else ()))
        settings = f"time_limit={time_limit} replace_stock={replace_stock} pinned={sorted(pinned_kinds)} " + (
            f"methods={sorted((method_weights or {}).items())} constant_byte_cost={constant_byte_cost}"
        )
        stack.enter_context(ethos_u_preprocess(verify, reports, settings))
        canonical = CanonicalTransposePass()
        solver_pass = per_thread_pass(
            SolverLayoutPass,
            lambda: SolverLayoutPass(
                time_limit,
                service,
                current_program,
                pinned_kinds,
                canonical=canonical,
                target_spec=current_ethos_u_spec,
                enabled=stage_on,
            ),
        )
        stack.enter_context(inserted_passes(before={InsertConstShapesPass: [solver_pass]}))
        yield reports


@contextlib.contextmanager
def canonical_transposes(stats: dict | None = None) -> Iterator[dict]:
    """Inside this block, Ethos-U lowering writes every transpose in its cheapest form.

    The pass goes in just before InsertConstShapesPass: after the stock
    view/permute fusers (which would fold the reshapes back) and early enough
    that the new reshapes get their constant shape operands.
    """
    from executorch.backends.arm._passes.insert_const_shapes import InsertConstShapesPass

    from layout_solver.arm.canonical import CanonicalTransposePass

    stats = {} if stats is None else stats
    with inserted_passes(before={InsertConstShapesPass: [CanonicalTransposePass(stats)]}):
        yield stats
