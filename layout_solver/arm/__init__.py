"""Arm Ethos-U adapter (imports executorch; not the core).

    from layout_solver.arm import solver_layouts
    with solver_layouts() as reports:
        program = to_edge_transform_and_lower(quantized_ep, partitioner=[EthosUPartitioner(spec)])

Where things are: `op_rules` (what each op allows), `problem_builder` (graph -> problem), `admission` (graphs the stage
declines whole), `pricing` / `probes` (Vela's prices), `passes` (the solver pass and solution -> write-back
plan), `verify` (the stage's delegate against stock's, by Vela), `hooks` (every scoped change to ExecuTorch),
`canonical` (cheapest transpose forms); measurement, not lowering: `measure`, `equivalence`, `conformance`,
`generated`.
"""

from layout_solver.arm.hooks import canonical_transposes, solver_layouts, views_only_propagation
from layout_solver.arm.passes import SolverLayoutPass
from layout_solver.lowering.pass_report import PassReport

__all__ = ["PassReport", "SolverLayoutPass", "canonical_transposes", "solver_layouts", "views_only_propagation"]
