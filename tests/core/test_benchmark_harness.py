"""The benchmarks' shared harness: the provenance line is read from the run, not typed by hand."""

import sys
import types
from importlib import metadata

from benchmarks import harness


def test_provenance_names_the_module_arguments_and_installed_versions(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["/x/benchmarks/arm/total.py", "--sets", "cases", "--work", "a dir"])
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", types.SimpleNamespace(name="benchmarks.arm.total"))
    line = harness.provenance("2 targets")
    assert line.startswith("Command: .venv/bin/python -m benchmarks.arm.total --sets cases --work 'a dir' (")
    assert f"torch {metadata.version('torch')}" in line and f"executorch {metadata.version('executorch')}" in line
    assert line.endswith("-core machine; 2 targets)")


def test_versions_leave_out_what_is_not_installed():
    assert harness.versions(("torch", "no-such-package-here")) == f"torch {metadata.version('torch')}"


def test_table_and_ratios():
    assert harness.table(("a", "b"), [(1, None)]) == ["| a | b |", "|---|---|", "| 1 |  |"]
    assert harness.ratio(90.0, 100.0) == 0.9 and harness.ratio(1.0, 0) is None and harness.ratio(None, 1.0) is None
    assert abs(harness.geomean([0.5, 2.0, None]) - 1.0) < 1e-12


def _vulkan_result(same: bool, paired: float, predicted: float) -> dict:
    side = {"transitions": 1, "executed": True, "run_ms": 10.0, "max_abs_diff_vs_eager": 0.0}
    return {
        "stock": side,
        "solver": side,
        "target": "vulkan",
        "same_program": same,
        "run_ratio": paired,
        "run_ratio_paired": paired,
        "measured_delta_us": (paired - 1) * 10_000,
        "predicted_delta_us": predicted,
        "max_abs_diff_stock_vs_solver": 0.0,
    }


def test_vulkan_checks_read_two_identical_programs_as_unchanged():
    """The runtime benchmark's checks: a pair of byte-identical programs that read 1.05 is noise (ratio 1, no
    change to predict); a changed program's reading is held to the 3% limit and its prediction to its change."""
    from benchmarks.vulkan.runtime import checks, row

    rows = {
        "same": row("same", _vulkan_result(True, 1.05, 0.0))[1],
        "moved": row("moved", _vulkan_result(False, 0.9, -800.0))[1],
    }
    lines = "\n".join(checks(rows))
    assert "ratio <= 1.03 on every model: True (worst 1.000; 1 pairs of byte-identical programs read as 1)" in lines
    assert "agree in sign" in lines and ": all" in lines
    assert "moved more than noise (1 models): 20%" in lines
    rows["dearer"] = row("dearer", _vulkan_result(False, 1.05, 100.0))[1]
    assert "on every model: False (worst 1.050" in "\n".join(checks(rows))
