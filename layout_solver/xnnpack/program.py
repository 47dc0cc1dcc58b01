"""The whole program's dim orders, decided before XNNPACK partitions it: the delegates' boundaries included.

Stock hands every delegate its inputs and takes its outputs contiguous (the edge program's dim orders), so a
model cut by CPU ops converts NHWC -> NCHW at every delegate's end and back at the next one's start (ExecuTorch
issue #8265), even where the CPU op between them would run as well on channels-last data.

`ProgramLayoutPass` solves one problem over the edge program before partitioning: the ops the partitioner will
delegate (asked of the lowering's own partitioner, on a copy) with XNNPACK's rules (`op_rules`), the ops left on
the CPU with their portable kernels' rules (`PORTABLE_CHANNELS_LAST`: the kernels measured to compute the same
on channels-last tensors; every other kernel contiguous), the program's inputs and outputs in the orders the
program stores them. Where the answer runs a CPU region channels-last and is predicted cheaper than leaving the
program as it is, it writes `_to_dim_order_copy` nodes on the region's edges; those next to a delegate are
partitioned into it (XNNPACK's ToDimOrderCopyConfig), so the delegate writes or reads its boundary in NHWC and
its own layout pass (`passes.py`) lays out the inside. Quantized programs are left to the delegates' passes.
"""

from __future__ import annotations

import copy

import torch
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.pass_base import ExportPass, PassResult

from graph_io.fx import tensor_of
from layout_solver.core.problem import Problem, Solution
from layout_solver.xnnpack.op_rules import (
    CHANNELS_LAST,
    CONTIGUOUS,
    Follow,
    OpRule,
    is_dequantize,
    is_quantize,
    prices,
    rank,
    rule_for,
    short_target,
)
from layout_solver.xnnpack.problem_builder import (
    conversion_prices,
    op_modes,
    orders_distinct,
    stored_label,
    values_and_domains,
)

DIM_ORDER = {CONTIGUOUS: [0, 1, 2, 3], CHANNELS_LAST: [0, 2, 3, 1]}
# Portable kernels that compute the same on channels-last 4-D tensors, checked by running each in both orders
# against eager (tests/xnnpack/test_program_layout.py). Not here, because they fail or differ: native_layer_norm
# (silently wrong on channels-last input), native_group_norm and _softmax (refuse it at run time).
PORTABLE_CHANNELS_LAST = (
    "erf.default", "log1p.default", "gt.Scalar", "where.self", "upsample_nearest2d.vec", "mean.dim",
    "sum.dim_IntList", "abs.default", "add.Tensor", "mul.Tensor", "sub.Tensor", "div.Tensor", "exp.default",
    "tanh.default", "sigmoid.default",
)  # fmt: skip
# The program changes only where the model predicts it cheaper by more than this (microseconds).
MIN_SAVING_US = 1.0


def _portable_rule(node) -> OpRule:
    return Follow(ranks=(4,)) if short_target(node.target) in PORTABLE_CHANNELS_LAST else OpRule()


def delegated_nodes(exported_program, partitioner) -> dict[str, str]:
    """The partition tag of each node `partitioner` would delegate, asked on a copy (the program is not touched)."""
    from executorch.exir.program._fake_program import get_fake_program

    try:
        probe = get_fake_program(exported_program)
    except Exception:  # noqa: BLE001 - executorch's own fallback in to_backend
        probe = copy.deepcopy(exported_program)
    tagged = partitioner.partition(probe).tagged_exported_program
    return {n.name: n.meta["delegation_tag"] for n in tagged.graph_module.graph.nodes if "delegation_tag" in n.meta}


