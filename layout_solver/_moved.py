"""Old import paths of modules that moved (into core/, lowering/ and the targets' folders), kept for one release: importing one gives the module at its new path
(the same object, so isinstance checks and monkeypatching still hold) with a DeprecationWarning naming it.

A finder on sys.meta_path, not a stub file per old name: a stub package (`layout_solver.solvers`) would load its
submodules a second time under the old name, as other module objects.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

# old dotted name (a module, or a package with everything under it) -> its new one; the release that drops them
# is the one after 0.2.
MOVED: dict[str, str] = {
    **{f"layout_solver.{m}": f"layout_solver.core.{m}"
       for m in ("problem", "evaluate", "model", "solve", "brute_force", "robust", "synthetic", "multimethod",
                 "solution_cache")},
    "layout_solver.solvers.enumerate": "layout_solver.core.solvers.exhaustive",
    "layout_solver.solvers": "layout_solver.core.solvers",
    **{f"layout_solver.{m}": f"layout_solver.lowering.{m}"
       for m in ("solver_pass", "joint_lowering", "client", "provenance", "quiet")},
    "layout_solver.report": "layout_solver.lowering.pass_report",
    "layout_solver.arm.generated": "layout_solver.zoo.generated",
    **{f"layout_solver.{b}.rules": f"layout_solver.{b}.problem_builder" for b in ("arm", "vulkan", "xnnpack")},
    **{f"layout_solver.arm.{m}": f"layout_solver.targets.ethos_u.{m}" for m in ("measure", "equivalence", "conformance")},
    **{f"layout_solver.vulkan.{m}": f"layout_solver.targets.vulkan.{m}" for m in ("measure", "runtime", "calibrate")},
}  # fmt: skip


def new_name(old: str) -> str | None:
    """Where the module `old` lives now (the longest moved prefix wins), or None if it did not move."""
    for prefix in sorted(MOVED, key=len, reverse=True):
        if old == prefix or old.startswith(prefix + "."):
            return MOVED[prefix] + old[len(prefix) :]
    return None


class _Alias(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        warnings.warn(
            f"{spec.name} moved to {self.target}; the old name goes in the next release", DeprecationWarning, 3
        )
        module = importlib.import_module(self.target)
        self.spec = module.__spec__  # the import system overwrites it with the old name's; exec_module puts it back
        return module

    def exec_module(self, module) -> None:
        """The module ran when it was imported under its new name: only its own spec is restored."""
        module.__spec__ = self.spec


class MovedModules(importlib.abc.MetaPathFinder):
    """Resolves the old names in MOVED to the modules at their new ones."""

    def find_spec(self, fullname, path=None, target=None):
        """A spec that loads the module's new name, for an old name; None for every other module."""
        moved_to = new_name(fullname)
        if moved_to is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(moved_to))


def install() -> None:
    """Put the finder first on sys.meta_path (once). `layout_solver.solve` is registered at once, without a
    warning: importing it later under that name would rebind the package's `solve`, the public function, to the
    module."""
    if not any(isinstance(f, MovedModules) for f in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
    sys.modules.setdefault("layout_solver.solve", importlib.import_module("layout_solver.core.solve"))


def moved_attributes(old_module: str, moved: dict[str, str]):
    """A module `__getattr__` for names that moved out of `old_module`: `moved` maps each old name to
    "new.module" or "new.module:new_name"; reading one warns (DeprecationWarning) and returns the object."""

    def __getattr__(name: str):
        if name not in moved:
            raise AttributeError(f"module {old_module!r} has no attribute {name!r}")
        module, _, new = moved[name].partition(":")
        warnings.warn(
            f"{old_module}.{name} moved to {module}.{new or name}; the old name goes in the next release",
            DeprecationWarning,
            2,
        )
        return getattr(importlib.import_module(module), new or name)

    return __getattr__
