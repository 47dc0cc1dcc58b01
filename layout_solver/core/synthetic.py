"""Synthetic problems: random small ones for cross-checks, and graph-shaped ones
(CNN-like, transformer-like) for the benchmark and the demo.

The graph-shaped generators mimic what the backend rules produce: layout-bound
ops (conv, pooling, linear) have one mode, elementwise ops take any common
label, reductions any label at a per-label price, and reshapes are free only
in some labels.
"""

from __future__ import annotations

import random

from layout_solver.core.problem import Mode, Op, Problem, TransitionCost, Value

LABEL_POOL = ["A", "B", "C", "D", "E", "F"]


def random_problem(
    seed: int, n_ops: int = 5, n_labels: int = 3, max_modes: int = 3, p_fixed: float = 0.2, binary: bool = False
) -> Problem:
    """A random DAG problem; with binary=True every op has at most two modes and every domain two labels."""
    rng = random.Random(seed)
    pool = LABEL_POOL[: (2 if binary else n_labels)]
    values: list[Value] = []
    ops: list[Op] = []

    def new_value(kind: str) -> Value:
        domain = list(pool) if binary else rng.sample(pool, rng.randint(1, len(pool)))
        fixed = rng.choice(domain) if rng.random() < p_fixed else None
        value = Value(
            id=f"v{len(values)}",
            shape=[rng.randint(1, 8)],
            size_bytes=rng.randint(1, 20),
            kind=kind,
            domain=domain,
            fixed=fixed,
        )
        values.append(value)
        return value

    for _ in range(rng.randint(1, 3)):
        new_value("constant" if rng.random() < 0.25 else "input")
    for k in range(n_ops):
        operands = [rng.choice(values) for _ in range(rng.randint(1, 3))]
        results = [new_value("activation") for _ in range(2 if rng.random() < 0.15 else 1)]
        modes = []
        for m in range(rng.randint(1, 2 if binary else max_modes)):
            modes.append(
                Mode(
                    name=f"m{m}",
                    operands=[rng.choice(v.domain) for v in operands],
                    results=[rng.choice(v.domain) for v in results],
                    cost=rng.choice([0, 0, 1, 3]),
                )
            )
        ops.append(Op(id=f"op{k}", operands=[v.id for v in operands], results=[v.id for v in results], modes=modes))
    costs = []
    for v in values:
        for a in v.domain:
            for b in v.domain:
                if a != b and rng.random() < 0.5:
                    costs.append(TransitionCost(value=v.id, src=a, dst=b, cost=rng.randint(0, 30)))
    return Problem(
        name=f"random-{seed}", values=values, ops=ops, transition_costs=costs, price_constants=rng.random() < 0.3
    )


class _Builder:
    def __init__(self, labels: list[str], identity: str, bytes_per_elem: int = 1):
        self.labels = labels
        self.identity = identity
        self.values: list[Value] = []
        self.ops: list[Op] = []
        self.bytes_per_elem = bytes_per_elem

    def value(self, shape, kind="activation", fixed=None, domain=None) -> str:
        size = self.bytes_per_elem
        for d in shape:
            size *= d
        vid = f"t{len(self.values)}"
        self.values.append(
            Value(
                id=vid,
                shape=list(shape),
                dtype="int8",
                size_bytes=size,
                kind=kind,
                domain=list(domain or self.labels),
                fixed=fixed,
            )
        )
        return vid

    def op(self, target: str, operands: list[str], results: list[str], modes: list[tuple]) -> None:
        self.ops.append(
            Op(
                id=f"{target}_{len(self.ops)}",
                target=target,
                operands=operands,
                results=results,
                modes=[
                    Mode(name=f"m{i}", operands=list(o), results=list(r), cost=c) for i, (o, r, c) in enumerate(modes)
                ],
            )
        )

    def any_common(self, target: str, operands: list[str], shape, cost=None) -> str:
        out = self.value(shape)
        modes = [([lab] * len(operands), [lab], (cost or {}).get(lab, 0)) for lab in self.labels]
        self.op(target, operands, [out], modes)
        return out

    def fixed(self, target: str, operands: list[str], shape, label: str, operand_labels=None) -> str:
        out = self.value(shape)
        self.op(target, operands, [out], [(operand_labels or [label] * len(operands), [label], 0)])
        return out

    def problem(self, name: str) -> Problem:
        return Problem(name=name, values=self.values, ops=self.ops, default_cost_per_byte=0.37)


RANK4_ORDERS = ["NCHW", "NHWC", "NWHC", "NCWH", "NHCW", "NWCH"]