def build_program_problem(graph_module, exported_program, delegated: set[str], profile, threads: int) -> Problem:
    """One problem over the whole edge program (see the module docstring)."""
    from executorch.backends.xnnpack.utils.utils import is_param_node

    price = prices(profile, threads)
    # The program hands tensors between delegates and CPU kernels at rank 4 only (dim-order copies, NHWC).
    values, nodes = values_and_domains(graph_module, lambda n: is_param_node(exported_program, n), ranks=(4,))
    for value in values.values():
        if CHANNELS_LAST in value.domain and not orders_distinct(value.shape):
            value.domain = [CONTIGUOUS]
    # A delegated op whose kernel wants an order the program never hands over (a 3-D convolution, made 4-D
    # inside its delegate) meets the program in contiguous order.
    ops = op_modes(graph_module, nodes, price, {v.id: v.domain for v in values.values()},
                   lambda n: rule_for(n) if n.name in delegated else _portable_rule(n), fallback=OpRule())  # fmt: skip
    return Problem(name="xnnpack-program", values=list(values.values()), ops=ops,
                   transition_costs=conversion_prices(values, nodes, price), price_constants=True)  # fmt: skip


def has_symbolic_shapes(graph) -> bool:
    """Whether any tensor of the graph has a symbolic (dynamic) dimension."""
    return any(not isinstance(d, int) for n in graph.nodes if tensor_of(n) is not None for d in tensor_of(n).shape)


def pinned_contiguous(problem: Problem, cpu_ops: set[str]) -> Problem:
    """The same problem with every CPU op held to contiguous: the program as stock leaves it."""
    pinned = problem.model_copy(deep=True)
    for op in pinned.ops:
        if op.id in cpu_ops:
            op.modes = [m for m in op.modes if all(label == CONTIGUOUS for label in m.operands + m.results)]
    return pinned


