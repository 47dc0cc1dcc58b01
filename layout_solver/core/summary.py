"""A solution in words, for a person at a terminal: status, objective, bound, gap, timings and its dearest
transitions."""

from __future__ import annotations

from layout_solver.core.problem import Problem, Solution


def format_summary(problem: Problem, solution: Solution, top: int = 10) -> str:
    """A human-readable summary of a solution: status, objective, bound, gap, timings and the `top` most expensive
    transitions.
    """
    lines = [
        f"problem      {problem.name}: {len(problem.values)} values, {len(problem.ops)} ops",
        f"status       {solution.status}",
        f"objective    {solution.objective:,.2f}",
        f"bound        {solution.bound:,.2f}",
        f"gap          {solution.gap:.4%}",
        (
            f"components   {solution.components.count} ({solution.components.blocks} blocks, "
            f"{solution.components.memo_hits} memo hits) by method {solution.components.by_method}"
        ),
        "timings      "
        + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in solution.timings.items() if k != "work_units")
        + (f"; {solution.timings['work_units']:.3f} work units" if "work_units" in solution.timings else ""),
        f"transitions  {len(solution.transitions)}, cost {sum(t.cost for t in solution.transitions):,.2f}",
    ]
    for t in sorted(solution.transitions, key=lambda t: -t.cost)[:top]:
        lines.append(f"  {t.value}: {t.src} -> {t.dst}  cost {t.cost:,.2f}  for {', '.join(t.consumers)}")
    if len(solution.transitions) > top:
        lines.append(f"  ... {len(solution.transitions) - top} more")
    lines.extend(f"note         {n}" for n in solution.notes)
    return "\n".join(lines)
