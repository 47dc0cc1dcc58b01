"""Cost models: canonical transposes are exact rewrites; Vela is really asked; Vulkan prices are sane."""

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cost_models import ethos_u55, vulkan
from cost_models.calibration.vela_runner import measure_transpose


@st.composite
def shape_and_perm(draw):
    rank = draw(st.integers(1, 6))
    shape = tuple(draw(st.lists(st.integers(1, 4), min_size=rank, max_size=rank)))
    perm = tuple(draw(st.permutations(range(rank))))
    return shape, perm


@settings(max_examples=300, deadline=None)
@given(shape_and_perm())
def test_canonical_transpose_moves_the_same_data(case):
    shape, perm = case
    x = np.arange(math.prod(shape)).reshape(shape)
    cshape, cperm = ethos_u55.canonical_transpose(shape, perm)
    assert 1 not in cshape
    assert all(cperm[i + 1] != cperm[i] + 1 for i in range(len(cperm) - 1))  # nothing left to merge
    expected = np.transpose(x, perm).ravel()
    assert np.array_equal(np.transpose(x.reshape(cshape), cperm).ravel(), expected)


def test_identity_in_memory_is_a_free_reshape():
    cost = ethos_u55.transpose_cost((1, 64, 16, 1), (0, 3, 1, 2))
    assert cost.cycles == 0 and cost.source == "reshape"


def test_vela_runner_reproduces_known_figures(tmp_path):
    # The brief's measurement: [1,16,32,64] NCHW->NHWC is 2 NPU ops, 24,576 cycles (Vela 5.1, U55-128).
    m = measure_transpose((1, 16, 32, 64), (0, 2, 3, 1), "int8", cache_dir=tmp_path)
    assert (m.npu_ops, m.cycles) == (2, 24576)
    assert len(list(tmp_path.glob("*.json"))) == 1
    again = measure_transpose((1, 16, 32, 64), (0, 2, 3, 1), "int8", cache_dir=tmp_path)
    assert again == m


def test_cheapest_materialisation_is_cheaper_on_vela(tmp_path):
    """Merging the 3x3 axes turns Vela's 10-op rank-5 transpose into one op."""
    raw = measure_transpose((1, 196, 3, 3, 64), (0, 2, 3, 1, 4), "int8", cache_dir=tmp_path)
    cshape, cperm = ethos_u55.canonical_transpose((1, 196, 3, 3, 64), (0, 2, 3, 1, 4))
    best = measure_transpose(cshape, cperm, "int8", cache_dir=tmp_path)
    assert raw.npu_ops == 10 and best.npu_ops == 1 and best.cycles * 10 < raw.cycles


def test_model_knows_every_permutation_up_to_rank4():
    import itertools

    params = ethos_u55.load_params()
    for dtype in ("int8", "int16"):
        for rank in (2, 3, 4):
            for perm in itertools.permutations(range(rank)):
                _, cperm = ethos_u55.canonical_transpose((5,) * rank, perm)
                if not ethos_u55.is_identity(cperm):
                    assert cperm in params.tables[dtype].per_perm, (dtype, perm)


def test_vulkan_transition_costs():
    shape = (1, 64, 32, 32)
    same = vulkan.transition_cost(shape, "float32", "TEXTURE_3D:TENSOR_WIDTH_PACKED", "TEXTURE_3D:TENSOR_WIDTH_PACKED")
    pack = vulkan.transition_cost(shape, "float32", "TEXTURE_3D:TENSOR_CHANNELS_PACKED", "TEXTURE_3D:TENSOR_WIDTH_PACKED")
    both = vulkan.transition_cost(shape, "float32", "TEXTURE_3D:TENSOR_CHANNELS_PACKED", "BUFFER:TENSOR_WIDTH_PACKED")
    assert same == 0 < pack < both
    assert vulkan.transition_cost((1, 1, 1, 1), "float32", "BUFFER:TENSOR_WIDTH_PACKED",
                                  "TEXTURE_3D:TENSOR_WIDTH_PACKED") >= vulkan.load_params().dispatch_overhead_us
    with pytest.raises(ValueError):
        vulkan.split_repr("TEXTURE_3D:SIDEWAYS")


def test_every_vulkan_parameter_is_documented():
    from importlib import resources

    data = json.loads((resources.files("cost_models") / "data" / "vulkan_v1.json").read_text())
    assert all(len(p["meaning"]) > 20 for p in data["parameters"].values())


def test_cost_cli_json(capsys):
    from layout_solver.cli import main

    assert main(["cost", "transpose", "--target", "ethos-u55-128", "--shape", "1,16,32,64", "--perm", "0,2,3,1",
                 "--dtype", "int8", "--exact", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["cycles"] > 0 and result["vela_cycles"] == 12288  # Vela on the canonical (16, 2048) swap
    assert result["canonical_perm"] == [1, 0]


@settings(max_examples=300, deadline=None)
@given(shape_and_perm(), st.data())
def test_view_orders_are_pure_reshapes(case, data):
    """Whatever order view_output_order proposes really moves no data."""
    from layout_solver.arm.rules import view_output_order

    shape, order_in = case
    n = math.prod(shape)
    # a random regrouping of the same elements
    out = list(shape)
    if len(out) >= 2 and data.draw(st.booleans()):
        k = data.draw(st.integers(0, len(out) - 2))
        out[k:k + 2] = [out[k] * out[k + 1]]
    order_out = view_output_order(shape, out, order_in)
    if order_out is not None:
        x = np.arange(n)
        assert np.array_equal(x.reshape(shape).transpose(order_in).ravel(),
                              x.reshape(out).transpose(order_out).ravel())
    if list(order_in) == sorted(order_in):
        assert order_out == tuple(range(len(out)))  # the identity always works


def test_view_orders_found_when_groups_move_whole():
    """A view is free when the input order moves whole reshape groups: [2,3,4] (1,2,0) -> [2,12] (1,0)."""
    from layout_solver.arm.rules import view_output_order

    assert view_output_order((2, 3, 4), (2, 12), (1, 2, 0)) == (1, 0)
    assert view_output_order((2, 12), (2, 3, 4), (1, 0)) == (1, 2, 0)
    assert view_output_order((2, 3, 4), (2, 12), (0, 2, 1)) is None  # splits a group: data would move
