"""A program's outputs against eager's and another program's: shared by every target that runs its programs."""

from __future__ import annotations

import numpy as np


def eager_outputs(module, inputs: tuple) -> list[np.ndarray]:
    """The module's outputs on `inputs` (every tensor leaf), as float64 arrays."""
    import torch

    with torch.no_grad():
        out = module(*inputs)
    return [t.detach().numpy().astype(np.float64) for t in torch.utils._pytree.tree_leaves(out)
            if isinstance(t, torch.Tensor)]  # fmt: skip


def max_abs_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float | None:
    """max |a - b| over the outputs, in float64 whatever their dtypes (bool and integer outputs too); None where
    their count or shapes differ."""
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return None
    diffs = (np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64)).max(initial=0.0) for x, y in zip(a, b))
    return float(max(diffs, default=0.0))
