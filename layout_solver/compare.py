"""Stock versus solver lowering of one model, side by side, in one run.

`compare(model, target)` returns the JSON-ready dict that
`layout-solver compare MODEL --target T --json` prints. Each side is lowered
from a fresh export of the same module and inputs, so neither sees the
other's mutations. A side that fails is recorded with its error.
"""

from __future__ import annotations

import logging
import time
import traceback
import warnings
from collections import Counter

TARGETS = ("vulkan", "ethos-u55-128")


def compare(model: str, target: str, time_limit: float = 10.0) -> dict:
    if target == "vulkan":
        return compare_vulkan(model, time_limit)
    if target == "ethos-u55-128":
        from layout_solver.arm.compare import compare_ethos_u

        return compare_ethos_u(model, time_limit)
    raise ValueError(f"unknown target {target!r}; expected one of {TARGETS}")


def quiet() -> None:
    # executorch's Vulkan pass logs every transition at INFO on the root logger.
    logging.getLogger().setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=UserWarning, module="torch")


def compare_vulkan(model: str, time_limit: float = 10.0) -> dict:
    import torch
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from layout_solver.vulkan import solver_layouts, stock_layouts
    from layout_solver.zoo.models import build

    quiet()
    module, inputs = build(model)
    sides = {}
    for side, context in (("stock", stock_layouts), ("solver", lambda: solver_layouts(time_limit))):
        exported = torch.export.export(module, inputs)
        start = time.perf_counter()
        try:
            with context() as reports:
                program = to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()])
                program.to_executorch()
        except Exception as exc:  # recorded, not fatal: e.g. upstream fake-mode failures
            sides[side] = {"error": f"{type(exc).__name__}: {exc}".splitlines()[0][:500],
                           "traceback": traceback.format_exc(limit=4)}
            continue
        elapsed = time.perf_counter() - start
        by_repr: Counter = Counter()
        for r in reports:
            by_repr.update(r.tensors_by_repr)
        record = {
            "transitions": sum(len(r.transitions) for r in reports),
            "transition_cost": round(sum(r.transition_cost for r in reports), 3),
            "tensors_by_repr": dict(sorted(by_repr.items())),
            "lower_seconds": round(elapsed, 3),
            "pass_seconds": round(sum(r.pass_seconds for r in reports), 4),
            "delegates": len(reports),
            "transition_list": [t for r in reports for t in r.transitions],
        }
        if side == "solver":
            record.update(
                objective=round(sum(r.objective or 0.0 for r in reports), 3),
                bound=round(sum(r.bound or 0.0 for r in reports), 3),
                gap=max((r.gap or 0.0 for r in reports), default=0.0),
                fallbacks=[n for r in reports if r.kind == "stock-fallback" for n in r.notes],
                problem_ops=sum(r.problem_ops for r in reports),
                solve_seconds=round(sum(r.phase_seconds.get("solve", 0.0) for r in reports), 4),
                phase_seconds={k: round(sum(r.phase_seconds.get(k, 0.0) for r in reports), 4)
                               for k in ("build", "solve", "write_back", "validate")},
            )
        sides[side] = record
    return {"model": model, "target": "vulkan", **sides}


def format_table(result: dict) -> str:
    """Side-by-side table of the scalar fields both sides report."""
    stock, solver = result.get("stock", {}), result.get("solver", {})
    lines = [f"{result['model']} on {result['target']}", f"{'':24} {'stock':>16} {'solver':>16} {'ratio':>8}"]
    keys = [k for k in dict.fromkeys([*stock, *solver])
            if isinstance(stock.get(k, solver.get(k)), (int, float)) and not isinstance(stock.get(k), bool)]
    for key in keys:
        a, b = stock.get(key), solver.get(key)
        ratio = f"{b / a:.2f}" if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a else ""
        fmt = lambda v: "" if v is None else f"{v:,.4g}" if isinstance(v, float) else f"{v:,}"  # noqa: E731
        lines.append(f"{key:24} {fmt(a):>16} {fmt(b):>16} {ratio:>8}")
    for side, record in (("stock", stock), ("solver", solver)):
        if "error" in record:
            lines.append(f"{side} failed: {record['error']}")
        if record.get("tensors_by_repr"):
            lines.append(f"{side} tensors by representation: " +
                         ", ".join(f"{k} {v}" for k, v in record["tensors_by_repr"].items()))
    for key in ("equivalent", "max_abs_diff"):
        if key in result:
            lines.append(f"{key}: {result[key]}")
    return "\n".join(lines)
