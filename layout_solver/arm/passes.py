"""The solver's TOSA memory-format stage: assign every tensor a dim order, write back only the transposes
the answer needs.

Runs inside the Arm pass pipeline just before InsertConstShapesPass (see `layout_solver.arm.hooks`); the
canonical-transpose rewrite it runs last gives each remaining transpose its cheapest form.
"""

from __future__ import annotations

import hashlib
import json
import time
import warnings
from collections import Counter
from typing import ClassVar

import torch
from executorch.backends.arm._passes.arm_pass import ArmPass
from executorch.exir.pass_base import PassResult

from cost_models.store import JsonStore, default_store
from graph_io.arm import ArmRewritePlan, NodeRewrite, apply_plan, cancel_inverse_permutes, fold_constant_permutes
from layout_solver.arm.orders import label_order
from layout_solver.arm.pricing import ArmPricing, MovedBytesPricing, constant_values, pricing_for
from layout_solver.arm.problem_builder import ArmProblem, build_problem
from layout_solver.arm.validate import GraphSnapshot, snapshot, validate
from layout_solver.core.problem import Solution
from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.core.solvers.decompose import shared_memo
from layout_solver.lowering.joint_lowering import in_joint_lowering
from layout_solver.lowering.pass_report import PassReport, record
from layout_solver.lowering.provenance import graph_content, source_digest, tensor_bytes, tool_versions
from layout_solver.lowering.solver_pass import SolverPass, lowering_solver, solver_report


def constant_placeholders(program) -> set[str]:
    """Names of placeholders that are parameters, buffers or lifted constants."""
    if program is None:
        return set()
    sig = program.graph_signature
    return set(sig.inputs_to_parameters) | set(sig.inputs_to_buffers) | set(sig.inputs_to_lifted_tensor_constants)


def rewrite_plan(arm: ArmProblem, solution: Solution) -> ArmRewritePlan:
    """The solution as a plain write-back plan: every value's order; per op, the orders it reads its
    operands in, its result's order, and the arguments its rule says follow that order."""
    plan = ArmRewritePlan({vid: label_order(label) for vid, label in solution.labels.items()})
    for op in arm.problem.ops:
        rule = arm.op_rule.get(op.id)
        if rule is None:
            continue  # the graph outputs' contract ops: apply_plan reads outputs in the identity order
        mode = next(m for m in op.modes if m.name == solution.modes[op.id])
        reads = {vid: label_order(label) for vid, label in zip(op.operands, mode.operands)}
        plan.nodes[op.id] = NodeRewrite(reads, plan.orders[op.id], rule.remaps, rule.alias)
    return plan


def predicted_by_op(arm: ArmProblem, solution: Solution, pricing: ArmPricing) -> Counter:
    """The objective split by operator class (as Vela names a row's source operator; transitions are
    "Transpose"), to set against Vela's per-layer table."""
    split = Counter()
    for op in arm.problem.ops:
        node = arm.op_node.get(op.id)
        if node is None:
            continue
        cost = next(m.cost for m in op.modes if m.name == solution.modes[op.id]) or 0.0
        if cost:
            split[pricing.op_class(node)] += cost
    split["Transpose"] += sum(t.cost for t in solution.transitions)
    return Counter({k: round(v, 1) for k, v in split.items() if v})


def algebraic_modes(arm: ArmProblem, solution: Solution) -> Counter:
    """How many ops run in each algebraic mode the solution chose ("MATMUL.default (B^T A^T)^T"); the plain
    order choices of other rules are not counted."""
    return Counter(
        f"{op.target} {solution.modes[op.id]}"
        for op in arm.problem.ops
        if op.id in arm.op_rule and arm.op_rule[op.id].algebraic and solution.modes[op.id] != arm.op_rule[op.id].plain
    )


REFINEMENTS = 12  # solve / price-the-used-transitions rounds before an answer is taken as it is


def _solve_refining(arm: ArmProblem, solve) -> Solution:
    """Solve, price exactly the transitions the answer uses that were priced as lower bounds, solve again, until
    the answer uses only exactly priced ones: it is then optimal for the exact prices too (every other
    transition can only be dearer than it was priced). Each round prices a handful of transitions instead of
    every candidate."""
    with shared_memo():  # each round re-solves only the blocks whose prices changed
        for _ in range(REFINEMENTS):
            solution = solve(arm.problem)
            if not arm.price_exactly((t.value, t.src, t.dst) for t in solution.transitions):
                return solution
        solution = solve(arm.problem)
    if any((t.value, t.src, t.dst) in arm.pending for t in solution.transitions):
        solution.notes.append(f"after {REFINEMENTS} rounds some transitions in the answer are priced as lower bounds")
    return solution


