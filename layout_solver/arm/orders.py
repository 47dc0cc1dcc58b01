"""Dim orders: a value stored in order `o` is `logical.permute(o)` in memory. Labels, composition, inverse,
and which orders keep a reshape a pure reshape. Plain Python and numpy (no torch), shared by the op rules,
the problem builder and the write-back.
"""

from __future__ import annotations

import functools

import numpy as np

Order = tuple[int, ...]

VIEW_CHECK_LIMIT = 1 << 20  # elements; larger views stay in the identity order


def order_label(order) -> str:
    """The problem's label of an order.

    >>> order_label((0, 2, 3, 1))
    '0,2,3,1'
    """
    return ",".join(str(i) for i in order)


def label_order(label: str) -> Order:
    """The order a label names.

    >>> label_order('0,2,3,1')
    (0, 2, 3, 1)
    """
    return tuple(int(x) for x in label.split(",")) if label else ()


def compose(a, b) -> Order:
    """a[b]: the order of transpose(transpose(x, a), b).

    >>> compose((0, 2, 3, 1), (0, 3, 1, 2))
    (0, 1, 2, 3)
    """
    return tuple(a[i] for i in b)


def axes_moved(rank: int, axes, innermost: bool) -> Order:
    """The order that stores `axes` (in their own order) innermost, or outermost, the other axes keeping theirs.

    >>> axes_moved(4, [1], innermost=True), axes_moved(3, [2], innermost=False)
    ((0, 2, 3, 1), (2, 0, 1))
    """
    moved = [int(a) for a in axes]
    rest = [a for a in range(rank) if a not in moved]
    return tuple(rest + moved if innermost else moved + rest)


def inverse(p) -> Order:
    """The permutation that undoes `p`.

    >>> inverse((0, 2, 3, 1))
    (0, 3, 1, 2)
    """
    inv = [0] * len(p)
    for i, x in enumerate(p):
        inv[x] = i
    return tuple(inv)


def _reshape_groups(s_in, s_out) -> list[tuple[list[int], list[int]]] | None:
    """Pair contiguous runs of input and output axes with equal element counts."""
    groups, i, j = [], 0, 0
    while i < len(s_in) or j < len(s_out):
        gi, gj = [], []
        pi = pj = 1
        while True:
            if pi <= pj and i < len(s_in):
                pi *= s_in[i]
                gi.append(i)
                i += 1
            elif j < len(s_out):
                pj *= s_out[j]
                gj.append(j)
                j += 1
            else:
                return None
            if (
                pi == pj
                and (i == len(s_in) or s_in[i] != 1 or j == len(s_out))
                and (j == len(s_out) or s_out[j] != 1 or i == len(s_in))
            ):
                break
        groups.append((gi, gj))
    return groups


def units_in_place(shape, order) -> Order:
    """`order` with each unit axis of `shape` at its own position, the other axes in the same sequence: the
    same bytes in memory (a unit axis can sit anywhere), written as close to the identity as they allow.

    >>> units_in_place([1, 4, 16, 16], (2, 0, 1, 3))
    (0, 2, 1, 3)
    """
    others = iter(a for a in order if shape[a] != 1)
    return tuple(p if shape[p] == 1 else next(others) for p in range(len(order)))


def view_output_order(s_in, s_out, order_in) -> Order | None:
    """The output order in which reshaping s_in -> s_out moves no data, given the input order.

    Proposed from the reshape's axis groups, then checked exactly on index arrays.

    >>> view_output_order([2, 3, 4], [2, 12], (0, 2, 1)) is None  # (3, 4) interleaved in memory
    True
    >>> view_output_order([2, 3, 4], [6, 4], (2, 0, 1))
    (1, 0)
    >>> view_output_order([1, 32, 16, 16], [1, 1, 32, 256], (0, 2, 3, 1))  # channels-last GroupNorm's view
    (0, 1, 3, 2)
    """
    return _view_output_order(tuple(int(d) for d in s_in), tuple(int(d) for d in s_out), tuple(order_in))


@functools.lru_cache(maxsize=4096)
def _view_output_order(s_in, s_out, order_in) -> Order | None:
    # Cached: the domain propagation and the mode building ask the same questions,
    # and each exact check builds index arrays of up to VIEW_CHECK_LIMIT elements.
    if list(order_in) == list(range(len(s_in))):
        return tuple(range(len(s_out)))  # a view of a row-major tensor is always a pure reshape
    n = 1
    for d in s_in:
        n *= d
    if n > VIEW_CHECK_LIMIT or n == 0:
        return None
    index = np.arange(n)
    moved = index.reshape(s_in).transpose(order_in).ravel()
    # First with every axis grouped; then with the unit axes set aside, since a unit axis can sit anywhere in
    # memory but can glue two groups into one (GroupNorm's [1, C, H, W] -> [1, 1, C, H*W] pairs (1, C) with
    # (1, 1, C), so a channels-last input looked like C split from itself). Not for a view that only adds or
    # drops unit axes: Vela moves such a RESHAPE past a TRANSPOSE reading it (CanonicaliseReshapeTransposePattern),
    # so its unit axes' places decide the transpose Vela runs, which the problem prices on the view's own shape
    # (measured: on vit_small, unit axes left in place turned the q/k/v head splits after their SLICEs into
    # rank-5 transposes, 86k -> 193k transpose cycles).
    merges = [d for d in s_in if d != 1] != [d for d in s_out if d != 1]
    for skip_units in (False, True) if merges else (False,):
        order_out = _proposed_order(s_in, s_out, order_in, skip_units)
        if order_out is not None and np.array_equal(moved, index.reshape(s_out).transpose(order_out).ravel()):
            return order_out
    return None


def _proposed_order(s_in, s_out, order_in, skip_units: bool) -> Order | None:
    """An output order from the reshape's axis groups: the groups in the order the input stores them, each
    group's axes contiguous and ascending. With `skip_units`, unit axes are left out of the groups and each
    unit output axis keeps its own position."""
    keep_in = [i for i, d in enumerate(s_in) if d != 1 or not skip_units]
    keep_out = [j for j, d in enumerate(s_out) if d != 1 or not skip_units]
    groups = _reshape_groups([s_in[i] for i in keep_in], [s_out[j] for j in keep_out])
    if groups is None:
        return None
    group_of = {keep_in[a]: g for g, (gi, _) in enumerate(groups) for a in gi}
    sequence = []
    for a in order_in:  # group sequence in physical order, axes of a group kept contiguous and ascending
        if a not in group_of:
            continue  # a unit axis set aside
        g = group_of[a]
        if not sequence or sequence[-1][0] != g:
            sequence.append((g, [a]))
        else:
            sequence[-1][1].append(a)
    if len({g for g, _ in sequence}) != len(sequence) or any(axes != sorted(axes) for _, axes in sequence):
        return None
    placed = [keep_out[b] for g, _ in sequence for b in groups[g][1]]
    if len(placed) != len(keep_out):
        return None  # an output group no input axis reaches
    slot = dict(zip(keep_out, placed))  # a unit axis set aside keeps its own position
    return tuple(slot.get(j, j) for j in range(len(s_out)))
