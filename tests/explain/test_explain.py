"""`explain`: each side's program drawn with its layouts, conversions and per-op prices, the prices adding up to
what the comparison reports for the same lowering, and Ethos-U's dim orders read off the TOSA graph."""

import json
from pathlib import Path

import pytest

from cost_models.ethos_u55 import TosaOp
from graph_io.layout_graph import GraphOp, LayoutGraph, cost_deltas
from layout_solver.targets.ethos_u.explain import delegate_graph, unit_axis_moves
from layout_solver.zoo.runner import explain_named


def test_unit_axis_moves_are_permutations_and_other_reshapes_are_not():
    assert unit_axis_moves((1, 64, 1, 1), (1, 1, 1, 64)) == (0, 2, 3, 1)
    assert unit_axis_moves((1, 1, 49, 10), (1, 49, 10, 1)) == (0, 2, 3, 1)
    assert unit_axis_moves((1, 25, 5, 64), (125, 64)) is None  # axes merged
    assert unit_axis_moves((2, 3), (3, 2)) is None  # a reshape, not a transpose


def _op(op, inputs, outputs, in_shapes, out_shapes, perm=()):
    return TosaOp(op, inputs, outputs, in_shapes, "int8", perm=perm, output_shapes=out_shapes)


def test_tosa_orders_follow_transposes_and_vela_rows_land_on_their_ops():
    ops = [
        _op("CONST", (), ("w",), (), ((8, 1, 1, 4),)),
        _op("TRANSPOSE", ("x",), ("t",), ((1, 4, 6, 6),), ((1, 6, 6, 4),), perm=(0, 2, 3, 1)),
        _op("CONV2D", ("t", "w"), ("c",), ((1, 6, 6, 4), (8, 1, 1, 4)), ((1, 6, 6, 8),)),
        _op("RESCALE", ("c",), ("r",), ((1, 6, 6, 8),), ((1, 6, 6, 8),)),
        _op("TRANSPOSE", ("r",), ("o",), ((1, 6, 6, 8),), ((1, 8, 6, 6),), perm=(0, 3, 1, 2)),
    ]
    rows = [  # Vela names a fused CONV2D + RESCALE by the RESCALE's tensor
        {
            "Target": "NPU",
            "Op Cycles": "100",
            "Original Operator": "Transpose",
            "NNG Operator": "Transpose",
            "Name": "t",
        },
        {"Target": "NPU", "Op Cycles": "500", "Original Operator": "Conv2D", "NNG Operator": "Conv2D", "Name": "r"},
        {
            "Target": "NPU",
            "Op Cycles": "120",
            "Original Operator": "Transpose",
            "NNG Operator": "Transpose",
            "Name": "o",
        },
        {"Target": "CPU", "Op Cycles": "0", "Original Operator": "X", "NNG Operator": "X", "Name": "cpu"},
    ]
    graph = delegate_graph("d", "cycles", ops, rows)
    by_id = {op.id: op for op in graph.ops}
    assert "w" not in by_id and by_id["c"].inputs == ["t"]  # constants are not drawn
    assert by_id["x"].layout == "NCHW (0, 1, 2, 3)"
    assert by_id["t"].layout == by_id["c"].layout == "NHWC (0, 2, 3, 1)"
    assert by_id["o"].layout == "NCHW (0, 1, 2, 3)"
    assert by_id["c"].cost == 500 and by_id["r"].cost is None
    assert [op.id for op in graph.conversions] == ["t", "o"]
    assert graph.total == 720


def test_cost_deltas_price_new_ops_whole_and_kept_ops_by_difference():
    stock = [LayoutGraph("d", "us", [GraphOp("a", "conv", cost=5.0), GraphOp("t", "permute", cost=2.0)])]
    solver = [LayoutGraph("d", "us", [GraphOp("a", "conv", cost=4.0), GraphOp("n", "copy", cost=1.0)])]
    assert cost_deltas(stock, solver) == {"d": {"a": -1.0, "n": 1.0}}


SHARED = pytest.mark.xdist_group("explained_convnext_xnnpack")  # one lowering for this and the browser test


@pytest.mark.parametrize(("model", "target"), [("ds_cnn", "ethos-u55-128"), ("convnext_stack", "vulkan"),
                                                pytest.param("convnext_stack", "xnnpack", marks=SHARED)])  # fmt: skip
def test_overlay_prices_add_up_to_the_comparisons_totals(model, target, tmp_path, request):
    if target == "xnnpack":
        explanation, tmp_path = request.getfixturevalue("explained_convnext_xnnpack")
    else:
        explanation = explain_named(model, target, tmp_path, time_limit=10)
    for side, total in explanation.totals.items():
        assert total["reported"] is not None, side
        assert total["overlay"] == pytest.approx(total["reported"], rel=1e-6, abs=1e-3), side
    written = json.loads((tmp_path / "explain.json").read_text())
    assert set(written["files"]) == {"stock", "solver"}
    for side in ("stock", "solver"):
        collection = json.loads((tmp_path / f"{side}.graphs.json").read_text())
        ids = {g["id"] for g in collection["graphs"]}
        assert ids == {g.id for g in explanation.graphs[side]}
        costs = json.loads((tmp_path / f"{side}.cost.json").read_text())
        drawn = sum(r["value"] for g in costs.values() for r in g["results"].values())
        assert drawn == pytest.approx(explanation.totals[side]["overlay"], abs=1e-3)
        layouts = json.loads((tmp_path / f"{side}.layout.json").read_text())
        assert any(g["results"] for g in layouts.values())  # every target names its tensors' layouts
    # every conversion is drawn as one, with its price
    for side in ("stock", "solver"):
        conversions = json.loads((tmp_path / f"{side}.conversions.json").read_text())
        assert sum(len(g["results"]) for g in conversions.values()) == len(explanation.conversions(side))
    assert (tmp_path / "solver.delta.json").exists()


def test_the_explain_command_prints_its_summary_and_keeps_the_libraries_output_in_a_log(tmp_path, capfd):
    from layout_solver.cli import main

    tiny = f"{Path(__file__).parents[1] / 'models' / 'tiny.py'}:residual"
    assert main(["explain", tiny, "--target", "vulkan", "--out", str(tmp_path)]) == 0
    captured = capfd.readouterr()
    assert captured.err == ""  # executorch's INFO lines and the like are in the log, not on the console
    lines = captured.out.splitlines()
    assert lines[0].startswith(f"{tiny} on vulkan") and "third_party.log" in lines[-1]
    assert (tmp_path / "explain.json").exists() and (tmp_path / "third_party.log").exists()
