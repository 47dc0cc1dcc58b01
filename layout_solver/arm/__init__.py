"""Arm Ethos-U55 adapter (imports executorch; not the core).

    from layout_solver.arm import solver_layouts
    with solver_layouts() as reports:
        program = to_edge_transform_and_lower(quantized_ep, partitioner=[EthosUPartitioner(spec)])

Where things are: `op_rules` (what each op allows), `rules` (graph -> problem), `passes` (the solver pass
and solution -> write-back plan), `hooks` (every scoped change to ExecuTorch), `canonical` (cheapest
transpose forms), `measure` / `equivalence` / `compare` / `conformance` (measurement, not lowering).
"""

from layout_solver.arm.hooks import canonical_transposes, solver_layouts, views_only_propagation
from layout_solver.arm.passes import SolverLayoutPass
from layout_solver.report import PassReport

__all__ = ["PassReport", "SolverLayoutPass", "canonical_transposes", "solver_layouts", "views_only_propagation"]