class ProgramLayoutPass(ExportPass):
    """Sets the dim orders at the delegates' boundaries (module docstring); a no-op where nothing is gained."""

    def __init__(self, exported_program, partitioner, solve, profile, threads: int = 1):
        super().__init__()
        self.exported_program, self.partitioner, self.solve_fn = exported_program, partitioner, solve
        self.profile, self.threads = profile, threads
        self.notes: list[str] = []
        self.saving_us = 0.0
        self._plan = None

    def plan(self) -> Solution | None:
        """The answer to write, or None where the program is left as it is (the reason in `notes`). Decided on
        the program before any pass runs over it: a program left alone is not retraced at all."""
        graph_module = self.exported_program.graph_module
        graph = graph_module.graph
        if any(is_quantize(n) or is_dequantize(n) for n in graph.nodes):
            self.notes.append("program boundaries kept: a quantized program")
            return None
        if has_symbolic_shapes(graph):
            self.notes.append("program boundaries kept: dynamic shapes")
            return None
        delegated = delegated_nodes(self.exported_program, self.partitioner)
        cpu_ops = {n.name for n in graph.nodes if n.op == "call_function" and n.name not in delegated}
        movable = [n for n in graph.nodes if n.name in cpu_ops and rank(n) == 4 and _portable_rule(n).kind == "follow"]
        if not movable:  # no CPU op could run channels-last: nothing to decide
            return None
        try:
            problem = build_program_problem(graph_module, self.exported_program, delegated, self.profile, self.threads)
        except ValueError as exc:  # an op the program-level rules cannot place: the boundaries stay stock's
            self.notes.append(f"program boundaries kept: {exc}")
            return None
        solution = self.solve_fn(problem)
        as_is = self.solve_fn(pinned_contiguous(problem, cpu_ops))
        self.saving_us = as_is.objective - solution.objective
        channels_last_cpu = [o for o in cpu_ops if solution.labels.get(o) == CHANNELS_LAST]
        if self.saving_us <= MIN_SAVING_US or not channels_last_cpu:
            self.notes.append(f"program boundaries kept: predicted saving {self.saving_us:.1f} us")
            return None
        self.notes.append(
            f"{len(channels_last_cpu)} CPU ops run channels-last: predicted {self.saving_us:.1f} us saved"
        )
        self._plan = (solution, cpu_ops, delegated)
        return solution

    def call(self, graph_module) -> PassResult:
        """Write the plan (`plan()` first; run only where it returned one)."""
        solution, cpu_ops, delegated = self._plan
        return PassResult(self._write(graph_module, solution, cpu_ops, delegated), True)

    def _write(self, graph_module, solution: Solution, cpu_ops: set[str], partitions: dict[str, str]):
        """Make the program store each boundary value (one a CPU op or another partition reads, or a CPU op
        writes) in the order the answer gives it, by one dim-order copy after its producer (partitioned with
        it); then give each CPU op and program output the order it reads in by a copy of its own. Retrace after
        each round: a new order propagates through the ops downstream, so the rounds go on until nothing moves
        (at most four)."""
        partitions = dict(partitions)
        for _ in range(4):
            moved = self._set_boundaries(graph_module, solution, cpu_ops, partitions)
            graph_module = super().call(graph_module).graph_module if moved else graph_module
            wanted = {n.name: (CONTIGUOUS if n.op == "output" else solution.labels.get(n.name, CONTIGUOUS))
                      for n in graph_module.graph.nodes if n.op == "output" or n.name in cpu_ops}  # fmt: skip
            fixed = self._convert_operands(graph_module, wanted)
            graph_module = super().call(graph_module).graph_module if fixed else graph_module
            if not moved and not fixed:
                break
        return super().call(self._drop_identity_copies(graph_module)).graph_module

    @staticmethod
    def _drop_identity_copies(graph_module):
        """A dim-order copy whose input the propagation left in its order already copies for nothing."""
        for node in list(graph_module.graph.nodes):
            if node.op == "call_function" and node.target == exir_ops.edge.dim_order_ops._to_dim_order_copy.default:
                source = node.args[0]
                if rank(source) == 4 and list(node.kwargs.get("dim_order", [])) == DIM_ORDER[stored_label(source)]:
                    node.replace_all_uses_with(source)
                    graph_module.graph.erase_node(node)
        graph_module.recompile()
        return graph_module

    def _set_boundaries(self, graph_module, solution: Solution, cpu_ops: set[str], partitions: dict[str, str]) -> int:
        graph = graph_module.graph
        moved = 0
        for node in list(graph.nodes):
            label = solution.labels.get(node.name)
            if label is None or rank(node) != 4 or tensor_of(node) is None or stored_label(node) == label:
                continue
            users = list(node.users)
            tag = partitions.get(node.name)
            crossing = node.name in cpu_ops or any(
                u.op == "output" or u.name in cpu_ops or partitions.get(u.name) != tag for u in users
            )
            if not crossing or node.op != "call_function":
                continue
            copy_node = self._copy(graph, node, label)
            for user in users:
                user.replace_input_with(node, copy_node)
            if tag is not None:
                partitions[copy_node.name] = tag
            moved += 1
        graph_module.recompile()
        return moved

    @staticmethod
    def _copy(graph, node, label: str):
        with graph.inserting_after(node):
            made = graph.create_node("call_function", exir_ops.edge.dim_order_ops._to_dim_order_copy.default, (node,),
                                     {"dim_order": DIM_ORDER[label]}, name=f"{node.name}_{label}")  # fmt: skip
        made.meta = {k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")}
        made.meta["val"] = _restrided(tensor_of(node), label)
        return made

    @staticmethod
    def _operands(node) -> list:
        if node.op == "output":
            return [n for n in node.args[0] if isinstance(n, torch.fx.Node)]
        return [n for n in node.all_input_nodes if rank(n) == 4 and tensor_of(n) is not None]

    def _convert_operands(self, graph_module, wanted: dict[str, str]) -> int:
        """Each operand of a node in `wanted` stored in the other order reads a dim-order copy (one per value
        and order); returns how many edges it redirected."""
        copies: dict[tuple[str, str], torch.fx.Node] = {}
        graph = graph_module.graph
        redirected = 0
        for node in list(graph.nodes):
            label = wanted.get(node.name)
            if label is None:
                continue
            for operand in self._operands(node):
                if rank(operand) != 4 or tensor_of(operand) is None or stored_label(operand) == label:
                    continue
                key = (operand.name, label)
                if key not in copies:
                    copies[key] = self._copy(graph, operand, label)
                node.replace_input_with(operand, copies[key])
                redirected += 1
        graph_module.recompile()
        return redirected


def _restrided(val: torch.Tensor, label: str) -> torch.Tensor:
    memory_format = torch.channels_last if label == CHANNELS_LAST else torch.contiguous_format
    mode = getattr(val, "fake_mode", None)
    if mode is None:
        return val.contiguous(memory_format=memory_format)
    with mode:
        return torch.empty(val.shape, dtype=val.dtype).contiguous(memory_format=memory_format)
