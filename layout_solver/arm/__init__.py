"""Arm Ethos-U55 adapter (imports executorch; not the core).

    from layout_solver.arm import solver_layouts
    with solver_layouts() as reports:
        program = to_edge_transform_and_lower(quantized_ep, partitioner=[EthosUPartitioner(spec)])
"""

from layout_solver.arm.passes import SolverLayoutPass, TosaPassReport, skipping_stock_propagation, solver_layouts

__all__ = ["SolverLayoutPass", "TosaPassReport", "skipping_stock_propagation", "solver_layouts"]
