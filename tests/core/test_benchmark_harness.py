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
