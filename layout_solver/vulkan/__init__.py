"""Vulkan adapter: solver-driven TagMemoryMetaPass (imports executorch; not the core).

    from layout_solver.vulkan import solver_layouts
    with solver_layouts() as reports:
        program = to_edge_transform_and_lower(ep, partitioner=[VulkanPartitioner()])

Where things are: `problem_builder` (graph -> problem, from executorch's op registry), `passes` (the solver and
counting passes, the write-back), `validate` (the post-condition, read from the runtime's rules), `hooks`
(the scoped swap of the stock pass), `runtime` / `calibrate` (the device).
"""

from layout_solver.lowering.pass_report import PassReport
from layout_solver.vulkan.hooks import solver_layouts, stock_layouts, substituted_pass
from layout_solver.vulkan.passes import SolverTagMemoryMetaPass
from layout_solver.vulkan.validate import LayoutValidationError, validate

__all__ = [
    "LayoutValidationError",
    "PassReport",
    "SolverTagMemoryMetaPass",
    "solver_layouts",
    "stock_layouts",
    "substituted_pass",
    "validate",
]
