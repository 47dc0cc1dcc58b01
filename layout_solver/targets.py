"""Every target the project lowers for, as objects in one registry: the CLI, `compare`, the zoo, the cost
query and the benchmarks look a target up here instead of testing its name.

* `EthosUTarget`: one per accelerator configuration Vela accepts (ethos-u55-32 ... ethos-u85-2048). It knows
  its executorch compile spec, the Vela configuration the spec's flags give (`cost_models.vela`, which the
  solver stage prices with), how to lower and compare a model for it, and its options (`input_order`).
* `VulkanTarget`: ExecuTorch's Vulkan delegate, priced with a device cost profile; its options say whether and
  where to run the programs.

`get_target(name)` returns the registered target or raises ValueError naming the known ones; `compare(module,
inputs, target)` is stock against the solver on any of them. Adding a target
is one subclass of `Target` and one `register()` call.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, ClassVar

from layout_solver.solve import DEFAULT_TIME_LIMIT

if TYPE_CHECKING:  # the comparisons import torch and executorch: each target imports its own when asked
    from layout_solver.compare.result import Comparison, MethodsComparison


@dataclass(frozen=True)
class Target:
    """A target: its name, family ("ethos-u", "vulkan"), a description, and the options its comparison takes."""

    name: str
    family: ClassVar[str] = ""
    options: ClassVar[frozenset[str]] = frozenset()  # compare/zoo options this target accepts

    @property
    def description(self) -> str:
        """What the target is, in words."""
        return self.name

    def check_options(self, options: dict) -> None:
        """Raise ValueError naming any option (set to something but its default) this target does not take."""
        stray = sorted(k for k, v in options.items() if v not in (None, False) and k not in self.options)
        if stray:
            families = sorted({t.family for t in TARGETS.values() if set(stray) & t.options})
            raise ValueError(
                f"{', '.join(stray)}: not an option of {self.name} (but of the {'/'.join(families)} targets)"
            )

    def compare(self, module, inputs, name=None, time_limit: float = DEFAULT_TIME_LIMIT, service=None, **options):
        """Stock versus solver for one module (layout_solver.compare.result.Comparison)."""
        raise NotImplementedError

    def compare_methods(self, built, name=None, time_limit: float = DEFAULT_TIME_LIMIT, **options):
        """Stock versus per-method versus joint for a multi-method model (MethodsComparison)."""
        raise NotImplementedError


@dataclass(frozen=True)
class EthosUTarget(Target):
    """An Arm Ethos-U NPU configuration, compiled by Vela (e.g. "ethos-u85-256")."""

    family: ClassVar[str] = "ethos-u"
    options: ClassVar[frozenset[str]] = frozenset({"input_order", "verify"})

    @property
    def description(self) -> str:
        """The configuration, as "Arm <name> (TOSA INT, Vela)"."""
        return f"Arm {self.name} (TOSA INT, Vela)"

    def compile_spec(self, **kwargs):
        """executorch's EthosUCompileSpec for this configuration (its default system config and memory mode)."""
        from executorch.backends.arm.ethosu import EthosUCompileSpec

        return EthosUCompileSpec(self.name, **kwargs)

    def vela_config(self):
        """What Vela makes of this configuration's compile flags (cost_models.vela.VelaConfig)."""
        from cost_models.vela import vela_config

        return vela_config(tuple(self.compile_spec().compiler_flags))

    def compare(self, module, inputs, name=None, time_limit=DEFAULT_TIME_LIMIT, service=None, **options):
        """Stock versus solver lowering for this configuration (compare_ethos_u)."""
        from layout_solver.compare.ethos_u import compare_ethos_u

        self.check_options(options)
        return compare_ethos_u(module, inputs, name, time_limit, self.name, service=service, **options)

    def compare_methods(self, built, name=None, time_limit=DEFAULT_TIME_LIMIT, **options):
        """Stock versus per-method versus joint lowering for this configuration."""
        from layout_solver.compare.methods import compare_methods

        return compare_methods(built, self.name, name, time_limit, family=self.family, **options)


@dataclass(frozen=True)
class VulkanTarget(Target):
    """ExecuTorch's Vulkan delegate, priced with a device cost profile."""

    family: ClassVar[str] = "vulkan"
    options: ClassVar[frozenset[str]] = frozenset({"execute", "runtime", "cost_profile", "rounds"})

    @property
    def description(self) -> str:
        """The delegate, as "Vulkan (ExecuTorch Vulkan delegate)"."""
        return "Vulkan (ExecuTorch Vulkan delegate)"

    def compare(self, module, inputs, name=None, time_limit=DEFAULT_TIME_LIMIT, service=None, **options):
        """Stock versus solver lowering on Vulkan (compare_vulkan)."""
        from layout_solver.compare.vulkan import compare_vulkan

        self.check_options(options)
        return compare_vulkan(module, inputs, name, time_limit, service=service, **options)

    def compare_methods(self, built, name=None, time_limit=DEFAULT_TIME_LIMIT, **options):
        """Stock versus per-method versus joint lowering on Vulkan."""
        from layout_solver.compare.methods import compare_methods

        return compare_methods(built, self.name, name, time_limit, family=self.family, **options)


TARGETS: dict[str, Target] = {}


def register(target: Target) -> Target:
    """Add `target` to the registry (a name may be registered once)."""
    if target.name in TARGETS:
        raise ValueError(f"target {target.name!r} is registered twice")
    TARGETS[target.name] = target
    return target


@cache
def _vela_accelerators() -> tuple[str, ...]:
    from ethosu.vela.architecture_features import Accelerator

    return tuple(a.value for a in Accelerator)


def _register_builtin() -> None:
    for accelerator in _vela_accelerators():
        register(EthosUTarget(accelerator))
    register(VulkanTarget("vulkan"))


_register_builtin()

DEFAULT_ETHOS_U = "ethos-u55-128"
# The targets a zoo run covers by default: the two NPU generations the project is measured on, and Vulkan.
DEFAULT_ZOO_TARGETS = ("ethos-u55-128", "ethos-u85-256", "vulkan")


def get_target(name: str) -> Target:
    """The registered target `name`; ValueError names the known ones."""
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; known: {', '.join(TARGETS)}") from None


def target_names(family: str | None = None) -> list[str]:
    """Registered target names (of one family, if given)."""
    return [n for n, t in TARGETS.items() if family is None or t.family == family]


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
