"""The solver in place of XNNPACK's ChannelsLastTaggedReshapePass, and the counting stock pass.

`SolverChannelsLastTaggedReshapePass` builds the delegate's problem (`rules.build_problem`), solves it, and
writes the answer back with stock's own machinery: each node is tagged with its value's order
(`XNN_NHWC_NODE`), and an operand read in the other order goes through stock's `input_to_nhwc` /
`input_to_nchw`, so conversion stubs are shared per (value, order) as stock's partner nodes are and quantized
graphs get stock's copy / q / dq patterns and implicit-q/dq tags. Stock's pass runs on a copy of the same
graph; both results are priced by one reading of their tags (`pricing.layout_cost`) and the cheaper is
returned, so the stage never hands back a delegate its cost model prices dearer than stock's.

`CountingChannelsLastTaggedReshapePass` is stock's pass, unchanged, recording what it wrote.
"""

from __future__ import annotations

import copy
import time

from executorch.backends.xnnpack._passes.channels_last_tagged_reshape_pass import ChannelsLastTaggedReshapePass
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import PassResult

from cost_models import xnnpack as xnn_cost
from layout_solver.core.problem import ProblemError, Solution
from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.lowering.pass_report import PassReport, is_explaining, record
from layout_solver.lowering.solver_pass import SolverPass, lowering_solver, solver_report
from layout_solver.xnnpack.op_rules import CHANNELS_LAST, rank
from layout_solver.xnnpack.pricing import LayoutCost, graph_with_prices, layout_cost
from layout_solver.xnnpack.problem_builder import SECOND_ORDER_REFUSED, BuiltProblem, build_problem, stored_label
from layout_solver.xnnpack.program import has_symbolic_shapes
from layout_solver.xnnpack.runtime_model import delegate_run_ops
from layout_solver.xnnpack.validate import stored_outputs, validate
from layout_solver.xnnpack.visitors import set_label

TAG = ChannelsLastTaggedReshapePass.XNN_NHWC_NODE
# The stage's delegate replaces stock's only where it is predicted cheaper by more than this (microseconds) and
# by this share of stock's conversions (the profile's own error on small conversions): a tie keeps stock's bytes.
MIN_SAVING_US = 1.0
MIN_SAVING_SHARE = 0.1


def _report_fields(cost: LayoutCost, graph_module=None, exported_program=None) -> dict:
    fields = {
        "transitions": [c.record() for c in cost.conversions],
        "transitions_written": cost.transposes,
        "modelled_us": round(cost.us, 4),
        "pricing": "xnnpack",
    }
    if graph_module is not None and is_explaining():
        fields["graph"] = graph_with_prices(graph_module, cost, exported_program)
    return fields


class CountingChannelsLastTaggedReshapePass(ChannelsLastTaggedReshapePass):
    """Stock's pass; records the conversions it left, priced by the profile."""

    profile: xnn_cost.XnnpackProfile | None = None
    threads: int = 1

    def call(self, graph_module):
        started = time.perf_counter()
        result = super().call(graph_module)
        profile = self.profile or xnn_cost.load_profile()
        cost = layout_cost(result.graph_module, profile, self.threads)
        report = PassReport(
            "stock",
            pass_seconds=time.perf_counter() - started,
            **_report_fields(cost, result.graph_module, self.exported_program),
        )
        report.run_ops = delegate_run_ops(result.graph_module, cost)
        record(report)
        return result


