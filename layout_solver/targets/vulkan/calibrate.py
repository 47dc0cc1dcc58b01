"""`layout-solver calibrate vulkan`: measure a device's Vulkan cost profile.

What the solver trades against each other is (a) a transition, one clone
dispatch from one representation to another, and (b) running an op in one
representation rather than another. Both are measured here on the present
device, on real programs lowered by ExecuTorch and run by its Vulkan runtime,
one shader dispatch at a time: the runtime times every dispatch with a Vulkan
query pool and reports it in ETDump (`runtime.profile`), so nothing has to be
inferred from whole-program times:

* op modes: for each op class (`rules.OP_CLASSES`) and each representation the
  registry lets it take, a chain of ops with every tensor pinned to that
  representation; each op's time is the sum of its own dispatches (the
  runtime's staging copies are not the op's);
* transitions: a chain of unary ops pinned alternately to A and B, whose
  clones (one per link, both ways) are timed one by one.

Each sample is described by what the dispatch wrote (bytes, texture slices),
read from the runtime's own record of the tensor. Each (class, representation)
and (A, B) pair is fitted over several sizes as overhead + rate per MiB + rate
per slice (non-negative least squares) and written in the
`cost_models.vulkan.VulkanProfile` format with the device name and the command.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Callable

from cost_models import vulkan as vk_cost
from layout_solver._moved import moved_attributes
from layout_solver.core.problem import ProblemError
from layout_solver.targets.vulkan.probing import (
    BATCHED_3D,
    DEEP_4D,
    FLOAT_LABELS,
    MATRICES,
    PROBES,
    SQUARE_4D,
    Job,
    Probe,
    _measure,
    _probe_runs,
    _read,
)
from layout_solver.targets.vulkan.rescale import REFERENCE_PASSES as _REFERENCE_PASSES
from layout_solver.targets.vulkan.rescale import overall, reference_factors, shown
from layout_solver.targets.vulkan.runtime import device_name, locate_runtime


def plan(
    ops: list[str],
    labels: list[str],
    sizes: int,
    links: int,
    transitions: bool,
    shapes: list[tuple[int, ...]] | None = None,
) -> tuple[list[Job], list[Probe]]:
    """Every program to lower, and the probes that read their dispatches; `shapes` replaces the built-in
    probe shapes (each op class takes those its chain can run on)."""
    jobs: dict[str, Job] = {}
    probes: list[Probe] = []

    def job(op, shape, pattern) -> str:
        name = f"{op}|{'/'.join(pattern)}|{shape}|{links}"
        jobs.setdefault(name, Job(name, op, shape, links, pattern))
        return name

    for op in ops:
        spec = PROBES[op]
        op_shapes = (
            [s for s in shapes if _probe_runs(op, s)] if shapes is not None else spec.shapes[:sizes] + spec.extra
        )
        for shape in op_shapes:
            for label in labels:
                probes.append(Probe("op", f"{op}|{label}", shape, job(op, shape, (label,))))
    if transitions:
        for shape in shapes if shapes is not None else SQUARE_4D[:sizes] + DEEP_4D + BATCHED_3D + MATRICES:
            for a, b in itertools.combinations(labels, 2):
                if vk_cost.split_repr(a)[0] == vk_cost.split_repr(b)[0] == "BUFFER":
                    continue  # the runtime has no buffer-to-buffer layout clone (routed through a texture)
                probes.append(Probe("transition", f"{a}<->{b}", shape, job("unary", shape, (a, b))))
    return list(jobs.values()), probes


def calibrate(
    runtime=None,
    ops: list[str] | None = None,
    labels: list[str] | None = None,
    sizes: int = 3,
    links: int = 4,
    rounds: int = 9,
    transitions: bool = True,
    workers: int = 2,
    log: Callable[[str], None] = print,
    command: str = "",
    shapes: list[tuple[int, ...]] | None = None,
    extend: vk_cost.VulkanProfile | None = None,
    reference_passes: int = _REFERENCE_PASSES,
) -> vk_cost.VulkanProfile:
    """Measure op modes and transitions on the present device; returns the fitted profile.

    `shapes` measures at those shapes instead of the built-in ones. With `extend`
    (a measured profile), the new points join that profile's samples and every
    touched (class, label) or transition is refitted over old and new points:
    probing the shapes a model actually has (one-token decode, say) without
    measuring everything again. The same run re-times `extend`'s reference probes
    and brings the new points to its scale first, in `reference_passes` passes
    (the device's speed moves between days by up to 2x on lavapipe: points of
    two days on one line would price the day, not the shape).
    """
    logging.getLogger().setLevel(logging.WARNING)
    locate_runtime(runtime)
    jobs, probes = plan(ops or list(PROBES), labels or FLOAT_LABELS, sizes, links, transitions, shapes)
    measured, lowered, failed = _measure(jobs, runtime, rounds, workers, log)
    points = _read(probes, measured)
    if extend is not None:
        try:
            factors = overall(reference_factors(extend, runtime, links, rounds, workers, log, reference_passes))
        except ProblemError as exc:  # a profile measured at other shapes: no probe to scale by
            log(f"[calibrate] new points kept at today's scale: {exc}")
            factors = {"*": 1.0}
        points = {key: [(*p[:2], round(p[2] / factors["*"], 2), *p[3:]) for p in pts] for key, pts in points.items()}
        return _extended(extend, points, lowered, len(jobs), failed, command, factors)
    return fitted_profile(points, device_name(), command, lowered, len(jobs), failed)


def fitted_profile(
    points: dict[tuple[str, str], list[tuple[float, ...]]],
    device: str,
    command: str,
    lowered: int,
    planned: int,
    failed: dict[str, str],
) -> vk_cost.VulkanProfile:
    """The profile fitted to probe `points` measured on `device` (here, or by a device kit elsewhere)."""
    op_modes: dict[str, dict[str, vk_cost.Linear]] = {}
    trans: dict[str, vk_cost.Linear] = {}
    for (kind, key), pts in sorted(points.items()):
        fit = vk_cost.fit_samples(pts)
        if kind == "op":
            op, label = key.split("|")
            op_modes.setdefault(op, {})[label] = fit
        else:
            trans[key] = fit
    base = vk_cost.load_profile("mobile-gpu")
    return vk_cost.VulkanProfile(
        version=3,
        name="measured",
        device=device,
        measured=True,
        command=command,
        description="Measured on this device by layout-solver calibrate vulkan: every shader dispatch of chains of "
        "pinned ops (op modes) and of chains alternating between two representations (transitions, one clone "
        "per link) timed by the runtime's query pool; each fitted as overhead + rate per MiB + rate per "
        "texture slice (cost_models.vulkan.texture_slices) over several sizes. Unmeasured pairs use the "
        "parametric fallback.",
        parameters=base.parameters,
        transitions=trans,
        op_modes=op_modes,
        samples={f"{kind}:{key}": pts for (kind, key), pts in sorted(points.items())},
        notes=[
            (
                f"{lowered} of {planned} probe programs lowered (the rest the registry refuses), "
                f"{len(failed)} failed on the device"
            )
        ]
        + [f"{n}: {e[:300]}" for n, e in failed.items()],
    )


def _extended(
    base: vk_cost.VulkanProfile,
    new: dict[tuple[str, str], list[tuple[float, ...]]],
    lowered: int,
    planned: int,
    failed: dict[str, str],
    command: str,
    factors: dict[str, float],
) -> vk_cost.VulkanProfile:
    """`base` with the `new` points (already at its scale: divided by today's `factors`) added to its samples
    and every touched entry refitted."""
    samples = {key: [tuple(p) for p in pts] for key, pts in base.samples.items()}
    for (kind, key), pts in new.items():
        # A sample's arity says nothing of its age: its trailing zero terms are left off (`_point`).
        samples[f"{kind}:{key}"] = samples.get(f"{kind}:{key}", []) + list(pts)
    op_modes = {op: dict(table) for op, table in base.op_modes.items()}
    trans = dict(base.transitions)
    for kind, key in new:
        fit = vk_cost.fit_samples(samples[f"{kind}:{key}"])
        if kind == "op":
            op, label = key.split("|")
            op_modes.setdefault(op, {})[label] = fit
        else:
            trans[key] = fit
    added = sum(len(p) for p in new.values())
    return base.model_copy(
        update={
            "transitions": trans,
            "op_modes": op_modes,
            "samples": dict(sorted(samples.items())),
            "command": f"{base.command}; then {command}" if command else base.command,
            "notes": [
                *base.notes,
                (
                    f"extended: {added} points from {lowered} of {planned} probe programs, "
                    f"{len(failed)} failed on the device; {len(new)} entries refitted; measured on "
                    f"{time.strftime('%Y-%m-%d')}, brought to this profile's scale by its reference probes (today / "
                    "profile: " + shown(factors) + ")"
                ),
            ],
        }
    )


# Names that moved elsewhere, kept here one release (with a DeprecationWarning).
__getattr__ = moved_attributes(
    __name__,
    {
        "rescale": "layout_solver.targets.vulkan.rescale",
        "rescaled": "layout_solver.targets.vulkan.rescale",
        "rescale_factors": "layout_solver.targets.vulkan.rescale",
        "reference_plan": "layout_solver.targets.vulkan.rescale",
        "REFERENCE_PASSES": "layout_solver.targets.vulkan.rescale",
        "REFERENCE_LAYOUT": "layout_solver.targets.vulkan.rescale",
        "REFERENCE_TRANSITION": "layout_solver.targets.vulkan.rescale",
        "lower_pinned": "layout_solver.targets.vulkan.probing",
        "read_probe": "layout_solver.targets.vulkan.probing",
        "dispatch_label": "layout_solver.targets.vulkan.probing",
        "ProbeSpec": "layout_solver.targets.vulkan.probing",
        "STAGING": "layout_solver.targets.vulkan.probing",
        "SQUARE_4D": "layout_solver.targets.vulkan.probing",
        "DEEP_4D": "layout_solver.targets.vulkan.probing",
        "TOKENS_3D": "layout_solver.targets.vulkan.probing",
    },
)
