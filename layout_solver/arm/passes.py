"""The solver's TOSA memory-format stage: assign every tensor a dim order, write back only the transposes
the answer needs.

Runs inside the Arm pass pipeline just before InsertConstShapesPass (see `layout_solver.arm.hooks`); the
canonical-transpose rewrite it runs last gives each remaining transpose its cheapest form.
"""

from __future__ import annotations

from collections import Counter
from typing import ClassVar

import torch
from executorch.backends.arm._passes.arm_pass import ArmPass
from executorch.exir.pass_base import PassResult

from graph_io.arm import ArmRewritePlan, NodeRewrite, apply_plan
from layout_solver.arm.orders import label_order
from layout_solver.arm.rules import ArmProblem, build_problem
from layout_solver.problem import Solution
from layout_solver.report import lowering_solver, record, run_solver_pass, solver_report


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


def algebraic_modes(arm: ArmProblem, solution: Solution) -> Counter:
    """How many ops run in each algebraic mode the solution chose ("MATMUL.default (B^T A^T)^T"); the plain
    order choices of other rules are not counted."""
    return Counter(
        f"{op.target} {solution.modes[op.id]}"
        for op in arm.problem.ops
        if op.id in arm.op_rule and arm.op_rule[op.id].algebraic and solution.modes[op.id] != arm.op_rule[op.id].plain
    )


class SolverLayoutPass(ArmPass):
    """Chooses every tensor's dim order in one global problem; records a PassReport per graph."""

    _passes_required_after: ClassVar[set] = set()

    def __init__(
        self,
        time_limit: float = 10.0,
        service: str | None = None,
        program_of=lambda: None,
        pinned_kinds: frozenset[str] = frozenset(),
        canonical=None,
    ):
        super().__init__()
        self.time_limit = time_limit
        self.service = service
        self.program_of = program_of  # the exported program being lowered (parameters vs delegate inputs)
        self.pinned_kinds = pinned_kinds  # op-rule kinds kept in the identity order
        # A CanonicalTransposePass run on the written-back graph inside this pass: the pass manager recompiles
        # a modified graph module after each pass (0.2 s on MobileNetV2), so one pass recompiles it once.
        self.canonical = canonical

    def call(self, graph_module: torch.fx.GraphModule) -> PassResult:
        program = self.program_of()
        constants = constant_placeholders(program)
        built: list[ArmProblem] = []
        changed: list[bool] = []

        def build() -> ArmProblem:
            built.append(build_problem(graph_module, constants=constants, pinned_kinds=self.pinned_kinds))
            return built[0]

        def write_back(arm: ArmProblem, solution: Solution) -> tuple[int, int]:
            plan = rewrite_plan(arm, solution)
            written = apply_plan(graph_module, plan)
            graph_module.graph.lint()  # the pass manager recompiles a modified graph module
            changed.append(any(written) or any(o != tuple(range(len(o))) for o in plan.orders.values()))
            return written

        solve = lowering_solver(self.time_limit, self.service, program, lambda: constants & set(built[0].value_node))
        run = run_solver_pass(build, lambda arm: solve(arm.problem), write_back)
        written, removed = run.written
        record(
            solver_report(
                run,
                transitions_written=written,
                ops_removed=removed,
                pinned_unknown=run.built.pinned_unknown,
                modes_chosen=algebraic_modes(run.built, run.solution),
            )
        )
        if self.canonical is not None:
            changed.append(self.canonical.call(graph_module).modified)
        return PassResult(graph_module, any(changed))