def answer_key(graph_module: torch.fx.GraphModule, constant_value, pricing: ArmPricing, pinned: frozenset) -> str:
    """A digest of everything the stage's answer depends on: the graph (nodes, arguments, tensor metadata), the
    values of its constants, the pricing's configuration, the pinned rule kinds, the tool versions and the
    source of the code an Arm lowering reads."""

    def constant_bytes(node) -> bytes:
        if node.op in ("placeholder", "get_attr") and isinstance(tensor := constant_value(node), torch.Tensor):
            return tensor_bytes(tensor)
        return b""

    digest = hashlib.sha1(graph_content(graph_module.graph.nodes, constant_bytes))
    digest.update(json.dumps([pricing.key, sorted(pinned), tool_versions(), source_digest("arm")]).encode())
    return digest.hexdigest()


def _replayable(arm: ArmProblem, solution: Solution) -> bool:
    """Whether a stored answer fits this problem: a label for every value, a mode of its own for every op."""
    modes = {op.id: {m.name for m in op.modes} for op in arm.problem.ops}
    return set(solution.labels) == {v.id for v in arm.problem.values} and all(
        solution.modes.get(op) in names for op, names in modes.items()
    )


class _Declined(Exception):
    """The stage could not build its problem (an op the pricing or a rule misreads): nothing is written."""


