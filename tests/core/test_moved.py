"""The old import paths of the modules that moved into core/ and lowering/ still work for one release: the same
module objects, with a DeprecationWarning that names the new path."""

import contextlib
import importlib
import subprocess
import sys

import pytest

import layout_solver
from layout_solver._moved import MOVED, new_name


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_name_is_the_module_at_its_new_one_with_a_warning(old):
    new = MOVED[old]
    if old == "layout_solver.solve":  # registered when the package loads (see _moved.install), without a warning
        expect_warning = contextlib.nullcontext()
    else:
        sys.modules.pop(old, None)
        expect_warning = pytest.warns(DeprecationWarning, match=new.replace(".", r"\."))
    with expect_warning:
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__spec__.name == new  # the import under the old name did not rename the real module


def test_submodules_of_a_moved_package_are_not_loaded_twice():
    code = (
        "import warnings; warnings.simplefilter('ignore');"
        "import layout_solver.solvers.cpsat as old, layout_solver.core.solvers.cpsat as new;"
        "from layout_solver.problem import Problem; from layout_solver.core.problem import Problem as P;"
        "import layout_solver; assert old is new and Problem is P and callable(layout_solver.solve);"
        "import sys; assert not [m for m in sys.modules if m.startswith('layout_solver.') and"
        " sys.modules[m].__name__ != m and not m.startswith(('layout_solver.solve', 'layout_solver.problem'))], 'dup'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_public_solve_stays_a_function():
    importlib.import_module("layout_solver.solve")
    assert callable(layout_solver.solve) and layout_solver.solve.__module__ == "layout_solver.core.solve"


def test_names_that_did_not_move_are_left_to_the_import_system():
    assert new_name("layout_solver.cli") is None and new_name("layout_solver.solvers_x") is None
    assert new_name("layout_solver.solvers.lns") == "layout_solver.core.solvers.lns"


def test_names_that_moved_out_of_a_module_are_read_there_with_a_warning():
    from layout_solver._moved import moved_attributes

    getter = moved_attributes("old.place", {"rounded": "builtins:round", "sqrt": "math"})
    with pytest.warns(DeprecationWarning, match=r"old\.place\.rounded moved to builtins\.round"):
        assert getter("rounded") is round
    with pytest.warns(DeprecationWarning, match=r"math\.sqrt"):
        assert getter("sqrt")(4.0) == 2.0
    with pytest.raises(AttributeError, match="no attribute 'other'"):
        getter("other")
