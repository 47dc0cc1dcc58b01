"""Which rescale rule prices today's device best: a measured profile as shipped, rescaled by one factor (what
`calibrate vulkan --rescale` applies) and by each class's factor (`--by-class`), held against one device
profile of the programs each rule lowers.

Run: LAYOUT_SOLVER_VULKAN_RUNTIME=/path/to/libvkbackend.so \\
     .venv/bin/python -m benchmarks.vulkan.rescale_rules [--models a,b] [--profile lavapipe] [--out FILE.md]

The profile's reference probes are re-timed once, as `--rescale` does, and give the day's factors; each
rule's profile is the profile rescaled by them. Per model, stock's program and each rule's solver program are
lowered and every distinct program is profiled in one device run (the runtime's query pool, median of runs),
so the rules are judged at one moment of the machine, not an hour apart. Per rule: how far its prices are from
the device's times (the median of |log(price / time)| over every operator of every program that took more than
300 us), and how far its predicted change is from the measured one (median over the models whose device
time moved by more than 3% of stock's). Device time, not wall clock: the runtime benchmark's paired wall-clock
ratios are what the programs cost a user; this is what the prices are held against.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections import Counter
from functools import partial

from benchmarks import harness
from cost_models import vulkan as vk_cost
from layout_solver.lowering.quiet import quiet
from layout_solver.targets.vulkan import rescale
from layout_solver.targets.vulkan.measure import lower_vulkan
from layout_solver.targets.vulkan.runtime import profile
from layout_solver.vulkan import solver_layouts, stock_layouts
from layout_solver.zoo.models import OUTSIDE, ZOO, build

# Issue 36's models the rules were not written against: hand-written ones and three transformers architectures
UNSEEN = [
    *(f"benchmarks/vulkan/unseen_models.py:{m}" for m in ("crnn", "permute_layernorm", "mobilenet_v3")),
    *(f"benchmarks/vulkan/unseen_models.py:{m}" for m in ("dilated_kws", "linear_attention")),
    *(f"{OUTSIDE}{m}" for m in ("convnext", "mobilevit", "convnextv2")),
]
SIGNIFICANT_US = 300.0  # an operator's time below this is the device's noise more than its price
MOVED = 0.03  # of stock's device time: a smaller change has no size to be predicted


def rule_profiles(base: vk_cost.VulkanProfile, log=print) -> dict[str, vk_cost.VulkanProfile]:
    """The profile as it is and rescaled by each rule, from one re-timing of its reference probes."""
    factors = rescale.reference_factors(base, log=log)
    return {
        "as measured": base,
        "one factor": rescale.rescaled(base, rescale.overall(factors)),
        "by class": rescale.rescaled(base, factors),
    }


def measure(model: str, rules: dict[str, vk_cost.VulkanProfile], runs: int) -> dict[str, dict]:
    """Per rule: the device's time and the rule's price by operator, for stock's program and the rule's
    solver program ({"stock": (measured, modelled), "solver": (...)})."""
    module, inputs = build(model)
    programs: dict[bytes, str] = {}  # a program two rules lower alike is profiled once
    lowered = {}
    for rule, p in rules.items():
        for side, context in (("stock", partial(stock_layouts, p)), ("solver", partial(solver_layouts, 10.0, p))):
            with quiet():
                buffer, reports = lower_vulkan(module, inputs, context)
            name = programs.setdefault(buffer, f"{rule}/{side}")
            lowered[(rule, side)] = (name, sum((r.modelled_us_by_op for r in reports), Counter()))
    found = profile({name: buffer for buffer, name in programs.items()}, inputs, runs=runs)
    times = {}
    for name, dispatches in found.items():
        if isinstance(dispatches, str):
            sys.exit(f"{model} {name}: {dispatches}")
        times[name] = Counter()
        for d in dispatches:
            if d.operator:  # the runtime's staging copies are priced by no rule
                times[name][d.operator] += d.us
    return {
        rule: {side: (times[lowered[(rule, side)][0]], lowered[(rule, side)][1]) for side in ("stock", "solver")}
        for rule in rules
    }


def summary(results: dict[str, dict[str, dict]]) -> list[str]:
    """One row per rule: its prices against the device's times, and its predicted changes against the measured."""
    rows = []
    for rule in next(iter(results.values())):
        logs, errors = [], []
        for per_rule in results.values():
            (stock_t, stock_p), (solver_t, solver_p) = per_rule[rule]["stock"], per_rule[rule]["solver"]
            for t, p in ((stock_t, stock_p), (solver_t, solver_p)):
                logs += [abs(math.log(p[op] / us)) for op, us in t.items() if us > SIGNIFICANT_US and p[op] > 0]
            measured = sum(solver_t.values()) - sum(stock_t.values())
            if abs(measured) >= MOVED * sum(stock_t.values()):
                predicted = sum(solver_p.values()) - sum(stock_p.values())
                errors.append(abs(predicted - measured) / abs(measured))
        rows.append(
            (
                rule,
                f"{statistics.median(logs):.3f} ({len(logs)})" if logs else "",
                f"{100 * statistics.median(errors):.0f}% ({len(errors)})" if errors else "",
            )
        )
    return harness.table(
        ["rule", "median abs log(price / time) (operators)", "median change error (models moved)"], rows
    )


def per_model(model: str, per_rule: dict[str, dict]) -> list[str]:
    rows = []
    for rule, sides in per_rule.items():
        (stock_t, stock_p), (solver_t, solver_p) = sides["stock"], sides["solver"]
        rows.append(
            (
                rule,
                f"{sum(stock_t.values()):,.0f}",
                f"{sum(solver_t.values()):,.0f}",
                f"{sum(solver_t.values()) - sum(stock_t.values()):+,.0f}",
                f"{sum(solver_p.values()) - sum(stock_p.values()):+,.0f}",
            )
        )
    header = ["rule", "stock us (device)", "solver us (device)", "measured change", "predicted change"]
    return [f"### {model}", "", *harness.table(header, rows), ""]


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--models", default=",".join([*ZOO, *UNSEEN]))
    parser.add_argument("--profile", default="lavapipe")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rules = rule_profiles(vk_cost.load_profile(args.profile))
    results, lines = {}, []
    for k, model in enumerate(args.models.split(","), 1):
        results[model] = measure(model, rules, args.runs)
        part = per_model(model, results[model])
        print(f"[{k}/{len(args.models.split(','))}]", "\n".join(part), flush=True)
        lines += part
    head = [harness.provenance("device times from the runtime's query pool, median of runs"), ""]
    harness.write([*head, *summary(results), "", "- " + rules["by class"].notes[-1], "", *lines], args.out)


if __name__ == "__main__":
    main()
