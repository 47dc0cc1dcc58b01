"""Is there a faster Vulkan layout than the solver's? A search on the device around the solver's answer.

Run: LAYOUT_SOLVER_VULKAN_RUNTIME=/path/to/libvkbackend.so \\
     .venv/bin/python -m benchmarks.vulkan.layout_search [--models a,b] [--variants 6] [--sigma 0.3] \\
     [--rounds 15] [--out benchmarks/results/vulkan_layout_search.md]

The solver's program is optimal for the lavapipe profile, but the profile predicts the median model's
change with about 20% error, so a layout the profile ranks second could be faster on the device. Per
model this lowers stock, the solver with the profile, and the solver with `--variants` perturbed
profiles (every fitted rate of every op mode and transition multiplied by its own lognormal factor,
exp(sigma * z), seeded): each perturbed optimum is a layout a profile within the model's error would
choose. Every distinct program is run on the device and timed in interleaved rounds
(`layout_solver.targets.vulkan.runtime.execute`); the fastest variant is then timed again, with stock and the
solver, in fresh rounds, because the fastest of several noisy medians is biased low.

Table per model: distinct variants, the selection round's ratios (solver, best variant), and the
confirmation round's ratios. The summary gives the geometric mean of the confirmed ratios of the solver and
of the best of all layouts tried (the solver's, or the variant where it confirmed faster), over the
models where stock inserts transitions.
"""

from __future__ import annotations

import argparse
import hashlib
import math
import time

import numpy as np

from benchmarks import harness
from cost_models import vulkan as vk_cost
from layout_solver.lowering.quiet import quiet
from layout_solver.targets.vulkan.measure import lower_vulkan
from layout_solver.targets.vulkan.runtime import execute
from layout_solver.vulkan import solver_layouts, stock_layouts
from layout_solver.zoo.models import ZOO, build

RATES = ("overhead_us", "us_per_mib", "us_per_slice", "us_per_mflop", "us_per_operand_mib", "us_per_krow")


def perturbed(profile: vk_cost.VulkanProfile, sigma: float, rng: np.random.Generator) -> vk_cost.VulkanProfile:
    """`profile` with every rate of every fitted line multiplied by its own exp(sigma * z).

    The samples stay: unfit labels are still found, and the perturbed fits' error on them (the profile's
    mode resolution) grows with sigma, so a variant also ties more of an op's modes than the solver does.
    """

    def jitter(line: vk_cost.Linear) -> vk_cost.Linear:
        return line.model_copy(update={k: getattr(line, k) * math.exp(sigma * rng.standard_normal()) for k in RATES})

    return profile.model_copy(
        update={
            "name": f"{profile.name}-perturbed",
            "transitions": {k: jitter(v) for k, v in profile.transitions.items()},
            "op_modes": {c: {k: jitter(v) for k, v in table.items()} for c, table in profile.op_modes.items()},
        }
    )


def lower_variants(model: str, base: vk_cost.VulkanProfile, variants: int, sigma: float, seed: int):
    """Stock, the solver, and each distinct perturbed-profile solution: name -> (program bytes, transitions)."""
    module, inputs = build(model)
    rng = np.random.default_rng(seed)
    sides = {"stock": lambda: stock_layouts(base), "solver": lambda: solver_layouts(10.0, base)}
    for k in range(variants):
        profile = perturbed(base, sigma, rng)
        sides[f"variant{k}"] = lambda profile=profile: solver_layouts(10.0, profile)
    programs, seen = {}, set()
    for side, context in sides.items():
        with quiet():
            buffer, reports = lower_vulkan(module, inputs, context)
        digest = hashlib.sha256(buffer).hexdigest()
        if side.startswith("variant") and digest in seen:
            continue  # the same program as an earlier side
        seen.add(digest)
        programs[side] = (buffer, sum(len(r.transitions) for r in reports))
    return inputs, programs


def _ratio(ms: float | None, stock_ms: float) -> str:
    return f"{ms / stock_ms:.3f}" if ms else "-"


def timed(programs: dict[str, bytes], inputs, rounds: int) -> dict[str, float | None]:
    return {name: r.run_ms for name, r in execute(programs, inputs, rounds=rounds).items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(ZOO))
    parser.add_argument("--profile", default="lavapipe")
    parser.add_argument("--variants", type=int, default=6)
    parser.add_argument("--sigma", type=float, default=0.3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out")
    args = parser.parse_args()
    base = vk_cost.load_profile(args.profile)
    lines = [
        harness.provenance("the runtime's Vulkan device; median of interleaved rounds"),
        "",
        (
            "| model | transitions stock / solver / best variant | distinct variants | selection: solver ratio | "
            "selection: best variant ratio | confirmed: solver ratio | confirmed: best variant ratio |"
        ),
        "|---|---|---|---|---|---|---|",
    ]
    confirmed = {}
    for model in args.models.split(","):
        start = time.perf_counter()
        inputs, programs = lower_variants(model, base, args.variants, args.sigma, args.seed)
        ms = timed({n: p[0] for n, p in programs.items()}, inputs, args.rounds)
        if not ms.get("stock") or not ms.get("solver"):
            lines.append(f"| {model} | failed to run: {ms} |")
            continue
        ran = {n: t for n, t in ms.items() if n.startswith("variant") and t}
        best = min(ran, key=ran.get) if ran else None
        again = timed({n: programs[n][0] for n in ("stock", "solver", best) if n}, inputs, args.rounds)
        solver_ratio = again["solver"] / again["stock"]
        best_ratio = again[best] / again["stock"] if best and again.get(best) else solver_ratio
        confirmed[model] = (programs["stock"][1], solver_ratio, min(solver_ratio, best_ratio))
        row = (
            f"| {model} | {programs['stock'][1]} / {programs['solver'][1]} / {programs[best][1] if best else '-'} | "
            f"{len(ran)} | {ms['solver'] / ms['stock']:.3f} | {_ratio(ran.get(best), ms['stock'])} | "
            f"{solver_ratio:.3f} | {_ratio(again.get(best), again['stock'])} |"
        )
        lines.append(row)
        print(row, f"({time.perf_counter() - start:.0f} s)", flush=True)

    counted = [v for v in confirmed.values() if v[0] > 0]
    solver_gm, best_gm = (harness.geomean(v[k] for v in counted) for k in (1, 2))
    summary = [
        "",
        (
            f"- geometric mean of the confirmed ratios over the {len(counted)} models where stock inserts "
            f"transitions: solver {solver_gm:.3f}; best layout tried per model "
            f"{best_gm:.3f}"
        ),
    ]
    lines += summary
    print("\n".join(summary))
    harness.write(lines, args.out)


if __name__ == "__main__":
    main()
