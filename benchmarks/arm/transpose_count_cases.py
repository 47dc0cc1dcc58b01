"""ExecuTorch's own transpose-count cases as models: the 36 small modules of
`executorch/backends/arm/test/misc/test_transpose_counts.py` in the installed wheel (a single conv up to conv +
LSTM + LayerNorm models), each with its example inputs and stock's expected TOSA TRANSPOSE count.

Every case is a factory named after it, so `layout-solver compare benchmarks/arm/transpose_count_cases.py:lstm
--target ethos-u85-256` and `zoo --models` take them like any outside model. Non-tensor inputs (a cumsum's dim, an
index_put's accumulate flag) are bound into the module, so the program's inputs are tensors only.
"""

from __future__ import annotations

from functools import cache

import torch


@cache
def cases() -> dict:
    """name -> executorch's TransposeCountCase (module, inputs, expected_transposes): the FP cases and the INT one."""
    from layout_solver.targets.ethos_u.conformance import transpose_count_cases

    return transpose_count_cases()


class _Bound(torch.nn.Module):
    """A case's module with its non-tensor arguments fixed, so its inputs are tensors only."""

    def __init__(self, module: torch.nn.Module, inputs: tuple):
        super().__init__()
        self.module = module
        self.layout = [isinstance(x, torch.Tensor) for x in inputs]
        self.fixed = [None if t else x for t, x in zip(self.layout, inputs)]

    def forward(self, *tensors):
        given = iter(tensors)
        return self.module(*(next(given) if t else f for t, f in zip(self.layout, self.fixed)))


def build(name: str) -> tuple[torch.nn.Module, tuple]:
    """The case `name` as (module, tensor inputs)."""
    case = cases()[name]
    module = case.module.eval()
    if all(isinstance(x, torch.Tensor) for x in case.inputs):
        return module, tuple(case.inputs)
    return _Bound(module, case.inputs).eval(), tuple(x for x in case.inputs if isinstance(x, torch.Tensor))


def expected_transposes(name: str) -> int:
    """Stock's TOSA TRANSPOSE count for the case in executorch's FP pipeline (-1: the test crashes first)."""
    return cases()[name].expected_transposes


def __getattr__(name: str):
    """`transpose_count_cases.<case>` is the case's factory."""
    if not name.startswith("_") and name in cases():
        return lambda: build(name)
    raise AttributeError(name)


def names() -> list[str]:
    return list(cases())
