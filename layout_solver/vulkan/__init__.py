"""Vulkan adapter: solver-driven TagMemoryMetaPass (imports executorch; not the core).

    from layout_solver.vulkan import solver_layouts
    with solver_layouts() as reports:
        program = to_edge_transform_and_lower(ep, partitioner=[VulkanPartitioner()])
"""

from layout_solver.vulkan.passes import PassReport, SolverTagMemoryMetaPass, solver_layouts, stock_layouts
from layout_solver.vulkan.validate import LayoutValidationError, validate

__all__ = ["LayoutValidationError", "PassReport", "SolverTagMemoryMetaPass", "solver_layouts", "stock_layouts",
           "validate"]
