"""Arm op rules one by one: each rule builds its modes on a tiny graph, the solver picks an assignment,
and the write-back (graph_io.arm) keeps the graph computing the same function. The write-back's
per-axis remaps are also checked on their own, from hand-written plans (no solver)."""

import operator

import pytest
import torch

pytest.importorskip("executorch.backends.arm")

from executorch.exir.dialects._ops import ops as exir_ops

from graph_io.arm import ArgRemap, ArmRewritePlan, NodeRewrite, apply_plan
from layout_solver.arm import op_rules
from layout_solver.arm.passes import rewrite_plan
from layout_solver.arm.pricing import default_vela_pricing
from layout_solver.arm.problem_builder import build_problem
from layout_solver.core.solve import solve

aten = exir_ops.edge.aten
NHWC, NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


def _graph(body, shapes):
    """A GraphModule of placeholders x0.. with the given shapes and `body(graph, inputs)` -> outputs;
    meta["val"] is filled by running it on random inputs."""
    graph = torch.fx.Graph()
    inputs = [graph.placeholder(f"x{i}") for i in range(len(shapes))]
    outputs = body(graph, inputs)
    graph.output(tuple(outputs))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    args = [torch.randint(-8, 8, s).float() for s in shapes]  # integer-valued: sums in any order are exact
    env = dict(zip(inputs, args))
    for node in graph.nodes:
        if node.op == "placeholder":
            node.meta["val"] = env[node]
        elif node.op == "call_function":
            a = torch.fx.node.map_arg(node.args, env.__getitem__)
            k = torch.fx.node.map_arg(node.kwargs, env.__getitem__)
            env[node] = node.target(*a, **k)
            node.meta["val"] = env[node]
    return gm, args


def _as_int32(gm):
    """Give every tensor of `gm` the int32 dtype the INT pipeline reduces and tiles in (the pricing reads it)."""
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "call_function"):
            node.meta["val"] = node.meta["val"].to(torch.int32)


def _call(graph, target, *args, **kwargs):
    return graph.call_function(target, args, kwargs)


def _solve_and_rewrite(gm, args):
    expected = gm(*args)
    arm = build_problem(gm)
    solution = solve(arm.problem, time_limit=5.0)
    written, removed = apply_plan(gm, rewrite_plan(arm, solution))
    gm.graph.lint()
    gm.recompile()
    for got, want in zip(gm(*args), expected):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    return arm, solution, written, removed


def _permutes(gm):
    return sum(1 for n in gm.graph.nodes if n.target is aten.permute_copy.default)


def _wrapped(op):
    """x (NCHW) -> permute to NHWC -> op -> permute back: the pattern the Arm pipeline leaves around
    layout-sensitive ops; a free op in between lets both permutes go."""

    def body(graph, xs):
        inner = [_call(graph, aten.permute_copy.default, x, NHWC) for x in xs]
        y = op(graph, inner)
        return [_call(graph, aten.permute_copy.default, y, NCHW)]

    return body


