"""Run ExecuTorch's own Arm tests with the solver's memory-format stage active: a pytest plugin.

The executorch wheel ships its Arm test suite (`executorch/backends/arm/test/ops/test_*.py`: TOSA INT / FP
pipelines whose outputs are checked on the TOSA reference model against eager). Loading this plugin wraps
every test in `solver_layouts()`, so whatever lowering a test does goes through the solver stage:

    python -m pytest -p layout_solver.targets.ethos_u.conformance --layout-stage solver \\
        $(python -c "import executorch.backends.arm.test as t, os; print(os.path.dirname(t.__file__))")/ops/test_permute.py

`--layout-stage stock` (the default) leaves the pipeline as shipped, for the side-by-side run
(`benchmarks/arm/conformance.py` tables both). Each test records how many delegates the solver laid
out (`layout_solver_delegates` in the junit XML properties), so a run that silently bypassed the stage
shows up as zero. `peer_test_dir()` finds the suite in the installed wheel.
"""

from __future__ import annotations

import functools
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from layout_solver.core.solve import DEFAULT_TIME_LIMIT

STAGES = ("stock", "solver")

# The layout-relevant subset of the peer suite (ops whose lowering moves or reads data by axis).
LAYOUT_RELEVANT = (
    "permute",
    "transpose_copy",
    "view",
    "cat",
    "slice",
    "select",
    "squeeze",
    "unsqueeze",
    "mean_dim",
    "sum",
    "softmax",
    "layer_norm",
    "linear",
    "bmm",
    "matmul",
    "conv2d",
    "avg_pool2d",
    "max_pool",  # test_max_pool.py (max_pool2d)
    "constant_pad_nd",
    "pixel_shuffling",
    "repeat",  # a TILE runs in any order, its multiples remapped
    "expand",  # written as repeats
)


def peer_test_dir() -> Path:
    """The installed executorch wheel's Arm test directory (raises if the wheel ships none)."""
    spec = importlib.util.find_spec("executorch.backends.arm.test")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("this executorch install has no executorch/backends/arm/test suite")
    return Path(next(iter(spec.submodule_search_locations)))


def peer_test_files(ops: tuple[str, ...] = LAYOUT_RELEVANT) -> list[Path]:
    """`ops/test_<op>.py` of the peer suite for each op that has one."""
    folder = peer_test_dir() / "ops"
    return [folder / f"test_{op}.py" for op in ops if (folder / f"test_{op}.py").is_file()]


def other_peer_test_files() -> list[Path]:
    """Every other op-test file of the peer suite (not in LAYOUT_RELEVANT), sorted by name."""
    relevant = set(peer_test_files())
    return [f for f in sorted((peer_test_dir() / "ops").glob("test_*.py")) if f not in relevant]


def pytest_addoption(parser: pytest.Parser) -> None:
    """Adds `--layout-stage stock|solver` to pytest."""
    parser.addoption(
        "--layout-stage",
        choices=STAGES,
        default="stock",
        help="layout-solver: run each test with the stock Arm pipeline or with solver_layouts() active",
    )
    parser.addoption(
        "--layout-time-limit", type=float, default=DEFAULT_TIME_LIMIT, help="layout-solver: solver time limit (s)"
    )


@pytest.fixture(autouse=True)
def _layout_stage(request: pytest.FixtureRequest):
    """Every test runs inside the chosen stage; the solver's delegate count goes into the test's properties."""
    if request.config.getoption("--layout-stage") != "solver":
        yield
        return
    from layout_solver.arm.hooks import solver_layouts

    with solver_layouts(request.config.getoption("--layout-time-limit")) as reports:
        yield
    request.node.user_properties.append(("layout_solver_delegates", len(reports)))


# --- Running the peer suite from outside (the benchmark script and our own CI test) ---------------------


def collect(files: list[Path], keyword: str) -> list[str]:
    """Node ids of the peer tests in `files` matching the pytest -k expression `keyword` (none for no file)."""
    if not files:
        return []
    folder = files[0].parent
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "--collect-only",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(folder),
            "-k",
            keyword,
            *(f.name for f in files),
        ],
        check=False,
        capture_output=True,
        text=True,
        cwd=folder,
    )
    ids = [line.strip() for line in out.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if not ids and out.returncode not in (0, 5):
        raise RuntimeError(f"collecting the peer tests failed:\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    return ids


def run(
    ids: list[str],
    stage: str,
    folder: Path,
    junit: Path,
    time_limit: float = DEFAULT_TIME_LIMIT,
    plugin: str = __name__,
) -> dict[str, dict]:
    """Run the peer tests `ids` (relative to `folder`) with `stage`, through the pytest `plugin` that wraps each
    test in that backend's stage (this module's, Arm's, by default); per test: outcome ("passed", "failed",
    "xfailed", "skipped", "error"), seconds, the solver's delegate count, and the failure text."""
    # pytest exits non-zero when a test fails: the outcomes are read from the junit file, per test
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            plugin,
            "--rootdir",
            str(folder),
            "--layout-stage",
            stage,
            "--layout-time-limit",
            str(time_limit),
            "--junitxml",
            str(junit),
            "-o",
            "junit_family=xunit1",
            *ids,
        ],
        check=False,
        capture_output=True,
        text=True,
        cwd=folder,
    )
    return parse_junit(junit)


