"""Run ExecuTorch's own XNNPACK tests with the solver's layout stage active: a pytest plugin.

The executorch wheel ships its XNNPACK test suite (`executorch/backends/xnnpack/test/`: ops/, models/,
passes/; each test lowers with the XnnpackPartitioner and, most of them, runs the program against eager).
Loading this plugin wraps every test in `layout_solver.xnnpack.solver_layouts()`:

    python -m pytest -p layout_solver.targets.xnnpack.conformance --layout-stage solver \\
        $(python -c "import executorch.backends.xnnpack.test as t, os; print(os.path.dirname(t.__file__))")/ops

`--layout-stage stock` (the default) leaves the lowering as shipped, for the side-by-side run
(`benchmarks/xnnpack/conformance.py`). Each test records how many delegates the stage saw
(`layout_solver_delegates`), so a run that bypassed the stage shows up as zero. Collecting, running and
reading the results are Arm's (`layout_solver.targets.ethos_u.conformance`), with this plugin.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.targets.ethos_u.conformance import STAGES, collect, regressions, run, sample  # noqa: F401 - re-exported

PLUGIN = __name__
SUITES = ("ops", "models", "passes")


def peer_test_dir() -> Path:
    """The installed executorch wheel's XNNPACK test directory (raises if the wheel ships none)."""
    spec = importlib.util.find_spec("executorch.backends.xnnpack.test")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("this executorch install has no executorch/backends/xnnpack/test suite")
    return Path(next(iter(spec.submodule_search_locations)))


def peer_test_files(suites: tuple[str, ...] = SUITES) -> list[Path]:
    """Every test file of the peer suite's folders `suites`, sorted: test_*.py, and in models/ every module (its
    files are named after the model, each a unittest class)."""
    root = peer_test_dir()
    pattern = {"models": "[!_]*.py"}
    return sorted(f for suite in suites for f in (root / suite).glob(pattern.get(suite, "test_*.py")))


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds `--layout-stage stock|solver` to pytest."""
    parser.addoption("--layout-stage", choices=STAGES, default="stock",
                     help="layout-solver: run each test with stock XNNPACK lowering or with solver_layouts()")  # fmt: skip
    parser.addoption("--layout-time-limit", type=float, default=DEFAULT_TIME_LIMIT,
                     help="layout-solver: solver time limit (s)")  # fmt: skip


@pytest.fixture(autouse=True)
def _layout_stage(request: pytest.FixtureRequest):
    """Every test runs inside the chosen stage; the stage's delegate count goes into the test's properties."""
    if request.config.getoption("--layout-stage") != "solver":
        yield
        return
    from layout_solver.xnnpack import solver_layouts

    with solver_layouts(request.config.getoption("--layout-time-limit")) as reports:
        yield
    request.node.user_properties.append(("layout_solver_delegates", len(reports)))


def collect_suite(suite: str, keyword: str = "") -> list[str]:
    """Node ids (relative to the suite's folder) of the peer tests of one suite folder ("ops", ...)."""
    return collect(peer_test_files((suite,)), keyword or "not nonexistent_keyword")


def run_suite(ids: list[str], suite: str, stage: str, junit: Path, time_limit: float = DEFAULT_TIME_LIMIT) -> dict:
    """`arm.conformance.run` for XNNPACK peer tests of one suite folder, through this plugin, keyed by `ids` (most
    of the suite is unittest classes, "file.py::Class::test", which the junit file names "file.py::test")."""
    results = run(ids, stage, peer_test_dir() / suite, junit, time_limit, plugin=PLUGIN)
    by_id = {}
    for test in ids:
        parts = test.split("::")
        key = f"{parts[0]}::{parts[-1]}"
        if key in results:
            by_id[test] = results[key]
    return by_id