def cnn_like(n_blocks: int, n_labels: int = 2, channels: int = 32, hw: int = 16) -> Problem:
    """Residual conv blocks over rank-4 dim orders: conv and pooling want NHWC.

    Reductions price each order differently (Vela's reduce along C is the cheap one)."""
    orders = RANK4_ORDERS[:n_labels]
    b = _Builder(orders, "NCHW")
    shape = (1, channels, hw, hw)
    x = b.value(shape, kind="input", fixed="NCHW")
    w = b.value((channels, channels, 3, 3), kind="constant")
    x = b.fixed("conv2d", [x, w], shape, "NHWC")
    for i in range(n_blocks):
        y = b.fixed("conv2d", [x, w], shape, "NHWC")
        y = b.any_common("clamp", [y], shape)
        y = b.fixed("conv2d", [y, w], shape, "NHWC")
        y = b.any_common("rescale", [y], shape)
        x = b.any_common("add", [x, y], shape)
        x = b.any_common("clamp", [x], shape)
        if i % 4 == 3:
            # A channel reduction (squeeze-excite style): cheaper along the last axis.
            s = b.any_common(
                "reduce_sum", [x], (1, channels, 1, 1), cost={o: 300 if o.endswith("C") else 900 for o in orders}
            )
            s = b.any_common("sigmoid", [s], (1, channels, 1, 1))
            x = b.any_common("mul", [x, s], shape)
    pooled = b.fixed("avg_pool2d", [x], (1, channels, 1, 1), "NHWC")
    flat = b.value((1, channels), domain=["NCHW"])
    b.op("view", [pooled], [flat], [(["NCHW"], ["NCHW"], 0)])
    out = b.fixed("linear", [flat, b.value((10, channels), kind="constant", domain=["NCHW"])], (1, 10), "NCHW")
    b.op("output", [out], [], [(["NCHW"], [], 0)])
    return b.problem(f"cnn-{n_blocks}x{n_labels}")


def transformer_like(n_blocks: int, n_labels: int = 4, tokens: int = 64, dim: int = 128) -> Problem:
    """Pre-norm transformer blocks; labels are storage x packing choices.

    Linear layers run in label 0 (width-packed texture) or, dearer, label 2
    (buffer); attention scores want label 1; norms and softmax may run in any
    label that does not pack the reduced dim.
    """
    labels = LABEL_POOL[:n_labels]
    b = _Builder(labels, labels[0], bytes_per_elem=4)
    seq = (1, tokens, dim)
    x = b.value(seq, kind="input", fixed=labels[0])
    w = b.value((dim, dim), kind="constant")
    norm_ok = labels[1:]  # label 0 packs the reduced (last) dim
    linear_labels = [labels[0]] + labels[2:3]

    def linear(src: str, shape) -> str:
        out = b.value(shape)
        b.op("linear", [src, w], [out], [([lab, lab], [lab], 25 * i) for i, lab in enumerate(linear_labels)])
        return out

    for _ in range(n_blocks):
        h = b.value(seq)
        b.op("layer_norm", [x], [h], [([lab], [lab], 40 + 10 * i) for i, lab in enumerate(norm_ok)])
        q = linear(h, seq)
        k = linear(h, seq)
        v = linear(h, seq)
        s = b.fixed("matmul", [q, k], (1, tokens, tokens), labels[1], operand_labels=[labels[0], labels[1]])
        s = b.any_common("mul", [s], (1, tokens, tokens))
        p = b.value((1, tokens, tokens))
        b.op("softmax", [s], [p], [([lab], [lab], 0) for lab in norm_ok])
        a = b.fixed("matmul", [p, v], seq, labels[0])
        a = linear(a, seq)
        x = b.any_common("add", [x, a], seq)
        h = b.value(seq)
        b.op("layer_norm", [x], [h], [([lab], [lab], 40 + 10 * i) for i, lab in enumerate(norm_ok)])
        h = linear(h, (1, tokens, 4 * dim))
        h = b.any_common("gelu", [h], (1, tokens, 4 * dim))
        h = linear(h, seq)
        x = b.any_common("add", [x, h], seq)
    b.op("output", [x], [], [([labels[0]], [], 0)])
    return b.problem(f"transformer-{n_blocks}x{n_labels}")


def window_problem(n_ops: int, window: int = 40, n_labels: int = 4, seed: int = 0, unit: bool = False) -> Problem:
    """An irregular graph: each op reads one or two values among the last `window` produced.

    Ops take 1-3 modes (a label each, priced 0-50); tensor sizes vary, so
    transitions cost differently everywhere. No repeated blocks for the memo to
    reuse and wide pieces for exact elimination: the hard case for the solver
    (`window` = n_ops gives a uniform random DAG). `unit`: every transition costs 1 and every
    mode 0, the setting of a two-label min-cut formulation.
    """
    rng = random.Random(seed)
    labels = LABEL_POOL[:n_labels]
    b = _Builder(labels, labels[0])
    produced = [b.value((1, rng.choice([8, 16, 32]), 8, 8), kind="input", fixed=labels[0])]
    for _ in range(n_ops):
        first = max(0, len(produced) - window)
        picks = rng.sample(range(first, len(produced)), min(len(produced) - first, rng.choice([1, 2])))
        operands = [produced[i] for i in picks]
        out = b.value((1, rng.choice([8, 16, 32, 64]), rng.choice([4, 8, 16]), 8))
        chosen = rng.sample(labels, rng.randint(1, min(3, n_labels)))
        b.op(
            "op", operands, [out], [([lab] * len(operands), [lab], 0 if unit else rng.randint(0, 50)) for lab in chosen]
        )
        produced.append(out)
    problem = b.problem(f"window{window}-{n_ops}x{n_labels}-s{seed}{'-unit' if unit else ''}")
    if unit:
        for value in problem.values:
            value.size_bytes = 1
        problem.default_cost_per_byte = 1.0
    return problem