def parse_junit(path: Path) -> dict[str, dict]:
    """Outcomes by test name ("file.py::test[param]") from a pytest junit XML file."""
    import xml.etree.ElementTree as ET

    results = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        file = case.get("file") or case.get("classname", "").replace(".", "/") + ".py"
        name = f"{Path(file).name}::{case.get('name')}"
        outcome, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome, text = ("failed" if child.tag == "failure" else "error"), (child.get("message") or "")[:300]
            elif child.tag == "skipped":
                kind = child.get("type", "")
                outcome = "xfailed" if "xfail" in kind else "skipped"
                text = (child.get("message") or "")[:300]
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        results[name] = {
            "outcome": outcome,
            "seconds": float(case.get("time") or 0.0),
            "text": text,
            "delegates": int(props.get("layout_solver_delegates", 0) or 0),
        }
    return results


def first_of_each_file(ids: list[str]) -> list[str]:
    """The first test of each file, in collection order."""
    return sample(ids, len(ids) or 1)


def sample(ids: list[str], every: int, offset: int = 0) -> list[str]:
    """Every `every`-th test of each file from its `offset`-th (the first one by default), in collection order: a
    deterministic sample that still touches every file; offsets 0 to every - 1 together are the whole set."""
    if not 0 <= offset < every:
        raise ValueError(f"offset {offset}: from 0 to {every - 1} for every {every}")
    by_file: dict[str, list[str]] = {}
    for test in ids:
        by_file.setdefault(test.split("::")[0], []).append(test)
    return [test for tests in by_file.values() for test in tests[offset::every]]


def regressions(stock: dict[str, dict], solver: dict[str, dict]) -> list[str]:
    """Tests that pass (or xfail as expected) stock and do not with the solver stage."""
    good = ("passed", "xfailed", "skipped")
    return sorted(t for t, r in stock.items() if r["outcome"] in good and solver.get(t, {}).get("outcome") not in good)


# --- ExecuTorch's transpose-count cases (backends/arm/test/misc/test_transpose_counts.py) -----------------


@functools.cache
def transpose_count_cases() -> dict:
    """name -> executorch's TransposeCountCase (module, inputs, expected_transposes): its FP cases and its INT
    one, 36 in executorch 1.5.1 (built once per process)."""
    import torch
    from executorch.backends.arm.test.misc import test_transpose_counts as peer

    # The peer module builds its modules and random inputs when imported, from whatever state the process's
    # generator is in: read again from one seed, so a case is the same weights and inputs in every process (its
    # int8 program was other bytes from one process to the next).
    with torch.random.fork_rng():
        torch.manual_seed(0)
        peer = importlib.reload(peer)
    return {**peer.cases, **peer.cases_int}


def fp_transpose_count(name: str, stage: str) -> tuple[int | None, str]:
    """(TOSA TRANSPOSE ops, "ok" or the failure's type) of one case in executorch's own TOSA FP pipeline, its
    tester run as the suite runs it (lowering, then the outputs on the reference model against eager), with
    `stage` ("stock" or "solver"). The count is read where the suite's own count check reads it. Needs flatc
    (installed in the environment's bin folder) on PATH."""
    import contextlib
    import io

    from executorch.backends.arm.test.tester.arm_tester import StageType, _get_tosa_operator_distribution
    from executorch.backends.arm.test.tester.test_pipeline import TosaPipelineFP

    from layout_solver.arm.hooks import solver_layouts

    if stage not in STAGES:
        raise ValueError(f"stage must be one of {STAGES}")
    case = transpose_count_cases()[name]
    pipeline = TosaPipelineFP(case.module, case.inputs, aten_op=[])
    counts: dict = {}

    def count() -> None:
        graph_module = pipeline.tester.stages[StageType.TO_EDGE_TRANSFORM_AND_LOWER].graph_module
        counts.update(dict(_get_tosa_operator_distribution(graph_module)))

    pipeline.add_stage_after("to_edge_transform_and_lower", count, suffix="count")
    try:
        with (
            solver_layouts() if stage == "solver" else contextlib.nullcontext(),
            contextlib.redirect_stdout(io.StringIO()),
        ):
            pipeline.run()
    except Exception as exc:  # noqa: BLE001 - a failing case is a result
        return (counts.get("TRANSPOSE", 0) if counts else None), type(exc).__name__
    return counts.get("TRANSPOSE", 0), "ok"
