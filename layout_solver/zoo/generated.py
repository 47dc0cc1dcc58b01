"""Seeded random graphs the Arm backend lowers, for differential testing of the layout stage (stock against solver).

A graph is a `GraphSpec`: its inputs' shapes and a list of `Node`s, each an op on earlier values (graph inputs
first, then node results, numbered in that order), with the op's parameters and its result's shape worked out
when the node is drawn. Values that nothing reads are the graph's outputs. `source(spec)` writes the graph as a
small self-contained Python module (a `Generated` nn.Module and `example_inputs()`); `build_module(spec)` runs that very
source, so a failing case printed for a regression test is exactly the program that failed.

What the generator draws is what moves layouts around in TOSA: convolutions (plain, depthwise, grouped, dilated,
strided, transposed, 1-D), pooling, elementwise ops with broadcasting, views that merge or split axes or add and
drop unit axes, permutes, cat / slice / pad / reductions along any axis, matmul and linear, layer / group / batch
norm, softmax, and the table ops (GELU, sigmoid, tanh); ranks 2 to 5, values read by several consumers.
`shrink` makes a failing spec small while a predicate still holds.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

from layout_solver._moved import moved_attributes

MAX_ELEMENTS = 4096  # per value: Vela compiles stay fast and every shape fits the NPU's SRAM
MAX_DIM = 64
UNARY = ("relu", "sigmoid", "tanh", "gelu", "hardswish", "clamp")
BINARY = ("add", "sub", "mul")
BINARY_SIGNS = {"add": "+", "sub": "-", "mul": "*"}
REDUCTIONS = ("sum", "mean", "amax")

# Every op kind with its weight in the draw; `_draw_node` refuses (returns None) what the current value's shape
# cannot take, and another kind is drawn.
OP_WEIGHTS = {
    "conv2d": 8,
    "conv_transpose2d": 1,
    "conv1d": 1,
    "pool": 3,
    "unary": 3,
    "binary": 4,
    "merge_axes": 2,
    "split_axis": 2,
    "unsqueeze": 1,
    "squeeze": 1,
    "permute": 4,
    "cat": 2,
    "slice": 2,
    "pad": 1,
    "reduce": 2,
    "matmul": 2,
    "linear": 3,
    "layer_norm": 2,
    "group_norm": 1,
    "batch_norm": 1,
    "softmax": 2,
}


@dataclass(frozen=True)
class Node:
    """One op of a generated graph: its kind, the values it reads, its parameters and its result's shape."""

    op: str
    inputs: tuple[int, ...]  # value numbers this node reads
    params: tuple  # op-specific, see _expression / _module
    shape: tuple[int, ...]  # the result's shape


@dataclass(frozen=True)
class GraphSpec:
    """A generated graph: the seed that drew it (and its weights), its inputs' shapes, its nodes in order."""

    seed: int
    inputs: tuple[tuple[int, ...], ...]
    nodes: tuple[Node, ...] = field(default_factory=tuple)

    def shapes(self) -> list[tuple[int, ...]]:
        """Every value's shape, by value number (inputs, then node results)."""
        return list(self.inputs) + [n.shape for n in self.nodes]

    def outputs(self) -> list[int]:
        """The node results nothing reads (the graph's outputs), in value order."""
        read = {i for n in self.nodes for i in n.inputs}
        first = len(self.inputs)
        return [first + k for k in range(len(self.nodes)) if first + k not in read]

    def ops(self) -> list[str]:
        """The nodes' ops by name (unary, binary, reduction and pooling nodes by the function they call)."""
        return [n.op if n.op not in ("unary", "binary", "reduce", "pool") else n.params[0] for n in self.nodes]


def _numel(shape) -> int:
    return math.prod(shape)


def _fits(shape) -> bool:
    return all(1 <= d <= MAX_DIM for d in shape) and _numel(shape) <= MAX_ELEMENTS and 2 <= len(shape) <= 5


def _conv_out(size: int, kernel: int, stride: int, padding: int, dilation: int) -> int:
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _draw_input(rng: random.Random) -> tuple[int, ...]:
    kind = rng.choices(("image", "sequence", "matrix", "volume"), weights=(6, 3, 1, 1))[0]
    if kind == "image":
        return (1, rng.choice((3, 4, 8, 16)), rng.choice((4, 6, 8, 12)), rng.choice((4, 5, 8, 12)))
    if kind == "sequence":
        return (1, rng.choice((6, 8, 12, 16)), rng.choice((8, 16, 24, 32)))
    if kind == "matrix":
        return (rng.choice((4, 8, 12)), rng.choice((8, 16, 32)))
    return (1, rng.choice((2, 4)), rng.choice((2, 3, 4)), rng.choice((4, 6)), rng.choice((4, 8)))


