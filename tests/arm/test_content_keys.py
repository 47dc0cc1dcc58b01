"""The stage's stored answers and verification decisions are keyed by the graph's content, not its node order:
executorch 1.5.1 hands the same graph over in another topological order from one process to the next, and an
order-reading key missed the answer an earlier process stored (a cold lowering, both pipelines and Vela twice;
resnet8 came in two orders in five processes)."""

import copy

import torch

from layout_solver.lowering.provenance import graph_content


class TwoBranches(torch.nn.Module):
    def forward(self, x, y):
        return torch.relu(x) + torch.sigmoid(y)


def _traced():
    return torch.fx.symbolic_trace(TwoBranches())


def test_the_same_graph_in_another_topological_order_has_the_same_content():
    graph_module = _traced()
    reordered = copy.deepcopy(graph_module)
    relu = next(n for n in reordered.graph.nodes if n.target is torch.relu)
    sigmoid = next(n for n in reordered.graph.nodes if n.target is torch.sigmoid)
    sigmoid.append(relu)  # relu now runs after sigmoid: the same graph, another order
    reordered.graph.lint()
    assert [n.name for n in reordered.graph.nodes] != [n.name for n in graph_module.graph.nodes]
    assert graph_content(reordered.graph.nodes) == graph_content(graph_module.graph.nodes)


def test_a_changed_graph_or_input_order_has_other_content():
    graph_module = _traced()
    swapped = copy.deepcopy(graph_module)
    x, y = [n for n in swapped.graph.nodes if n.op == "placeholder"]
    x.prepend(y)  # the same nodes read as inputs in the other order: another calling convention
    assert [n.name for n in swapped.graph.nodes if n.op == "placeholder"] == ["y", "x"]
    assert graph_content(swapped.graph.nodes) != graph_content(graph_module.graph.nodes)
    rewired = copy.deepcopy(graph_module)
    add = next(n for n in rewired.graph.nodes if n.op == "call_function" and "add" in str(n.target))
    add.args = (add.args[1], add.args[0])
    assert graph_content(rewired.graph.nodes) != graph_content(graph_module.graph.nodes)
    # a constant's values are part of the content when the caller says so
    values = lambda value: lambda node: value if node.op == "placeholder" else b""
    assert graph_content(graph_module.graph.nodes, values(b"1")) != graph_content(
        graph_module.graph.nodes, values(b"2")
    )