CASES = {
    "elementwise": (lambda g, xs: _call(g, aten.add.Tensor, xs[0], xs[1]), [(2, 3, 4, 5)] * 2, "elementwise"),
    "unary": (lambda g, xs: _call(g, aten.relu.default, xs[0]), [(2, 3, 4, 5)], "elementwise"),
    "pointwise_math": (lambda g, xs: _call(g, aten.sigmoid.default, xs[0]), [(2, 3, 4, 5)], "elementwise"),
    "reduction": (lambda g, xs: _call(g, aten.sum.dim_IntList, xs[0], [3], True), [(2, 3, 4, 5)], "reduction"),
    "concat": (lambda g, xs: _call(g, aten.cat.default, [xs[0], xs[1]], 3), [(2, 3, 4, 5)] * 2, "concat"),
    "view": (lambda g, xs: _call(g, aten.view_copy.default, xs[0], [2, 20, 3]), [(2, 3, 4, 5)], "view"),
    "repeat": (lambda g, xs: _call(g, aten.repeat.default, xs[0], [1, 2, 1, 3]), [(2, 3, 4, 5)], "reorder"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_free_op_between_a_permute_pair_loses_both(case):
    op, shapes, kind = CASES[case]
    if case == "view":  # NHWC [2,4,5,3] -> [2,20,3], then back to logical [2,3,20]

        def body(graph, xs):
            y = op(graph, [_call(graph, aten.permute_copy.default, xs[0], NHWC)])
            return [_call(graph, aten.permute_copy.default, y, [0, 2, 1])]
    else:
        body = _wrapped(op)
    gm, args = _graph(body, shapes)
    arm, solution, written, removed = _solve_and_rewrite(gm, args)
    assert written == 0
    target = next(n for n in arm.op_node.values() if n.target is not aten.permute_copy.default)
    assert arm.op_rule[target.name].kind == kind
    assert solution.objective == 0 and _permutes(gm) == 0 and removed == len(args) + 1


def test_a_reduction_is_priced_where_its_axis_lands():
    """Sum over C of an int32 NHWC view, priced by Vela (ethos-u55-128): in the identity order C is innermost
    (native); stored NCHW it is not, so that mode pays for the transpose Vela inserts before REDUCE_SUM."""
    gm, _ = _graph(_wrapped(CASES["reduction"][0]), [(2, 3, 4, 5)])
    _as_int32(gm)
    problem = build_problem(gm, pricing=default_vela_pricing()).problem
    reduction = next(op for op in problem.ops if op.target == "sum.dim_IntList")
    cost = {m.name: m.cost for m in reduction.modes}
    assert 0.0 < cost["0,1,2,3"] < cost["0,3,1,2"]


def test_a_reduction_along_an_outer_axis_is_offered_its_axis_innermost():
    """An int32 sum over H of an NHWC tensor (global response normalisation's sum over H and W, one axis at a
    time as DecomposeSumPass leaves it): Vela transposes the 32-bit operand before reducing an outer axis,
    which on Ethos-U85 costs several times a reduction along the innermost one. The rule offers the order with
    H innermost, and Vela for ethos-u85-256 prices that mode far below the identity's."""
    from executorch.backends.arm.ethosu import EthosUCompileSpec

    from layout_solver.arm.pricing import pricing_for

    gm, _ = _graph(lambda g, xs: [_call(g, aten.sum.dim_IntList, xs[0], [1], True)], [(1, 16, 16, 64)])
    _as_int32(gm)
    arm = build_problem(gm, pricing=pricing_for(EthosUCompileSpec("ethos-u85-256")))
    reduction = next(op for op in arm.problem.ops if op.target == "sum.dim_IntList")
    cost = {m.name: m.cost for m in reduction.modes}
    assert cost["0,2,3,1"] < cost["0,1,2,3"] / 2, cost


def test_a_repeat_is_offered_its_repeated_axes_outermost():
    """An int32 repeat along the innermost axis (BEiT's relative position index, computed in the program, tiles
    [64, 64, 1] to [64, 64, 2] twenty times): Vela runs a TILE as one memory copy per repeat, element-strided
    when the repeated axis is inner. The rule offers the order with that axis outermost, where each copy is one
    contiguous block, and Vela for ethos-u55-128 prices that mode at a fraction of the identity's."""
    gm, _ = _graph(lambda g, xs: [_call(g, aten.repeat.default, xs[0], [1, 1, 2])], [(64, 64, 1)])
    _as_int32(gm)
    arm = build_problem(gm, pricing=default_vela_pricing())
    repeat = next(op for op in arm.problem.ops if op.target == "repeat.default")
    cost = {m.name: m.cost for m in repeat.modes}
    assert cost["2,0,1"] < cost["0,1,2"] / 4, cost


def test_registered_pinned_and_unknown_ops_keep_the_identity_order():
    def body(graph, xs):
        y = _call(graph, aten.permute_copy.default, xs[0], NHWC)
        z = _call(graph, aten.clone.default, y)  # registered: pinned on purpose
        w = _call(graph, aten.cumsum.default, z, 3)  # no rule: pinned with a warning
        return [_call(graph, aten.permute_copy.default, w, NCHW)]

    gm, args = _graph(body, [(2, 3, 4, 5)])
    with pytest.warns(UserWarning, match=r"cumsum\.default"):
        arm, solution, _, _ = _solve_and_rewrite(gm, args)
    clone, cumsum = (next(n.name for n in gm.graph.nodes if f"{t}." in str(n.target)) for t in ("clone", "cumsum"))
    assert arm.op_rule[clone] is op_rules.PINNED and arm.op_rule[cumsum] is op_rules.UNKNOWN
    assert [p.split()[0] for p in arm.pinned_unknown] == [cumsum]
    assert solution.labels[clone] == solution.labels[cumsum] == "0,1,2,3"


def test_a_target_has_one_rule_and_a_refused_registration_changes_nothing():
    assert op_rules.RULES["add.Tensor"] is op_rules.RULES["sub.Tensor"]
    before = dict(op_rules.RULES)
    with pytest.raises(ValueError, match="two Arm op rules for add.Tensor"):
        op_rules.register("brand_new_op.default", "add.Tensor")(op_rules.Elementwise)
    assert op_rules.RULES == before
    assert op_rules.UNKNOWN not in op_rules.RULES.values()


# --- the write-back on its own: hand-written plans, reference implementations of TOSA's per-axis ops ---


def _pad(x, pairs):
    """TOSA PAD: [lo, hi] per axis, axes in order."""
    return torch.nn.functional.pad(x, [p for i in reversed(range(x.dim())) for p in pairs[2 * i : 2 * i + 2]])


def _slice(x, start, size):
    """TOSA SLICE: start and size per axis."""
    return x[tuple(slice(s, s + n) for s, n in zip(start, size))]


def _sum_keep(x, dims):
    return x.sum(dim=dims, keepdim=True)


def _cat(xs, dim=0):
    return torch.cat(xs, dim)


@pytest.mark.parametrize(
    "name, target, extra, remaps",
    [
        ("pad", _pad, ([0, 0, 1, 2, 0, 1, 3, 0],), (ArgRemap(1, "per_axis_pairs"),)),
        ("slice", _slice, ([0, 1, 0, 2], [1, 2, 4, 3]), (ArgRemap(1, "per_axis"), ArgRemap(2, "per_axis"))),
        ("sum", _sum_keep, ([1, 3],), (ArgRemap(1, "axes"),)),
        ("repeat", torch.Tensor.repeat, ([1, 2, 1, 3],), op_rules.RULES["repeat.default"].remaps),
        ("view", torch.reshape, ([2, 3, 20],), (ArgRemap(1, "physical_shape"),)),
    ],
)
def test_a_planned_order_remaps_per_axis_arguments(name, target, extra, remaps):
    """The node runs on its input stored NHWC and keeps its result NHWC; the output is read back in the
    identity order. Same function, whatever the order."""
    order = tuple(NHWC) if name != "view" else (0, 2, 1)
    reads_order = tuple(NHWC)

    def body(graph, xs):
        return [_call(graph, target, xs[0], *extra)]

    gm, args = _graph(body, [(2, 3, 4, 5)])
    expected = gm(*args)[0]
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    plan = ArmRewritePlan(
        {"x0": (0, 1, 2, 3), node.name: order}, {node.name: NodeRewrite({"x0": reads_order}, order, remaps)}
    )
    assert apply_plan(gm, plan) == (2, 0)  # one permute in, one out
    gm.recompile()
    torch.testing.assert_close(gm(*args)[0], expected, rtol=0, atol=0)


def test_a_planned_concat_axis_given_by_keyword_is_remapped_once():
    def body(graph, xs):
        return [_call(graph, _cat, [xs[0], xs[1]], dim=1)]

    gm, args = _graph(body, [(2, 3, 4, 5)] * 2)
    expected = gm(*args)[0]
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    order = tuple(NHWC)
    plan = ArmRewritePlan(
        {"x0": (0, 1, 2, 3), "x1": (0, 1, 2, 3), node.name: order},
        {node.name: NodeRewrite({"x0": order, "x1": order}, order, (ArgRemap(1, "axis"),))},
    )
    apply_plan(gm, plan)
    gm.recompile()
    assert node.kwargs == {"dim": 3} and len(node.args) == 1
    torch.testing.assert_close(gm(*args)[0], expected, rtol=0, atol=0)


def test_an_aliased_permute_is_removed_and_its_users_read_the_source():
    def body(graph, xs):
        y = _call(graph, aten.permute_copy.default, xs[0], NHWC)
        return [_call(graph, operator.neg, y)]

    gm, args = _graph(body, [(2, 3, 4, 5)])
    expected = gm(*args)[0]
    perm = next(n for n in gm.graph.nodes if n.op == "call_function")
    neg = next(iter(perm.users))
    plan = ArmRewritePlan(
        {"x0": (0, 1, 2, 3), perm.name: (0, 3, 1, 2), neg.name: (0, 1, 2, 3)},
        {
            perm.name: NodeRewrite({"x0": (0, 1, 2, 3)}, (0, 3, 1, 2), alias=True),
            neg.name: NodeRewrite({perm.name: (0, 1, 2, 3)}, (0, 1, 2, 3)),
        },
    )
    assert apply_plan(gm, plan) == (1, 1)  # the output read in the identity order needs one permute
    gm.recompile()
    torch.testing.assert_close(gm(*args)[0], expected, rtol=0, atol=0)


def test_a_planned_transposed_product_swaps_its_operands_and_their_qparams():
    """(A B)^T = B^T A^T: both operands read transposed, the product stored transposed, the operands (and the
    quantization parameters recorded for them) swapped; read back in the identity order it is the same product."""

    def body(graph, xs):
        return [_call(graph, torch.bmm, xs[0], xs[1])]

    gm, args = _graph(body, [(2, 3, 5), (2, 5, 4)])
    expected = gm(*args)[0]
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    node.meta["input_qparams"] = {0: "a's", 1: "b's"}
    t = (0, 2, 1)
    plan = ArmRewritePlan(
        {"x0": (0, 1, 2), "x1": (0, 1, 2), node.name: t},
        {node.name: NodeRewrite({"x0": t, "x1": t}, t, op_rules.MatMul.remaps)},
    )
    assert apply_plan(gm, plan) == (3, 0)  # each operand in, the result out
    gm.recompile()
    assert node.meta["input_qparams"] == {0: "b's", 1: "a's"}
    assert [a.args[0].name for a in node.args] == ["x1", "x0"]
    torch.testing.assert_close(gm(*args)[0], expected, rtol=0, atol=0)


def test_a_node_with_several_results_reads_its_operand_in_the_identity_order():
    """A split (several results, no rule) reads a value the answer could keep transposed: with both permutes
    around relu free to go, the answer stored relu in x's order and the split cut the wrong axis. Such a node
    now reads its operands in the identity order (one permute in front of it) and the graph computes the same."""

    def body(graph, xs):
        y = _call(graph, aten.relu.default, _call(graph, aten.permute_copy.default, xs[0], [0, 2, 1]))
        parts = _call(graph, aten.split_with_sizes_copy.default, y, [3, 5], 2)
        a, b = (_call(graph, operator.getitem, parts, i) for i in range(2))
        total = _call(graph, aten.add.Tensor, _call(graph, aten.sum.dim_IntList, a, [2], True),
                      _call(graph, aten.sum.dim_IntList, b, [2], True))  # fmt: skip
        return [total, _call(graph, aten.add.Tensor, _call(graph, aten.permute_copy.default, y, [0, 2, 1]), xs[0])]

    gm, args = _graph(body, [(1, 8, 6)])
    split = next(n for n in gm.graph.nodes if n.target == aten.split_with_sizes_copy.default)
    _, solution, written, removed = _solve_and_rewrite(gm, args)
    assert solution.modes[f"{split.name}#reads"] == "contract"
    assert (written, removed) == (1, 2)  # both permutes go; one comes back in front of the split
