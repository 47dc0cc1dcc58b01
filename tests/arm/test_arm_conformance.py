"""ExecuTorch's own Arm op tests (TOSA INT pipelines on the reference model) pass with the solver stage active.

CI runs a deterministic sample: every 24th test of each layout-relevant file, and the first test of every 4th of the
other op-test files (by name); the whole set, stock and solver side by side, is `benchmarks/arm/conformance.py`
(results in benchmarks/results/arm_conformance.md).
"""

import pytest

pytest.importorskip("executorch.backends.arm")

from layout_solver.targets.ethos_u import conformance

# 16 and 3 (93 tests, 367 s on 2 cores) until CI took 57 minutes; now 70 tests.
EVERY = 24
EVERY_OTHER_FILE = 4


def test_peer_tests_that_pass_stock_pass_with_the_solver_stage(tmp_path):
    files = conformance.peer_test_files()
    assert len(files) >= 15, [f.name for f in files]
    ids = conformance.sample(conformance.collect(files, "tosa_INT"), EVERY)
    assert len({t.split("::")[0] for t in ids}) >= 15 and len(ids) >= 30
    others = conformance.other_peer_test_files()
    assert len(others) >= 100, len(others)
    ids += conformance.first_of_each_file(conformance.collect(others[::EVERY_OTHER_FILE], "tosa_INT"))
    assert len({t.split("::")[0] for t in ids}) >= 30
    solver = conformance.run(ids, "solver", files[0].parent, tmp_path / "solver.xml")
    assert set(solver) == set(ids), "tests missing from the solver run"
    # Only what fails with the solver is run stock too: a failure that stock shares is not ours.
    suspects = [t for t, r in solver.items() if r["outcome"] not in ("passed", "xfailed", "skipped")]
    stock = conformance.run(suspects, "stock", files[0].parent, tmp_path / "stock.xml") if suspects else {}
    lost = conformance.regressions(stock, solver)
    assert not lost, "\n".join(f"{t}: {solver[t]['outcome']}: {solver[t]['text']}" for t in lost)
    # The stage really ran: most sampled tests lower at least one delegate through the solver.
    laid_out = sum(1 for r in solver.values() if r["delegates"] > 0)
    assert laid_out >= len(ids) // 2, f"only {laid_out} of {len(ids)} tests went through the solver stage"


def test_a_sample_in_parts_is_the_whole_set_once():
    ids = [f"test_{f}.py::test_{k}" for f in "abc" for k in range(7)]
    parts = [conformance.sample(ids, 3, offset) for offset in range(3)]
    assert sorted(test for part in parts for test in part) == sorted(ids)
    assert parts[0][0] == "test_a.py::test_0" and parts[1][0] == "test_a.py::test_1"
    with pytest.raises(ValueError, match="offset 3"):
        conformance.sample(ids, 3, 3)
