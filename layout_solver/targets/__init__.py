"""Every target the project lowers for, as objects in one registry: the CLI, `compare`, the zoo, the cost
query and the benchmarks look a target up here instead of testing its name.

* `ethos_u.EthosUTarget`: one per accelerator configuration Vela accepts (ethos-u55-32 ... ethos-u85-2048). It
  knows its executorch compile spec, the Vela configuration the spec's flags give (`cost_models.vela`, which
  the solver stage prices with), how to lower and compare a model for it, and its options (`input_order`).
* `vulkan.VulkanTarget`: ExecuTorch's Vulkan delegate, priced with a device cost profile; its options say
  whether and where to run the programs.
* `xnnpack.XnnpackTarget`: ExecuTorch's XNNPACK delegate on this CPU, `xnnpack` (fp32) and `xnnpack-int8`;
  its comparisons run and time both programs here.
* `tosa.TosaTarget`: a TOSA INT program with no compiler behind it, priced by the bytes its transposes move.

`get_target(name)` returns the registered target or raises ValueError naming the known ones; `compare(module,
inputs, target)` is stock against the solver on any of them. Adding a target
is one module in this package (a subclass of `base.Target` and its comparison) and one `register()` call
below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.targets.base import (
    FLAGS,
    TARGETS,
    Target,
    get_target,
    register,
    stray_options,
    stray_options_message,
    target_names,
)
from layout_solver.targets.ethos_u import EthosUTarget, vela_accelerators
from layout_solver.targets.tosa import TosaTarget
from layout_solver.targets.vulkan import VulkanTarget
from layout_solver.targets.xnnpack import XnnpackTarget

if TYPE_CHECKING:  # the comparisons import torch and executorch: each target imports its own when asked
    from layout_solver.compare.result import Comparison, MethodsComparison

__all__ = [
    "FLAGS",
    "TARGETS",
    "EthosUTarget",
    "Target",
    "TosaTarget",
    "VulkanTarget",
    "XnnpackTarget",
    "calibrated_targets",
    "compare",
    "get_target",
    "register",
    "stray_options",
    "stray_options_message",
    "target_names",
]  # fmt: skip

for _accelerator in vela_accelerators():
    register(EthosUTarget(_accelerator))
register(VulkanTarget("vulkan"))
register(TosaTarget("tosa-int"))
register(XnnpackTarget("xnnpack"))
register(XnnpackTarget("xnnpack-int8", quantized=True))

DEFAULT_ETHOS_U = "ethos-u55-128"
# The targets a zoo run covers by default: the two NPU generations the project is measured on, and Vulkan.
DEFAULT_ZOO_TARGETS = ("ethos-u55-128", "ethos-u85-256", "vulkan")


def compare(
    module,
    inputs: tuple | None,
    target: str,
    name: str | None = None,
    time_limit: float = DEFAULT_TIME_LIMIT,
    service: str | None = None,
    **options,
) -> Comparison | MethodsComparison:
    """Stock versus solver for `module` on `inputs` (or a MultiMethodModel, inputs None) on `target` (a name in
    `layout_solver.targets`: "ethos-u55-128", "ethos-u85-256", "vulkan", ...).

    `service`: a layout-solver service URL to solve on (None: $LAYOUT_SOLVER_SERVICE or in-process);
    `options` go to the target's comparison (Vulkan: execute, runtime, cost_profile, rounds; Ethos-U:
    input_order; multi-method: weights, cache_dir and the Vulkan ones). Raises ValueError for an unknown target
    or an option the target does not take.
    """
    from layout_solver.compare.methods import MultiMethodModel

    found = get_target(target)
    if isinstance(module, MultiMethodModel):
        return found.compare_methods(module, name, time_limit, **options)
    return found.compare(module, inputs, name, time_limit, service=service, **options)


def calibrated_targets() -> list[Target]:
    """The targets `layout-solver calibrate` measures a cost profile for (those with a `calibration_help`): one
    per family, the first registered (xnnpack, not xnnpack-int8: one profile prices both)."""
    first = {}
    for t in TARGETS.values():
        if t.calibration_help:
            first.setdefault(t.family, t)
    return list(first.values())
