"""Rescaling a measured Vulkan profile to the present day's speed: a few of its probes re-timed on the device
(`reference_plan`), their ratios to the profile (`rescale_factors`) applied as one factor or per class."""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable

from cost_models import vulkan as vk_cost
from layout_solver.core.problem import ProblemError
from layout_solver.targets.vulkan.probing import PROBES, SQUARE_4D, Job, Probe, _measure, _read
from layout_solver.targets.vulkan.runtime import device_name, locate_runtime

# Rescaling: a few probes re-timed on the day stand for the whole profile (a CPU driver's speed moves
# with the machine's load and clocks: lavapipe ran the same programs at 0.44-0.68 of a profile's times
# two days after it was measured, and at 1.9x a day later). Not by one factor: that day a program's
# linears in buffers ran 74 ms against 41 ms in stock's textures (the profile priced them 0.3 ms cheaper;
# the day before, the program ran 0.85x stock), so a class is re-timed in each storage
# it was measured in (width-packed where it was, at the class's smallest probe shape), plus the clone
# between width- and channels-packed textures.
#
# What is applied by default is one factor, the median over every probe ("*"), not each class's own: a
# class's ratio divides by the one sample the profile measured at that point, once, and that sample's moment
# then moves the whole class on every later day (binary ops in width-packed textures read 1.40-1.45 in five
# re-timings over two days, and 0.93 in one between them, while a CRNN's GRU additions ran 0.6x their
# class-rescaled price). Held against one device profile of the 20 zoo and outside models' programs
# (`benchmarks/vulkan/rescale_rules.py`), class factors priced the ops further from their device times than
# the one factor (median |log(price / time)| 0.314 against 0.235, the profile as measured 0.235) and predicted
# the programs' changes no better (median error 40% against 41%). `--by-class` applies the class
# factors.
#
# Each probe is re-timed in several passes over all of them, its time the median over the passes: one pass
# of the 21 reference programs takes about 7 s on lavapipe, and one pass's factor for a group moved by up to
# a factor 1.5 from the next pass's, seconds later (binary ops in textures 2.08, 1.56, 1.44, 1.37; divisions in
# textures 0.86 to 0.51), while a program profiled in one go carries whatever the machine did in its 2 s into
# the factor of every op of its class.
REFERENCE_PASSES = 7
REFERENCE_LAYOUT = "TENSOR_WIDTH_PACKED"
REFERENCE_TRANSITION = ("TEXTURE_3D:TENSOR_WIDTH_PACKED", "TEXTURE_3D:TENSOR_CHANNELS_PACKED")


def reference_plan(base: vk_cost.VulkanProfile, links: int = 4) -> tuple[list[Job], list[Probe]]:
    """The reference probes of a measured profile: the programs to lower and the probes that read them."""
    jobs: list[Job] = []
    probes: list[Probe] = []
    for op in sorted(set(base.op_modes) & set(PROBES)):
        for storage in ("TEXTURE_3D", "BUFFER"):
            labels = [lab for lab in base.op_modes[op] if lab.startswith(storage + ":")]
            if not labels:
                continue
            label = f"{storage}:{REFERENCE_LAYOUT}" if f"{storage}:{REFERENCE_LAYOUT}" in labels else min(labels)
            shape = PROBES[op].shapes[0]
            job = Job(f"{op}|{label}|{shape}|{links}", op, shape, links, (label,))
            jobs.append(job)
            probes.append(Probe("op", f"{op}|{label}", shape, job.name))
    a, b = REFERENCE_TRANSITION
    if f"{a}->{b}" in base.transitions or f"{b}->{a}" in base.transitions:
        shape = SQUARE_4D[0]
        job = Job(f"unary|{a}/{b}|{shape}|{links}", "unary", shape, links, (a, b))
        jobs.append(job)
        probes.append(Probe("transition", f"{a}<->{b}", shape, job.name))
    return jobs, probes


def _group(kind: str, key: str) -> tuple[str, ...]:
    # the factors that may price a sample key, most specific first: class in its storage, class
    if kind != "op":
        return ("transitions",)
    op, _, label = key.partition("|")
    return (f"{op}@{label.partition(':')[0]}", op)