def _draw_node(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int) -> Node | None:
    """A node of kind `op` reading value `x` (and possibly others), or None if x's shape cannot take it."""
    draw = _DRAWS.get(op)
    if draw is None:
        raise ValueError(f"unknown op kind {op!r}")
    return draw(rng, op, shapes, x, shapes[x], len(shapes[x]))


def _draw_conv2d(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    if r != 4:
        return None
    c = s[1]
    kernel = rng.choice((1, 3, 3))
    dilation = rng.choice((1, 1, 2)) if kernel == 3 else 1
    stride = rng.choice((1, 1, 2))
    style = rng.choice(("plain", "plain", "depthwise", "grouped"))
    if style == "depthwise":
        groups, out = c, c * rng.choice((1, 1, 2))
    elif style == "grouped":
        common = [g for g in _divisors(c) if 1 < g < c]
        if not common:
            return None
        groups = rng.choice(common)
        out = groups * rng.choice((1, 2))
    else:
        groups, out = 1, rng.choice((4, 8, 16))
    padding = dilation * (kernel // 2)
    h, w = (_conv_out(d, kernel, stride, padding, dilation) for d in s[2:])
    shape = (s[0], out, h, w)
    return Node(op, (x,), (c, out, kernel, stride, padding, dilation, groups), shape) if _fits(shape) else None


def _draw_conv_transpose2d(
    rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int
) -> Node | None:
    if r != 4:
        return None
    out = rng.choice((4, 8))
    shape = (s[0], out, s[2] * 2, s[3] * 2)
    return Node(op, (x,), (s[1], out), shape) if _fits(shape) else None


def _draw_conv1d(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    if r != 3:
        return None
    kernel, out = rng.choice((1, 3)), rng.choice((4, 8, 16))
    shape = (s[0], out, s[2])
    return Node(op, (x,), (s[1], out, kernel), shape) if _fits(shape) else None


def _draw_pool(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    if r != 4:
        return None
    kind = rng.choice(("max_pool2d", "avg_pool2d", "adaptive_avg_pool2d"))
    if kind == "adaptive_avg_pool2d":
        return Node(op, (x,), (kind,), (s[0], s[1], 1, 1))
    if min(s[2:]) < 2:
        return None
    return Node(op, (x,), (kind,), (s[0], s[1], s[2] // 2, s[3] // 2))


def _draw_unary(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    return Node(op, (x,), (rng.choice(UNARY),), s)


def _draw_binary(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    # Another value whose shape broadcasts to x's (same shape, or 1 where x is not), else a constant that does.
    partners = [
        i
        for i, t in enumerate(shapes)
        if i != x and len(t) <= r and all(a in (b, 1) for a, b in zip(t[::-1], s[::-1], strict=False))
    ]
    kind = rng.choice(BINARY)
    if partners and rng.random() < 0.7:
        return Node(op, (x, rng.choice(partners)), (kind, None), s)
    const = tuple(d if rng.random() < 0.5 else 1 for d in s)
    return Node(op, (x,), (kind, const), s)


def _draw_merge_axes(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    if r < 3:
        return None
    axis = rng.randrange(r - 1)
    return Node(op, (x,), (axis,), s[:axis] + (s[axis] * s[axis + 1],) + s[axis + 2 :])


def _draw_split_axis(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    if r > 4:
        return None
    axis = rng.randrange(r)
    factors = [d for d in _divisors(s[axis]) if 1 < d < s[axis]]
    if not factors:
        return None
    f = rng.choice(factors)
    return Node(op, (x,), (axis,), s[:axis] + (f, s[axis] // f) + s[axis + 1 :])


def _draw_unsqueeze(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    if r > 4:
        return None
    axis = rng.randrange(r + 1)
    return Node(op, (x,), (axis,), s[:axis] + (1,) + s[axis:])


def _draw_squeeze(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    units = [a for a, d in enumerate(s) if d == 1]
    if r < 3 or not units:
        return None
    axis = rng.choice(units)
    return Node(op, (x,), (axis,), s[:axis] + s[axis + 1 :])


def _draw_permute(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    perm = list(range(r))
    while perm == list(range(r)):
        rng.shuffle(perm)
    return Node(op, (x,), tuple(perm), tuple(s[p] for p in perm))


def _draw_cat(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    axis = rng.randrange(r)
    partners = [i for i, t in enumerate(shapes) if len(t) == r and all(t[a] == s[a] for a in range(r) if a != axis)]
    y = rng.choice(partners)  # x itself is always one
    shape = s[:axis] + (s[axis] + shapes[y][axis],) + s[axis + 1 :]
    return Node(op, (x, y), (axis,), shape) if _fits(shape) else None


def _draw_slice(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    axes = [a for a in range(r) if s[a] >= 2]
    if not axes:
        return None
    axis = rng.choice(axes)
    step = rng.choice((1, 1, 2))
    start = rng.randrange(s[axis] // 2)
    length = len(range(start, s[axis], step))
    end = min(start + rng.randint(1, length) * step, s[axis])
    size = len(range(start, end, step))
    return Node(op, (x,), (axis, start, end, step), s[:axis] + (size,) + s[axis + 1 :])


def _draw_pad(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    if r < 3:
        return None
    pads = tuple(rng.choice((0, 1, 2)) for _ in range(4 if r >= 4 else 2))
    if not any(pads):
        return None
    shape = list(s)
    for k in range(len(pads) // 2):
        shape[r - 1 - k] += pads[2 * k] + pads[2 * k + 1]
    return Node(op, (x,), pads, tuple(shape)) if _fits(tuple(shape)) else None


def _draw_reduce(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    axis = rng.randrange(r)
    keepdim = r <= 2 or rng.random() < 0.6
    shape = s[:axis] + ((1,) if keepdim else ()) + s[axis + 1 :]
    return Node(op, (x,), (rng.choice(REDUCTIONS), axis, keepdim), shape)


def _draw_matmul(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    m, k = s[-2], s[-1]
    partners = [i for i, t in enumerate(shapes) if len(t) == r and t[:-2] == s[:-2] and t[-2] == k and i != x]
    if partners and rng.random() < 0.6:
        y = rng.choice(partners)
        return Node(op, (x, y), (False,), s[:-1] + (shapes[y][-1],))
    shape = s[:-1] + (m,)  # x @ x^T: attention scores
    return Node(op, (x,), (True,), shape) if _fits(shape) else None


def _draw_linear(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    out = rng.choice((8, 16, 24))
    shape = s[:-1] + (out,)
    return Node(op, (x,), (s[-1], out), shape) if _fits(shape) else None


def _draw_layer_norm(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    return Node(op, (x,), (s[-1],), s)


def _draw_group_norm(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    if r not in (3, 4):
        return None
    groups = [g for g in _divisors(s[1]) if g < s[1]] or [1]
    return Node(op, (x,), (rng.choice(groups), s[1]), s)


def _draw_batch_norm(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    return Node(op, (x,), (s[1],), s) if r == 4 else None


def _draw_softmax(rng: random.Random, op: str, shapes: list[tuple[int, ...]], x: int, s, r: int) -> Node | None:
    return Node(op, (x,), (rng.randrange(r),), s)


# One drawing function per op kind: each reads x's shape `s` (rank `r`) and draws the rest from `rng`.
_DRAWS = {
    "conv2d": _draw_conv2d,
    "conv_transpose2d": _draw_conv_transpose2d,
    "conv1d": _draw_conv1d,
    "pool": _draw_pool,
    "unary": _draw_unary,
    "binary": _draw_binary,
    "merge_axes": _draw_merge_axes,
    "split_axis": _draw_split_axis,
    "unsqueeze": _draw_unsqueeze,
    "squeeze": _draw_squeeze,
    "permute": _draw_permute,
    "cat": _draw_cat,
    "slice": _draw_slice,
    "pad": _draw_pad,
    "reduce": _draw_reduce,
    "matmul": _draw_matmul,
    "linear": _draw_linear,
    "layer_norm": _draw_layer_norm,
    "group_norm": _draw_group_norm,
    "batch_norm": _draw_batch_norm,
    "softmax": _draw_softmax,
}


def random_graph(seed: int, min_nodes: int = 3, max_nodes: int = 10) -> GraphSpec:
    """A graph of `min_nodes`..`max_nodes` nodes drawn from `seed` alone (same seed, same graph)."""
    rng = random.Random(seed)
    inputs = [_draw_input(rng)]
    if rng.random() < 0.2:
        inputs.append(inputs[0] if rng.random() < 0.5 else _draw_input(rng))
    shapes = list(inputs)
    nodes: list[Node] = []
    kinds, weights = list(OP_WEIGHTS), list(OP_WEIGHTS.values())
    target = rng.randint(min_nodes, max_nodes)
    attempts = 0
    while len(nodes) < target and attempts < 50 * max_nodes:
        attempts += 1
        # Mostly the latest value (a chain), sometimes an earlier one: values read by several consumers.
        x = len(shapes) - 1 if rng.random() < 0.7 else rng.randrange(len(shapes))
        node = _draw_node(rng, rng.choices(kinds, weights=weights)[0], shapes, x)
        if node is not None:
            nodes.append(node)
            shapes.append(node.shape)
    spec = GraphSpec(seed, tuple(inputs), tuple(nodes))
    return _drop_unread_inputs(spec)


# ---------------------------------------------------------------------------------------------------------------
# Source: the spec as a self-contained module


def _module(node: Node) -> str | None:
    """The nn.Module constructor a node's op holds (its weights), or None."""
    p = node.params
    if node.op == "conv2d":
        c, out, kernel, stride, padding, dilation, groups = p
        return (
            f"nn.Conv2d({c}, {out}, {kernel}, stride={stride}, padding={padding}, dilation={dilation}, groups={groups})"
        )
    if node.op == "conv_transpose2d":
        return f"nn.ConvTranspose2d({p[0]}, {p[1]}, 2, stride=2)"
    if node.op == "conv1d":
        return f"nn.Conv1d({p[0]}, {p[1]}, {p[2]}, padding={p[2] // 2})"
    if node.op == "linear":
        return f"nn.Linear({p[0]}, {p[1]})"
    if node.op == "layer_norm":
        return f"nn.LayerNorm({p[0]})"
    if node.op == "group_norm":
        return f"nn.GroupNorm({p[0]}, {p[1]})"
    if node.op == "batch_norm":
        return f"nn.BatchNorm2d({p[0]})"
    return None


def _expression(node: Node, names: list[str], attr: str) -> str:
    p, x = node.params, names[node.inputs[0]]
    if node.op in ("conv2d", "conv_transpose2d", "conv1d", "linear", "layer_norm", "group_norm", "batch_norm"):
        return f"self.{attr}({x})"
    if node.op == "pool":
        return {
            "max_pool2d": f"F.max_pool2d({x}, 2)",
            "avg_pool2d": f"F.avg_pool2d({x}, 2)",
            "adaptive_avg_pool2d": f"F.adaptive_avg_pool2d({x}, 1)",
        }[p[0]]
    if node.op == "unary":
        return {
            "relu": f"torch.relu({x})",
            "sigmoid": f"torch.sigmoid({x})",
            "tanh": f"torch.tanh({x})",
            "gelu": f"F.gelu({x})",
            "hardswish": f"F.hardswish({x})",
            "clamp": f"torch.clamp({x}, -1.0, 1.0)",
        }[p[0]]
    if node.op == "binary":
        y = names[node.inputs[1]] if p[1] is None else f"self.{attr}"
        return f"{x} {BINARY_SIGNS[p[0]]} {y}"
    if node.op in ("unsqueeze", "squeeze"):
        return f"{x}.{node.op}({p[0]})"
    if node.op in ("merge_axes", "split_axis"):
        return f"{x}.reshape{node.shape}"
    if node.op == "permute":
        return f"{x}.permute{p}"
    if node.op == "cat":
        return f"torch.cat([{x}, {names[node.inputs[1]]}], dim={p[0]})"
    if node.op == "slice":
        axis, start, end, step = p
        index = ", ".join([":"] * axis + [f"{start}:{end}:{step}" if step != 1 else f"{start}:{end}"])
        return f"{x}[{index}]"
    if node.op == "pad":
        return f"F.pad({x}, {p})"
    if node.op == "reduce":
        kind, axis, keepdim = p
        if kind == "amax":
            return f"torch.amax({x}, dim={axis}, keepdim={keepdim})"
        return f"torch.{kind}({x}, dim={axis}, keepdim={keepdim})"
    if node.op == "matmul":
        return f"torch.matmul({x}, {x}.transpose(-1, -2))" if p[0] else f"torch.matmul({x}, {names[node.inputs[1]]})"
    if node.op == "softmax":
        return f"torch.softmax({x}, dim={p[0]})"
    raise ValueError(f"unknown op kind {node.op!r}")


def source(spec: GraphSpec) -> str:
    """The spec as a Python module: class `Generated` (weights drawn from torch.manual_seed(seed)) and
    `example_inputs()`; paste it into a regression test as it is."""
    first = len(spec.inputs)
    names = [f"x{i}" for i in range(first)] + [f"v{first + k}" for k in range(len(spec.nodes))]
    init, body = [], []
    for k, node in enumerate(spec.nodes):
        attr = f"m{first + k}"
        ctor = _module(node)
        if ctor is not None:
            init.append(f"        self.{attr} = {ctor}")
        elif node.op == "binary" and node.params[1] is not None:
            init.append(f"        self.{attr} = nn.Parameter(torch.randn{node.params[1]})")
        body.append(f"        {names[first + k]} = {_expression(node, names, attr)}")
    outputs = spec.outputs()
    returned = ", ".join(names[i] for i in outputs) + ("," if len(outputs) == 1 else "")
    norms = [
        f"        self.m{first + k}.running_mean.uniform_(-0.5, 0.5)\n"
        f"        self.m{first + k}.running_var.uniform_(0.5, 2.0)"
        for k, n in enumerate(spec.nodes)
        if n.op == "batch_norm"
    ]
    inputs = ", ".join(f"torch.randn{s}" for s in spec.inputs) + ("," if len(spec.inputs) == 1 else "")
    lines = [
        f'"""Generated Arm test graph (layout_solver.zoo.generated, seed {spec.seed}, {len(spec.nodes)} nodes)."""',
        "",
        "import torch",
        "from torch import nn",
        "from torch.nn import functional as F",
        "",
        "",
        "class Generated(nn.Module):",
        "    def __init__(self):",
        "        super().__init__()",
        f"        torch.manual_seed({spec.seed})",
        *init,
    ]
    if norms:
        lines += ["        with torch.no_grad():", *["    " + line for n in norms for line in n.split("\n")]]
    lines += [
        "",
        f"    def forward(self, {', '.join(names[:first])}):",
        *body,
        f"        return ({returned})",
        "",
        "",
        "def example_inputs():",
        f"    torch.manual_seed({spec.seed} + 1)",
        f"    return ({inputs})",
        "",
    ]
    return "\n".join(lines)


def build_module(spec: GraphSpec):
    """(module in eval mode, example inputs), by running `source(spec)`."""
    namespace: dict = {}
    exec(compile(source(spec), f"<generated seed {spec.seed}>", "exec"), namespace)  # noqa: S102 - our own source
    return namespace["Generated"]().eval(), namespace["example_inputs"]()


# ---------------------------------------------------------------------------------------------------------------
# Shrinking


def _drop_unread_inputs(spec: GraphSpec) -> GraphSpec:
    read = {i for n in spec.nodes for i in n.inputs}
    keep = [i for i in range(len(spec.inputs)) if i in read] or [0]
    if len(keep) == len(spec.inputs):
        return spec
    renumber = {old: new for new, old in enumerate(keep)}
    first = len(spec.inputs)
    for k in range(len(spec.nodes)):
        renumber[first + k] = len(keep) + k
    nodes = tuple(replace(n, inputs=tuple(renumber[i] for i in n.inputs)) for n in spec.nodes)
    return GraphSpec(spec.seed, tuple(spec.inputs[i] for i in keep), nodes)


def _without(spec: GraphSpec, k: int, bypass: bool) -> GraphSpec | None:
    """The spec without node k: its readers read its first input instead (bypass, same shape only), or every
    node that depends on it goes too. None if nothing would be left."""
    first = len(spec.inputs)
    removed = first + k
    node = spec.nodes[k]
    if bypass and spec.shapes()[node.inputs[0]] != node.shape:
        return None
    gone = {removed}
    if not bypass:
        for j in range(k + 1, len(spec.nodes)):
            if any(i in gone for i in spec.nodes[j].inputs):
                gone.add(first + j)
    renumber, kept = {i: i for i in range(first)}, []
    for j, n in enumerate(spec.nodes):
        if first + j in gone:
            continue
        inputs = tuple((node.inputs[0] if i == removed else i) for i in n.inputs)
        renumber[first + j] = first + len(kept)
        kept.append(replace(n, inputs=tuple(renumber[i] for i in inputs)))
    if not kept:
        return None
    return _drop_unread_inputs(GraphSpec(spec.seed, spec.inputs, tuple(kept)))


def shrink(spec: GraphSpec, still_fails, progress=None) -> GraphSpec:
    """A smaller spec for which still_fails(spec) holds: nodes are removed (with what depends on them, or bypassed)
    one at a time, latest first, until no single removal keeps the failure."""
    current = spec
    changed = True
    while changed:
        changed = False
        for k in reversed(range(len(current.nodes))):
            for bypass in (False, True):
                candidate = _without(current, k, bypass)
                if candidate is None or candidate == current:
                    continue
                if progress:
                    progress(f"shrinking: trying {len(candidate.nodes)} nodes")
                if still_fails(candidate):
                    current, changed = candidate, True
                    break
            if changed:
                break
    return current


# Names that moved elsewhere, kept here one release (with a DeprecationWarning).
__getattr__ = moved_attributes(
    __name__,
    {
        "build": "layout_solver.zoo.generated:build_module",
    },
)
