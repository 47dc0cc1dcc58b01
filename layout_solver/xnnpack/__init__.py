"""XNNPACK adapter: the solver in place of ChannelsLastTaggedReshapePass (imports executorch; not the core).

    from layout_solver.xnnpack import solver_layouts
    with solver_layouts() as reports:
        program = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])

Where things are: `op_rules` (what each op allows, registered once), `problem_builder` (graph -> problem), `passes` (the
solver and counting passes, the write-back), `pricing` (a tagged graph's conversions, both sides),
`validate` (the post-condition), `visitors` (the permute serializer that reads both orders), `hooks` (every
scoped change to executorch).
"""

from layout_solver.lowering.pass_report import PassReport
from layout_solver.xnnpack.hooks import solver_layouts, stock_layouts, substituted_pass
from layout_solver.xnnpack.passes import SolverChannelsLastTaggedReshapePass
from layout_solver.xnnpack.validate import LayoutValidationError, validate

__all__ = [
    "LayoutValidationError",
    "PassReport",
    "SolverChannelsLastTaggedReshapePass",
    "solver_layouts",
    "stock_layouts",
    "substituted_pass",
    "validate",
]