class SolverLayoutPass(SolverPass, ArmPass):
    """Chooses every tensor's dim order in one global problem; records a PassReport per graph. Its
    post-condition is `layout_solver.arm.validate` (an independent reading of what the written ops compute)."""

    _passes_required_after: ClassVar[set] = set()
    # Its work depends on `stage_on()`: the pipeline forks no later than here (pipeline_fork.STAGE_PASS).
    layout_solver_stage_pass: ClassVar[bool] = True

    def __init__(
        self,
        time_limit: float = DEFAULT_TIME_LIMIT,
        service: str | None = None,
        program_of=lambda: None,
        pinned_kinds: frozenset[str] = frozenset(),
        canonical=None,
        target_spec=lambda: None,
        enabled=lambda: True,
        answers: JsonStore | None | bool = True,
    ):
        super().__init__()
        self.time_limit = time_limit
        self.service = service
        self.program_of = program_of  # the exported program being lowered (parameters vs delegate inputs)
        # The pass manager's working copy of that program, set on the pass for the duration of each call
        # (executorch's adapter does so for any pass with this attribute): it also knows the constants the
        # pipeline created on the way (fused constant arguments), which the original does not.
        self.exported_program = None
        self.pinned_kinds = pinned_kinds  # op-rule kinds kept in the identity order
        # A CanonicalTransposePass run on the written-back graph inside this pass: the pass manager recompiles
        # a modified graph module after each pass (0.2 s on MobileNetV2), so one pass recompiles it once.
        self.canonical = canonical
        # The Ethos-U compile spec of the delegate (None: a TOSA pipeline no compiler stands behind), which
        # decides the pricing.
        self.target_spec = target_spec
        self.pricing: ArmPricing | None = None  # the last call's, for reports and tests
        self.enabled = enabled  # False: the delegate is being lowered the stock way (verify's other side)
        # Answers by graph and pricing (True: the store in the probe cache's folder; False: none): lowering
        # a graph the stage has answered before replays the answer instead of pricing and solving again.
        self.answers = answers
        # The graph being lowered: its program, constant placeholders, solver, and whether the write-back
        # changed it.
        self.program = None
        self.constants: set[str] = set()
        self.solver = None
        self.problem: ArmProblem | None = None
        self.changed: list[bool] = []

    # requires / call / ensures (SolverPass): the snapshot and the post-condition.
    def snapshot(self, graph_module) -> GraphSnapshot | None:
        """The graph's boundary (its inputs, not its constants) and nodes, for the post-condition."""
        if not self.enabled():
            return None
        program = self.exported_program if self.exported_program is not None else self.program_of()
        return snapshot(graph_module, constant_placeholders(program))

    def check(self, graph_module, before: GraphSnapshot) -> None:
        """`layout_solver.arm.validate`: what the written ops compute, read by their own kernels."""
        validate(graph_module, before)

    # The three phases.
    def build(self, graph_module) -> ArmProblem:
        """The delegate's layout problem, priced for its target; _Declined if the rules cannot read it."""
        # A joint multi-method solve needs each partition's problem whole; alone, transitions between fused ops
        # are priced exactly only where an answer uses them (see _solve_refining).
        try:
            return build_problem(graph_module, constants=self.constants, pinned_kinds=self.pinned_kinds,
                                 pricing=self.pricing, lazy_losses=not in_joint_lowering())  # fmt: skip
        except Exception as exc:
            raise _Declined(f"{type(exc).__name__}: {exc}".splitlines()[0][:300]) from exc

    def solve(self, built: ArmProblem) -> Solution:
        """The optimum, pricing exactly the transitions it uses (_solve_refining)."""
        self.problem = built  # the solver's placeholders are this problem's
        return _solve_refining(built, self.solver)

    def write_back(self, graph_module, built: ArmProblem, solution: Solution) -> tuple[int, int]:
        """Write the answer into the graph; (permutes inserted, permutes removed)."""
        plan = rewrite_plan(built, solution)
        inserted, removed = apply_plan(graph_module, plan)
        written = inserted, removed + cancel_inverse_permutes(graph_module)  # a pair that undoes itself: neither
        fold_constant_permutes(graph_module, self.program, self.constants)  # read in another order: stored so
        graph_module.graph.lint()  # the pass manager recompiles a modified graph module
        self.changed.append(any(written) or any(o != tuple(range(len(o))) for o in plan.orders.values()))
        return written

    def _replay(self, stored: dict, graph_module):
        """Write a stored answer back: the problem is built unpriced (the rules alone say what each mode
        writes), the answer checked against it; None if it does not fit (then the stage solves afresh)."""
        solution = Solution.model_validate(stored["solution"])
        solution.notes = [*solution.notes, "answer replayed from the stage's store (same graph, same pricing)"]
        started = time.perf_counter()
        arm = build_problem(graph_module, constants=self.constants, pinned_kinds=self.pinned_kinds,
                            pricing=MovedBytesPricing())  # fmt: skip
        if not _replayable(arm, solution):
            return None
        seconds = time.perf_counter() - started
        run = self.solve_graph(graph_module, built=arm, solution=solution)
        run.phase_seconds["build"] += seconds
        return run

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        if not self.enabled():
            return PassResult(graph_module, False)
        program = self.program = self.exported_program if self.exported_program is not None else self.program_of()
        constants = self.constants = constant_placeholders(program)
        pricing = self.pricing = pricing_for(self.target_spec(), program, constants)
        self.changed = []
        self.solver = lowering_solver(
            self.time_limit, self.service, program, lambda: constants & set(self.problem.value_node)
        )
        store = default_store("answers") if self.answers is True else (self.answers or None)
        key = stored = None
        if store is not None and not in_joint_lowering():  # a joint answer depends on the other methods too
            started = time.perf_counter()
            key = answer_key(graph_module, constant_values(program), pricing, self.pinned_kinds)
            stored = store.get(key)
            digest_seconds = time.perf_counter() - started
        try:
            run = None if stored is None else self._replay(stored, graph_module)
            if run is not None:
                run.phase_seconds["build"] += digest_seconds
            else:
                run = self.solve_graph(graph_module)
                stored = None
        except _Declined as declined:  # nothing was written: the delegate lowers with the graph as it came
            warnings.warn(f"layout-solver: the Arm stage left a delegate as it was: {declined}", stacklevel=2)
            record(PassReport("stock-fallback", notes=[f"the stage could not build its problem: {declined}"]))
            return PassResult(graph_module, False)
        if stored is None:
            by_op, unpriced = predicted_by_op(run.built, run.solution, pricing), run.built.unpriced
            if key is not None and run.solution.status == "optimal":  # a time-out's answer is not kept
                store.put(key, {"solution": run.solution.model_dump(mode="json"), "unpriced": list(unpriced),
                                "predicted_by_op": dict(by_op)})  # fmt: skip
        else:
            by_op, unpriced = Counter(stored["predicted_by_op"]), stored["unpriced"]
        written, removed = run.written
        self.report = solver_report(
            run,
            transitions_written=written,
            ops_removed=removed,
            pinned_unknown=run.built.pinned_unknown,
            modes_chosen=algebraic_modes(run.built, run.solution),
            pricing=pricing.description,
            unpriced=unpriced,
            predicted_by_op=by_op,
        )
        record(self.report)
        if self.canonical is not None:
            self.canonical.pricing = pricing
            self.changed.append(self.canonical.call(graph_module).modified)
            # a transpose given its cheapest form may now undo the one it reads
            self.changed.append(cancel_inverse_permutes(graph_module) > 0)
        return PassResult(graph_module, any(self.changed))