class SolverChannelsLastTaggedReshapePass(SolverPass, ChannelsLastTaggedReshapePass):
    """The solver's dim orders for one XNNPACK delegate (see the module docstring)."""

    time_limit: float = DEFAULT_TIME_LIMIT
    profile: xnn_cost.XnnpackProfile | None = None
    threads: int = 1
    service: str | None = None
    retraced = None
    stored: list[bool | None] | None = None

    def call(self, graph_module):
        started = time.perf_counter()
        profile = self.profile or xnn_cost.load_profile()
        if has_symbolic_shapes(graph_module.graph):  # the rules price static shapes: stock's pass, as shipped
            self.run = None
            result = ChannelsLastTaggedReshapePass.call(self, graph_module)
            report = PassReport("stock-fallback", pass_seconds=time.perf_counter() - started,
                                notes=["stock kept: dynamic shapes"])  # fmt: skip
            report.kept_stock = True  # no run-time prediction: the model prices static shapes
            record(report)
            return result
        self.stored = stored_outputs(graph_module)  # what the program outside holds, before anything is written
        stock_graph = ChannelsLastTaggedReshapePass(self.exported_program).call(copy.deepcopy(graph_module))
        stock_cost = layout_cost(stock_graph.graph_module, profile, self.threads)
        try:
            run = self.solve_graph(graph_module)
        except (ProblemError, ValueError) as exc:  # a graph the rules cannot read: stock's answer, said so
            self.run = None
            return self._keep_stock(stock_graph, stock_cost, started, f"stock kept: {exc}")
        if run.solution.objective >= stock_cost.us:
            # The answer's own price is no saving: stock's is kept without retracing the written graph (the
            # retrace, an ExportPass over the whole delegate, was a third of the stage's time on a Llama decoder's
            # 328 delegates, every one kept stock's).
            self.run = None
            return self._keep_stock(stock_graph, stock_cost, started, "stock kept: the stage's layout is not cheaper")
        solved = super(ChannelsLastTaggedReshapePass, self).call(graph_module)  # ExportPass: retrace
        self.retraced = solved.graph_module  # what `ensures` checks: the stubs have their tensors only now
        cost = layout_cost(solved.graph_module, profile, self.threads)
        if cost.us > stock_cost.us - max(MIN_SAVING_US, MIN_SAVING_SHARE * stock_cost.us):
            self.run = None
            return self._keep_stock(stock_graph, stock_cost, started, "stock kept: the stage's layout is not cheaper")
        report = solver_report(
            run, time.perf_counter() - started, **_report_fields(cost, solved.graph_module, self.exported_program)
        )
        report.run_ops = delegate_run_ops(solved.graph_module, cost)
        report.stock_cost = round(stock_cost.us, 4)
        self.report = report
        record(report)
        return PassResult(solved.graph_module, True)

    def _keep_stock(self, stock_graph, stock_cost: LayoutCost, started: float, note: str) -> PassResult:
        report = PassReport(
            "stock-fallback",
            pass_seconds=time.perf_counter() - started,
            notes=[note],
            **_report_fields(stock_cost, stock_graph.graph_module, self.exported_program),
        )
        report.stock_cost = round(stock_cost.us, 4)
        report.kept_stock = True
        report.run_ops = delegate_run_ops(stock_graph.graph_module, stock_cost)
        record(report)
        return stock_graph

    def build(self, graph_module) -> BuiltProblem:
        """The delegate's layout problem (rules.build_problem), priced at the lowering's thread count."""
        return build_problem(graph_module, self.exported_program, self.profile or xnn_cost.load_profile(),
                             self.threads)  # fmt: skip

    def solve(self, built: BuiltProblem) -> Solution:
        """Solve in-process or on the service (a multi-method lowering's joint answer where one is served)."""
        placeholders = {n.name for n in built.nodes.values() if n.op == "placeholder"}
        return lowering_solver(self.time_limit, self.service, self.exported_program, lambda: placeholders)(
            built.problem
        )

    def write_back(self, graph_module, built: BuiltProblem, solution: Solution) -> None:
        """Tag every node with its value's order; convert each operand an op reads in the other order."""
        refused = [t for t in solution.transitions if t.cost >= SECOND_ORDER_REFUSED]
        if refused:  # every answer converts a value that cannot take a second order: none is legal
            raise ProblemError(
                "no layout without converting "
                + ", ".join(f"{t.value} ({t.src} -> {t.dst}, read by {', '.join(t.consumers)})" for t in refused),
                values=[t.value for t in refused],
            )
        ops = {op.id: op for op in built.problem.ops}
        labels = solution.labels
        removed: dict = {}  # a copy taken out: its input stands for it (a graph output too)
        self._conversions: dict = {}  # (operand, order) -> what readers wanting it read (`_converted_for`)
        for node in list(graph_module.graph.nodes):
            if node.op in ("placeholder", "get_attr"):
                if rank(node) == 4:
                    node.meta[TAG] = labels.get(node.name, stored_label(node)) == CHANNELS_LAST
            elif node.op == "call_function" and node.name in ops:
                self._convert_operands(graph_module, node, ops[node.name], solution, built, removed)
                set_label(node, labels[node.name])
                if solution.modes[node.name].endswith("(removed)"):  # a copy into the order it already has
                    removed[node.name] = removed.get(node.args[0].name, node.args[0])
                    node.replace_all_uses_with(node.args[0])
                    graph_module.graph.erase_node(node)
            elif node.op == "output":
                for index, out in enumerate(node.args[0]):
                    op = ops.get(f"output#{index}")
                    if op is not None:
                        self._convert_operands(graph_module, node, op, solution, built, removed, only=out)
        graph_module.recompile()
        for node in graph_module.graph.nodes:
            node.meta.pop(self.PARTNER_NODE, None)

    def _convert_operands(self, graph_module, node, op, solution, built, removed, only=None) -> None:
        mode = next(m for m in op.modes if m.name == solution.modes[op.id])
        for vid, wanted in zip(op.operands, mode.operands):
            operand = removed.get(vid, built.nodes[vid])
            if only is not None and operand is not only:
                continue
            if solution.labels[vid] == wanted:
                continue
            self._converted_for(graph_module, operand, node, wanted)

    def _converted_for(self, graph_module, operand, user, wanted: str) -> None:
        """`user` reads `operand` converted to `wanted`: one conversion per (value, order), shared by every reader
        that wants it, and no other reader moved. Stock's insertion around a dequantize (copy, q, dq) moves *every*
        reader of the dequantize onto the converted value, since stock converts a value for all its readers alike;
        here one reader of a value may want it converted and another not (a quantized MobileViT's SiLU: its sigmoid
        and its multiply read one dequantize, and the second conversion, of a value already converted, failed the
        post-condition), so the others are moved back."""
        key = (operand, wanted)
        made = self._conversions.get(key)
        if made is not None:
            user.replace_input_with(operand, made)
            return
        others = [u for u in operand.users if u is not user]
        read_before = set(user.all_input_nodes)
        if rank(operand) == 3:
            self._convert_rank3(graph_module, operand, user, wanted)
        elif wanted == CHANNELS_LAST:
            self.input_to_nhwc(graph_module, operand, user)
        else:
            self.input_to_nchw(graph_module, operand, user)
        made_now = [n for n in user.all_input_nodes if n not in read_before]
        if len(made_now) != 1:  # stock found nothing to convert (a placeholder or constant in the order already)
            return
        self._conversions[key] = made_now[0]
        for other in others:
            if other in made_now[0].users:
                other.replace_input_with(made_now[0], operand)

    def _convert_rank3(self, graph_module, operand, user, wanted: str) -> None:
        """Stock's stubs are 4-D: a 3-D value is converted by an identity permute_copy whose result is tagged in
        the order wanted (the physical permute visitor runs the one transpose), shared per value as stock's
        partner nodes are and wrapped in q / dq by stock's own quantization-sensitive insertion."""
        made = operand.meta.get(self.PARTNER_NODE)
        if made is None:
            with graph_module.graph.inserting_after(operand):
                made = self.create_call_function_node(
                    graph_module, exir_ops.edge.aten.permute_copy.default, (operand, [0, 1, 2])
                )
            made.meta["val"] = operand.meta["val"]
            set_label(made, wanted)
        self.insert_copy_and_assign_partner_nodes_quantization_sensitive(graph_module, operand, made, user)

    def check(self, graph_module, before) -> None:
        """The post-condition (validate.validate) on the written, retraced graph."""
        # PassBase hands `ensures` the graph it gave `call`; the written program is the retraced one.
        validate(self.retraced, self.stored)
