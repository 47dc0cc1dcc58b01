"""What each side of a comparison produced, kept for a reader that wants more than its figures.

A target's comparison hands each side's lowering to `keep(side, artifact)` (its pass reports, or Ethos-U's
`EthosULowering` with its TOSA and Vela rows); outside `keeping_sides()` that is a no-op, so a comparison pays
nothing for it. `layout_solver.explain` draws the kept sides.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator

_kept: contextvars.ContextVar[dict | None] = contextvars.ContextVar("layout_solver_kept_sides", default=None)


@contextlib.contextmanager
def keeping_sides() -> Iterator[dict[str, object]]:
    """Inside the block, what each side of a comparison produced, by side name (the last lowering of a side)."""
    kept: dict[str, object] = {}
    token = _kept.set(kept)
    try:
        yield kept
    finally:
        _kept.reset(token)


def keep(side: str, artifact) -> None:
    """Keep `artifact` as `side`'s lowering, if someone is keeping sides."""
    kept = _kept.get()
    if kept is not None:
        kept[side] = artifact
