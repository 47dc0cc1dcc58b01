"""The Arm stage's post-condition (`layout_solver.arm.validate`), run by the pass's `ensures`: it reads what
the written ops compute with their own meta kernels, so a write-back that breaks an op is caught whatever
the rules said."""

from pathlib import Path

import pytest
import torch
from executorch.exir import to_edge
from executorch.exir.dialects._ops import ops as exir_ops

from layout_solver.arm.validate import ArmLayoutValidationError, snapshot, validate

PERMUTE = exir_ops.edge.aten.permute_copy.default


class PermuteSum(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x.permute(0, 2, 3, 1)).sum(dim=1)


def _edge_graph():
    program = to_edge(torch.export.export(PermuteSum(), (torch.randn(1, 3, 4, 5),))).exported_program()
    return program.graph_module


def _node(graph_module, name_part):
    return next(n for n in graph_module.graph.nodes if name_part in str(n.target))


def test_an_untouched_graph_passes():
    gm = _edge_graph()
    assert validate(gm, snapshot(gm)) == 0  # nothing written, nothing re-computed


def test_a_reduction_on_the_wrong_axis_is_caught():
    gm = _edge_graph()
    before = snapshot(gm)
    reduction = _node(gm, "sum")
    reduction.args = (reduction.args[0], [2], *reduction.args[2:])  # the axis no longer follows the order
    with pytest.raises(ArmLayoutValidationError, match=rf"node '{reduction.name}'.*computes"):
        validate(gm, before)


def test_a_correct_rewrite_passes_and_is_recomputed():
    gm = _edge_graph()
    before = snapshot(gm)
    reduction = _node(gm, "sum")
    # Store relu's result in the input's order (drop the permute), reduce the axis it came from and permute
    # the smaller result: the same function, written the way the stage writes it.
    permute = _node(gm, "permute_copy")
    relu = _node(gm, "relu")
    relu.replace_input_with(permute, permute.args[0])
    with relu.meta["val"].fake_mode:
        relu.meta["val"] = torch.empty(1, 3, 4, 5)
    reduction.args = (relu, [2], *reduction.args[2:])
    with relu.meta["val"].fake_mode:
        reduction.meta["val"] = torch.empty(1, 3, 5)
    with gm.graph.inserting_after(reduction):
        back = gm.graph.call_function(PERMUTE, (reduction, [0, 2, 1]))
    with relu.meta["val"].fake_mode:
        back.meta["val"] = torch.empty(1, 5, 3)
    reduction.replace_all_uses_with(back, delete_user_cb=lambda user: user is not back)
    gm.graph.eliminate_dead_code()
    assert validate(gm, before) == 3  # relu, the reduction and the new permute, re-run by their own kernels


def _undone_and_redone(gm) -> None:
    """The graph's permute, then its inverse and the permute again, read by the relu: two pairs that undo."""
    permute = _node(gm, "permute_copy")
    with gm.graph.inserting_after(permute):
        undo = gm.graph.call_function(PERMUTE, (permute, [0, 3, 1, 2]))
    with permute.meta["val"].fake_mode:
        undo.meta["val"] = torch.empty(1, 3, 4, 5)
    with gm.graph.inserting_after(undo):
        again = gm.graph.call_function(PERMUTE, (undo, [0, 2, 3, 1]))
    with permute.meta["val"].fake_mode:
        again.meta["val"] = torch.empty(1, 4, 5, 3)
    _node(gm, "relu").replace_input_with(permute, again)


def test_a_permute_that_undoes_another_is_caught():
    gm = _edge_graph()
    before = snapshot(gm)
    _undone_and_redone(gm)
    with pytest.raises(ArmLayoutValidationError, match="undoes"):
        validate(gm, before)


def test_the_write_back_cancels_a_permute_pair_that_undoes_itself():
    """A transpose and its inverse (the model's own, or one the write-back leaves) go: the reader reads the value,
    and the post-condition that catches such a pair passes."""
    from graph_io.arm import cancel_inverse_permutes

    gm = _edge_graph()
    before = snapshot(gm)
    _undone_and_redone(gm)
    assert cancel_inverse_permutes(gm) == 2  # the model's permute and the first inverse: the second one stays
    assert [n.args[1] for n in gm.graph.nodes if n.target == PERMUTE] == [[0, 2, 3, 1]]
    validate(gm, before)


def test_a_changed_boundary_is_caught():
    gm = _edge_graph()
    before = snapshot(gm)
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    relu = _node(gm, "relu")
    output.args = ((relu,),)
    with pytest.raises(ArmLayoutValidationError, match="inputs or outputs"):
        validate(gm, before)


def test_the_stage_runs_its_postcondition():
    """Every solver report of a lowering carries the post-condition's seconds."""
    from layout_solver.arm import solver_layouts
    from layout_solver.targets.ethos_u.measure import lower_ethos_u
    from layout_solver.zoo.models import build

    module, inputs = build(
        f"{Path(__file__).parents[1] / 'models' / 'tiny.py'}:mixed"
    )  # not residual: the replay test's
    with solver_layouts(verify="model") as reports:
        lower_ethos_u(module, inputs)
    solver = [r for r in reports if r.kind == "solver"]
    assert solver and all("check" in r.phase_seconds for r in solver)


def test_constants_may_be_stored_permuted_inputs_may_not():
    """The stage stores a constant in the order its reader wants (a permuted copy, folded at compile time):
    that is not a change of the delegate's boundary; a graph input changing shape is."""

    class Scale(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("weight", torch.randn(3, 4))

        def forward(self, x):
            return x * self.weight

    program = to_edge(torch.export.export(Scale(), (torch.randn(2, 3, 4),))).exported_program()
    gm = program.graph_module
    constant, user_input = [n for n in gm.graph.nodes if n.op == "placeholder"]
    before = snapshot(gm, {constant.name})
    with constant.meta["val"].fake_mode:
        constant.meta["val"] = torch.empty(4, 3)  # stored transposed
    validate(gm, before)
    with user_input.meta["val"].fake_mode:
        user_input.meta["val"] = torch.empty(2, 4, 3)
    with pytest.raises(ArmLayoutValidationError, match="inputs or outputs"):
        validate(gm, before)
