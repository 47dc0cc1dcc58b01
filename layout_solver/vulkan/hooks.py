"""Every scoped change the Vulkan integration makes to ExecuTorch, in one place: the TagMemoryMetaPass
that `vulkan_preprocess` looks up at call time is swapped for the solver's (or the counting stock) pass,
and put back on every exit, exceptions included. (Inside the solver's pass, stock's tagging reads the registry
answers the build already read: `stock_tagging.registry_answers_reused`, scoped the same way.)"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from cost_models import vulkan as vk_cost
from layout_solver.core.multimethod import SubproblemCache
from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.lowering.client import solve_problem
from layout_solver.lowering.joint_lowering import JointReports, joint_preprocess
from layout_solver.lowering.pass_report import PassReport, collecting_reports
from layout_solver.vulkan.passes import CountingTagMemoryMetaPass, SolverTagMemoryMetaPass


@contextlib.contextmanager
def substituted_pass(cls) -> Iterator[None]:
    """Scoped swap of the name vulkan_preprocess looks up at call time; restored on every exit."""
    from executorch.backends.vulkan import vulkan_preprocess

    original = vulkan_preprocess.TagMemoryMetaPass
    vulkan_preprocess.TagMemoryMetaPass = cls
    try:
        yield
    finally:
        vulkan_preprocess.TagMemoryMetaPass = original


@contextlib.contextmanager
def solver_layouts(
    time_limit: float = DEFAULT_TIME_LIMIT,
    cost_profile: str | Path | vk_cost.VulkanProfile | None = None,
    service: str | None = None,
    method_weights: dict[str, float] | None = None,
    cache_dir: str | Path | None = None,
) -> Iterator[JointReports]:
    """Inside this block, Vulkan lowering uses the solver instead of TagMemoryMetaPass.

    `cost_profile` prices transitions and op modes: a built-in name ("mobile-gpu",
    "lavapipe"), a profile file written by `layout-solver calibrate vulkan`, or a
    VulkanProfile. None (or "default"): every profile (the built-ins and the files in
    $LAYOUT_SOLVER_VULKAN_PROFILES), and a delegate's layout changes from stock's only
    where no profile prices the change dearer and each measured one resolves its
    saving (`layout_solver.core.robust`); reports are
    priced with "mobile-gpu". `service`: URL of a `layout-solver serve`
    instance to solve on (default $LAYOUT_SOLVER_SERVICE; unset: in-process); on
    any failure the problem is solved in-process and the report's notes say so.

    `method_weights` ({"decode": 128, "prefill": 1}: how often each method runs
    per use of the program) makes a multi-method lowering one joint problem over
    every partition of every method (see `layout_solver.lowering.joint_lowering`);
    identical partitions are solved once, and with `cache_dir` across runs too.
    Single-method programs are lowered exactly as without it. Vulkan constants
    are prepacked from one content-hashed copy, so they add no links here.

    Yields the list that receives one PassReport per lowered delegate (its
    `partition` names the method); `.joint` holds one JointResult per
    multi-method lowering.
    """
    from executorch.backends.vulkan.vulkan_preprocess import VulkanBackend

    profiles = vk_cost.profile_set(cost_profile)  # several: the robust default objective (layout_solver.core.robust)
    profile = vk_cost.load_profile(cost_profile)  # prices the reports ("default": mobile-gpu)
    pass_cls = type(
        "SolverTagMemoryMetaPass",
        (SolverTagMemoryMetaPass,),
        {"time_limit": time_limit, "cost_profile": profile, "cost_profiles": profiles, "service": service},
    )
    reports = JointReports()
    with contextlib.ExitStack() as stack:
        stack.enter_context(collecting_reports(reports))
        stack.enter_context(substituted_pass(pass_cls))
        if method_weights:
            stack.enter_context(
                joint_preprocess(
                    VulkanBackend,
                    method_weights,
                    lambda p: solve_problem(p, time_limit, service),
                    reports,
                    cache=SubproblemCache(cache_dir),
                )
            )
        yield reports


@contextlib.contextmanager
def stock_layouts(cost_profile: str | Path | vk_cost.VulkanProfile | None = None) -> Iterator[list[PassReport]]:
    """The stock pass, with reports priced by `cost_profile` (for side-by-side measurements); None or
    "default" also prices them by every profile of the solver's default objective."""
    pass_cls = type(
        "CountingTagMemoryMetaPass",
        (CountingTagMemoryMetaPass,),
        {"cost_profile": vk_cost.load_profile(cost_profile), "cost_profiles": vk_cost.profile_set(cost_profile)},
    )
    with collecting_reports() as reports, substituted_pass(pass_cls):
        yield reports
