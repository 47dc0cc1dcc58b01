"""What the Arm stage pays for a layout, priced for the target the lowering is for.

* `VelaPricing` (every Ethos-U compile spec): each op in each of its modes, and each transpose in each of its
  forms, is compiled by Vela for the lowering's own configuration (accelerator, system config, memory mode,
  flags; `cost_models.vela`), as a probe of the op with the neighbours Vela fuses it with
  (`layout_solver.arm.probes`). The objective is the delegate's predicted NPU cycles, so an order that
  removes a transpose but makes an elementwise op dearer (a broadcast read from Flash along the wrong axis)
  is priced as the program pays it.
* `MovedBytesPricing` (TOSA pipelines with no Vela behind them: TOSA FP / INT specs, VGF): target-neutral. A
  transpose costs the bytes it moves plus a fixed price per TOSA TRANSPOSE equal to moving
  `TRANSPOSE_FIXED_BYTES`, so fewer transposes win first and fewer bytes next (a reshape costs one byte, so
  none is written for no gain); ops cost nothing in any order.

Both answer the same questions: `op_cost(node, reads, order)` (None: the target cannot run it in that mode; an
op the pricing cannot write is priced 0 and listed in `unpriced`),
`transpose(shape, perm, dtype, form)`, `copy(elements, dtype)` and `fusion_loss(producer, consumer, src, dst)`
(what a transpose between two fused ops costs them).
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import torch

from cost_models import ethos_u55, vela
from cost_models.ethos_u55 import TransposeCost
from layout_solver.arm.op_rules import MatMul, rule_for, short_target
from layout_solver.arm.orders import Order
from layout_solver.arm.probes import (
    ProbeContext,
    chain_edge,
    chain_of,
    member,
    op_probe,
    read_transpose_probe,
    through_transpose_probe,
    translatable,
    write_transpose_probes,
)

log = logging.getLogger(__name__)

TRANSPOSE_FIXED_BYTES = 1 << 20  # target-neutral: one TOSA TRANSPOSE costs as much as moving 1 MiB
RESHAPE_BYTES = 1  # and a RESHAPE the least that is not free, so nothing is rewritten for no gain
ELEMENT_BYTES = {**ethos_u55.DTYPE_BYTES, "float32": 4, "float16": 2, "bfloat16": 2, "int64": 8}
FREE_KINDS = ("permute",)  # bookkeeping: a permute's data movement is the transition it leaves
UNPRICED = "unpriced"
Written = tuple  # (value node, the order it is stored in): what a transpose reads, as its producer wrote it


class ArmPricing:
    """The prices a layout problem is built from (see the module docstring)."""

    name = "abstract"
    unit = "cycles"
    two_step = False  # whether writing a transpose as two in a row can be cheaper on this target

    @property
    def description(self) -> str:
        """What priced the problem, as reports show it."""
        return self.name

    @property
    def key(self) -> str:
        """Everything about the pricing that can change a price (part of a stored answer's key)."""
        return f"{type(self).__qualname__} {self.description}"

    def op_cost(self, node: torch.fx.Node, reads: list[Order], order: Order) -> float | None:
        """The op's own price reading `reads` and writing `order`; None if the target cannot run it so."""
        raise NotImplementedError

    def as_given(
        self, shape, perm, dtype: str, read_by: torch.fx.Node | None = None, written_by: Written | None = None
    ) -> TransposeCost:
        """TRANSPOSE(shape, perm) exactly as written; `read_by`: its result is that node's value, read by that
        node's readers (convolutions and pooling only: on Ethos-U85 Vela writes such a feature map in a form of
        its own, which can be far cheaper); `written_by`: (value, order), its input is that value stored in that
        order, and the transpose its only reader (on Ethos-U85 Vela writes the transpose as the output of the op
        computing the value, at anything from nothing to sixteen times its price alone)."""
        raise NotImplementedError

    def copy(self, elements: int, dtype: str) -> float:
        """A memory copy of `elements` elements (a reshape the target cannot bypass)."""
        raise NotImplementedError

    def transpose(
        self,
        shape,
        perm,
        dtype: str,
        form: str = "cheapest",
        read_by: torch.fx.Node | None = None,
        written_by: Written | None = None,
    ) -> TransposeCost:
        """TRANSPOSE(shape, perm) priced in `form` (as_given, cheapest, shared: see ethos_u55.transpose_cost); in
        the cheapest form also as the pair of transposes the write-back would write (`two_steps`) if cheaper.
        `read_by` (see `as_given`) holds for the form as given only: another form's result is reshaped before
        anything reads it; `written_by` for every form that reads the input's shape (a reshape in front keeps
        Vela from writing the transpose as its producer's output; one after it does not)."""
        as_written = (tuple(int(d) for d in shape), tuple(int(p) for p in perm))

        def as_given(s, p, d):
            form = (tuple(int(x) for x in s), tuple(int(x) for x in p))
            # a form that keeps the input's shape (its unit axes moved, a reshape after it) is written in place too
            return self.as_given(s, p, d, read_by if form == as_written else None,
                                 written_by if form[0] == as_written[0] else None)  # fmt: skip

        single = ethos_u55.transpose_cost(shape, perm, dtype, form=form, as_given=as_given, copy=self.copy)
        steps = self.two_steps(shape, perm, dtype) if form == "cheapest" and single.npu_ops else None
        if steps is None or steps[0] >= single.cycles:
            return single
        return TransposeCost(steps[0], 2, single.shape, single.perm, "two steps")

    def two_steps(self, shape, perm, dtype: str) -> tuple[float, list[tuple[tuple, tuple]]] | None:
        """Where the target can run a transpose cheaper as two in a row (`two_step`): the pair the analytic model
        picks (ethos_u55.two_step_transposes), each step priced in its cheapest form by this pricing, as
        (cycles, [(shape, perm) of each step]); None where the model sees no gain or does not cover the dtype."""
        if not self.two_step:
            return None
        try:
            steps = ethos_u55.two_step_transposes(shape, perm, dtype)
            if steps is None or steps[0] >= ethos_u55.transpose_cost(shape, perm, dtype).cycles:
                return None
        except ValueError:  # a dtype or transpose the analytic model does not cover
            return None
        single = lambda s, p: ethos_u55.transpose_cost(s, p, dtype, as_given=self.as_given, copy=self.copy).cycles
        cycles = sum(single(s, p) for s, p in steps[1])
        return cycles, steps[1]

    def fusion_loss(self, producer: torch.fx.Node, consumer: torch.fx.Node, src: Order, dst: Order) -> float:
        """What a transpose between `producer` and its only reader `consumer` costs them beyond itself."""
        return 0.0

    def op_class(self, node: torch.fx.Node) -> str:
        """The class an op's price is reported under: the operator Vela names its rows after where Vela priced
        it ("Conv2D", "Rescale"), else the op's target."""
        return short_target(node).split(".")[0]

    @property
    def unpriced(self) -> list[str]:
        """Ops the pricing could not write (their modes are priced 0)."""
        return []


@dataclass
class VelaPricing(ArmPricing):
    """Prices from Vela for one compile spec's configuration; answers cached per lowering and on disk."""

    config: vela.VelaConfig
    context: ProbeContext = field(default_factory=ProbeContext)
    store: vela.ProbeStore | None = None
    _ops: dict = field(default_factory=dict)
    _transposes: dict = field(default_factory=dict)
    _unpriced: set = field(default_factory=set)
    _classes: dict = field(default_factory=dict)  # node -> Vela's operator name of its rows
    _crossing: dict = field(default_factory=dict)
    _in_place_writes: bool | None = None

    name = "vela"
    two_step = True

    @property
    def description(self) -> str:
        """The pricing and its target, as "vela <accelerator>"."""
        return f"vela {self.config.accelerator}"

    @property
    def key(self) -> str:
        """The Vela configuration's own key (accelerator, system config, memory mode, flags, Vela version)."""
        return f"{type(self).__qualname__} {self.config.key}"

    def _cycles(self, node, reads, order, neighbours: bool = True, barrier=None, stored=None) -> float | str | None:
        """Vela's cycles for the node's own rows; UNPRICED if it cannot be written, None if Vela rejects it.
        `stored`: the barrier's producer's stored order, read through the transpose (`op_probe`)."""
        if barrier is not None and not self._crosses(node, reads, order, barrier):
            barrier = stored = None  # the probe is the same either way: price it once
        key = (node, tuple(map(tuple, reads)), tuple(order), neighbours, barrier, stored)
        if key not in self._ops:
            probe = op_probe(node, [tuple(r) for r in reads], tuple(order), self.context, neighbours, barrier, stored)
            if probe is None:
                self._ops[key] = UNPRICED
            else:
                graph, own, stand_ins = probe
                try:
                    network = vela.compile_probe(graph, self.config, store=self.store)
                except (RuntimeError, ValueError, TypeError) as exc:  # a probe the serializer refuses: not priced
                    log.warning("layout-solver: %s (%s) not priced: %s", node.name, node.target, exc)
                    self._ops[key] = UNPRICED
                else:
                    alone = [self._stand_in(n, stored, read) for n, read in stand_ins]
                    if vela.rejected(network) or None in alone:
                        self._ops[key] = None
                    else:
                        self._ops[key] = float(network.cycles_of(own)) - sum(alone)
                    if neighbours and barrier is None and node not in self._classes:
                        self._classes[node] = network.source_operator(own)
        return self._ops[key]

    def _stand_in(self, node, stored, order) -> float | None:
        """Vela's cycles for `through_transpose_probe`'s operators alone (None where they cannot be written)."""
        key = ("stand-in", node, tuple(stored), tuple(order))
        if key not in self._ops:
            probe = through_transpose_probe(node, stored, order, self.context)
            network = None if probe is None else vela.compile_probe(probe[0], self.config, store=self.store)
            self._ops[key] = None if network is None or vela.rejected(network) else float(network.cycles_of(probe[1]))
        return self._ops[key]

    def _crosses(self, node, reads, order, barrier) -> bool:
        """Whether the probe of `node` reaches across `barrier` (it would differ with the edge cut)."""
        key = (node, tuple(map(tuple, reads)), tuple(order), barrier)
        if key not in self._crossing:
            members = set(chain_of(node, reads, order, memo=self.context.chains))
            reaches = barrier[1] in members and (barrier[0] in members or barrier[0].op == "call_function")
            # a view before the barrier: the transpose, not the probe's stand-in reader, reads it (probes._read_on)
            self._crossing[key] = reaches or (barrier[0] in members and rule_for(barrier[0]).kind == "view")
        return self._crossing[key]

    def op_class(self, node) -> str:
        """Vela's name of the operator the node's rows come from (its target where Vela did not price it)."""
        return self._classes.get(node, "") or super().op_class(node)

    def op_cost(self, node, reads, order):
        """Vela's cycles for the node's own rows in its probe (0 and listed in `unpriced` if it cannot be written)."""
        if rule_for(node).kind in FREE_KINDS:
            return 0.0
        cycles = self._cycles(node, reads, order)
        if cycles == UNPRICED:
            self._unpriced.add(node.name)
            return 0.0
        return cycles

    def as_given(self, shape, perm, dtype, read_by=None, written_by=None):
        """Vela's price of TRANSPOSE(shape, perm) as written, read by `read_by`'s readers where given (a probe
        of the transpose and those readers; its own rows), written as the output of `written_by`'s producer
        where given and this configuration does so (what appending it to the producer's probe adds, never less
        than nothing: a transpose is not bought for what it might save its producer): cached per lowering."""
        key = (tuple(int(d) for d in shape), tuple(int(p) for p in perm), dtype, read_by)
        if written_by is not None and read_by is None and self.writes_in_place:
            return self._in_place(key[:3], (written_by[0], tuple(written_by[1])))
        if key in self._transposes:
            return self._transposes[key]
        probe = None if read_by is None else read_transpose_probe(*key[:3], read_by, self.context)
        network = None if probe is None else vela.compile_probe(probe[0], self.config, store=self.store)
        if network is None or vela.rejected(network):
            found = self.as_given(*key[:3]) if read_by is not None else vela.transpose_as_given(*key[:3], self.config)
        else:
            rows = [layer.cycles for layer in network.layers if layer.source == probe[1]]
            found = TransposeCost(float(sum(rows)), len(rows), key[0], key[1], "vela")
        self._transposes[key] = found
        return found

    @property
    def writes_in_place(self) -> bool:
        """Whether Vela writes a transpose as its producer's output on this configuration (asked of Vela once)."""
        if self._in_place_writes is None:
            self._in_place_writes = vela.writes_transposes_in_place(self.config, store=self.store)
        return self._in_place_writes

    def _in_place(self, transpose: tuple, written_by: Written) -> TransposeCost:
        key = (*transpose, written_by)
        if key not in self._transposes:
            probes = write_transpose_probes(*written_by, transpose[1], self.context) or []
            networks = [vela.compile_probe(g, self.config, store=self.store) for g in probes]
            if not networks or any(vela.rejected(n) for n in networks):
                self._transposes[key] = self.as_given(*transpose)
            else:
                added = max(0.0, float(networks[1].cycles - networks[0].cycles))
                self._transposes[key] = TransposeCost(added, 1, transpose[0], transpose[1], "vela in place")
        return self._transposes[key]

    def copy(self, elements, dtype):
        """Vela's MemoryCopy of `elements` elements."""
        return vela.copy_cycles(elements, dtype, self.config)

    def fusion_loss(self, producer, consumer, src, dst):
        """What a transpose on the value between a chain pair (the producer's only reader is the consumer) costs
        the ops around it: each op whose probe fused across that edge runs as its probe does with the edge cut
        (an ADD's input RESCALE stops fusing when the ADD's output goes to a transpose). A permute on either side
        is an alias: the edge is between the ops around it (a SLICE whose probe reads it straight into the
        MATMUL behind a permute is a MemoryCopy once a transpose sits there). A view loses nothing: Vela bypasses
        a RESHAPE next to a TRANSPOSE, where the view's cut probe leaves its result for Vela to copy out
        (executorch's pixel_shuffle case: a view of the delegate input, 96 cycles in all, priced 264)."""
        producer, consumer, src, dst = chain_edge(producer, consumer, src, dst)
        barrier, loss = (producer, consumer), 0.0
        for side, order, produced in ((producer, src, True), (consumer, dst, False)):
            found = member(side, order, produced) if translatable(side) else None
            if found is None:
                continue
            for node, (r, o) in chain_of(side, *found, barrier, self.context.chains).items():
                if rule_for(node).kind == "view":
                    continue
                # Where Vela writes transposes into their producers, a MATMUL composes the transpose it adds for
                # its second operand with the one the program has there: one copy, not two, which can cost from
                # what the one alone does to many times it (LeViT's v, [1, 16, 4, 64]: 12,800 cycles, ~800 alone)
                through = src if not produced and self.writes_in_place and isinstance(rule_for(node), MatMul) else None
                cut = self._cycles(node, r, o, barrier=barrier, stored=through)
                fused = self._cycles(node, r, o)
                if isinstance(cut, float) and isinstance(fused, float):
                    loss += max(0.0, cut - fused)
        return loss

    @property
    def unpriced(self):
        """Names of the ops no probe could be written for (priced 0)."""
        return sorted(self._unpriced)


@dataclass
class MovedBytesPricing(ArmPricing):
    """Target-neutral prices for TOSA pipelines no compiler stands behind (see the module docstring)."""

    name = "moved-bytes"
    unit = "bytes"

    def op_cost(self, node, reads, order):
        """Nothing: no target to tell orders apart."""
        return 0.0

    def as_given(self, shape, perm, dtype, read_by=None, written_by=None):
        """TRANSPOSE_FIXED_BYTES plus the bytes moved (a reshape: RESHAPE_BYTES)."""
        shape, perm = tuple(int(d) for d in shape), tuple(int(p) for p in perm)
        if ethos_u55.is_identity(perm):  # a RESHAPE: no data moves, but it is an op of its own
            return TransposeCost(float(RESHAPE_BYTES), 0, shape, perm, "reshape")
        size = math.prod(shape) * ELEMENT_BYTES.get(dtype, 4)
        return TransposeCost(float(TRANSPOSE_FIXED_BYTES + size), 1, shape, perm, "bytes")

    def copy(self, elements, dtype):
        """Nothing: a reshape is metadata when nothing compiles it."""
        return 0.0  # a reshape is metadata when nothing compiles it


def constant_values(program) -> callable:
    """A function from a constant placeholder to its tensor in `program` (None where it has none). The
    signature's name tables are read once: executorch's get_param_tensor rebuilds them on every call."""
    if program is None:
        return lambda node: None
    signature = program.graph_signature
    tensors = {
        **{name: program.state_dict.get(key) for name, key in signature.inputs_to_parameters.items()},
        **{name: program.state_dict.get(key, program.constants.get(key))
           for name, key in signature.inputs_to_buffers.items()},
        **{name: program.constants.get(key) for name, key in signature.inputs_to_lifted_tensor_constants.items()},
    }  # fmt: skip

    def value(node: torch.fx.Node):
        if node.op == "placeholder":
            return tensors.get(node.name)
        if node.op == "get_attr":
            return getattr(node.graph.owning_module, str(node.target), None)
        return None

    return value


def pricing_for(ethos_u_spec, program=None, constants: set[str] | None = None) -> ArmPricing:
    """The pricing of a lowering: Vela for its Ethos-U compile spec's configuration, else moved bytes."""
    if ethos_u_spec is None:
        return MovedBytesPricing()
    config = vela.vela_config(tuple(ethos_u_spec.compiler_flags))
    return VelaPricing(config, ProbeContext(set(constants or ()), constant_values(program)))


def default_vela_pricing() -> VelaPricing:
    """Vela pricing for executorch's default ethos-u55-128 configuration (no program: constants unknown)."""
    return VelaPricing(vela.vela_config())