def rescale_factors(
    base: vk_cost.VulkanProfile, points: dict[tuple[str, str], list[tuple[float, ...]]]
) -> dict[str, float]:
    """Today's time over the profile's for each op class in each storage ("linear@BUFFER") and each class
    ("linear"), and for clones ("transitions"), from the reference probes that matched one of the
    profile's samples (the same point but for its time: bytes written, texture slices, MFLOP, operand
    bytes, rows); "*" is the median over all matched probes, for what no probe measured."""
    ratios: dict[str, list[float]] = {}
    for (kind, key), pts in points.items():
        old = base.samples.get(f"{kind}:{key}", [])
        for p in pts:
            same = [o[2] for o in old if (*o[:2], *o[3:]) == (*p[:2], *p[3:]) and o[2] > 0]
            if not same and len(p) > 3:
                # A contraction or row reduction is its work terms (MFLOP, operand bytes, rows): the shipped
                # lavapipe profile recorded a texture's bytes as its padded extents (65536 for a [1, 64, 64]
                # linear output), the runtime now its sizes.
                same = [o[2] for o in old if (o[1], *o[3:]) == (p[1], *p[3:]) and o[2] > 0]
            if same:
                for group in _group(kind, key):
                    ratios.setdefault(group, []).append(p[2] / statistics.median(same))
    if not ratios:
        raise ProblemError(
            "no reference probe matched a sample of the profile (was it measured with the built-in probe shapes?)"
        )
    factors = {group: statistics.median(r) for group, r in ratios.items()}
    factors["*"] = statistics.median(
        x for group, r in ratios.items() if "@" in group or group == "transitions" for x in r
    )
    return factors


def overall(factors: dict[str, float]) -> dict[str, float]:
    """The one factor a rescale applies by default (see the comment on REFERENCE_PASSES)."""
    return {"*": factors["*"]}


def shown(factors: dict[str, float]) -> str:
    """Rescale factors as notes and logs show them: "group factor, ..." sorted by group."""
    return ", ".join(f"{g} {f:.3f}" for g, f in sorted(factors.items()))


def _factor(factors: dict[str, float], kind: str, key: str) -> float:
    return next((factors[g] for g in _group(kind, key) if g in factors), factors["*"])


def _scaled(fit: vk_cost.Linear, factor: float) -> vk_cost.Linear:
    """`fit` with every price term (its overhead and each rate) multiplied by `factor`."""
    prices = [name for name in vk_cost.Linear.model_fields if name == "overhead_us" or name.startswith("us_per_")]
    return fit.model_copy(update={name: round(getattr(fit, name) * factor, 4) for name in prices})


def rescaled(base: vk_cost.VulkanProfile, factors: dict[str, float], command: str = "") -> vk_cost.VulkanProfile:
    """`base` with every price of an op class multiplied by its factor in the label's storage (else the
    class's; transitions by "transitions"; the rest and the parametric fallback's microsecond parameters by
    "*"), its samples too, so that a later `--extend` fits old and new points on one scale."""
    samples = {
        key: [(*p[:2], round(p[2] * _factor(factors, *key.split(":", 1)), 2), *p[3:]) for p in pts]
        for key, pts in base.samples.items()
    }
    parameters = {
        name: param.model_copy(update={"value": param.value * factors["*"]})
        if name.endswith(("_us", "_per_mib"))
        else param
        for name, param in base.parameters.items()
    }
    ratios = shown(factors)
    return base.model_copy(
        update={
            "op_modes": {
                op: {lab: _scaled(fit, _factor(factors, "op", f"{op}|{lab}")) for lab, fit in table.items()}
                for op, table in base.op_modes.items()
            },
            "transitions": {
                key: _scaled(fit, factors.get("transitions", factors["*"])) for key, fit in base.transitions.items()
            },
            "samples": samples,
            "parameters": parameters,
            "command": f"{base.command}; then {command}" if command else base.command,
            "notes": [
                *base.notes,
                f"rescaled {time.strftime('%Y-%m-%d')} on {device_name()} by reference probes (today / profile): {ratios}",
            ],
        }
    )


def rescale(base: vk_cost.VulkanProfile, command: str = "", by_class: bool = False, **timing) -> vk_cost.VulkanProfile:
    """Re-time `base`'s reference probes on the present device (`reference_factors`, which `timing` goes to)
    and return `base` rescaled to today's speed by one factor (choices as the profile's; predictions in
    today's microseconds), or with `by_class` by each class's factor in each storage (choices then see today's
    ratios between classes)."""
    factors = reference_factors(base, **timing)
    return rescaled(base, factors if by_class else overall(factors), command)


def reference_factors(
    base: vk_cost.VulkanProfile,
    runtime=None,
    links: int = 4,
    rounds: int = 9,
    workers: int = 2,
    log: Callable[[str], None] = print,
    passes: int = REFERENCE_PASSES,
) -> dict[str, float]:
    """`rescale_factors` from `base`'s reference probes re-timed on the present device, in `passes` passes
    over all of them."""
    logging.getLogger().setLevel(logging.WARNING)
    locate_runtime(runtime)
    jobs, probes = reference_plan(base, links)
    measured, _, failed = _measure(jobs, runtime, rounds, workers, log, passes=passes)
    if failed:
        log(f"[calibrate] {len(failed)} reference programs failed on the device: {', '.join(failed)}")
    factors = rescale_factors(base, _read(probes, measured))
    log("[calibrate] today / profile: " + shown(factors))
    return factors
