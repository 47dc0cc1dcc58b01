"""ExecuTorch's own XNNPACK tests (from the wheel) pass with the solver stage active wherever they pass stock.

CI runs a deterministic sample (every 16th test of each ops/ file, every 8th of each passes/ file); the whole set,
stock and solver side by side, is `benchmarks/xnnpack/conformance.py` (benchmarks/results/xnnpack_conformance.md).
"""

import pytest

from layout_solver.targets.xnnpack import conformance

SAMPLE = {"ops": 16, "passes": 8}


@pytest.mark.parametrize("suite", list(SAMPLE))
def test_peer_tests_that_pass_stock_pass_with_the_solver_stage(suite, tmp_path):
    ids = conformance.sample(conformance.collect_suite(suite), SAMPLE[suite])
    assert len(ids) >= 8, ids
    solver = conformance.run_suite(ids, suite, "solver", tmp_path / "solver.xml")
    assert set(solver) == set(ids), "tests missing from the solver run"
    # Only what fails with the stage is run stock too: a failure stock shares is not the stage's.
    suspects = [t for t, r in solver.items() if r["outcome"] not in ("passed", "xfailed", "skipped")]
    stock = conformance.run_suite(suspects, suite, "stock", tmp_path / "stock.xml") if suspects else {}
    lost = conformance.regressions(stock, solver)
    assert not lost, "\n".join(f"{t}: {solver[t]['outcome']}: {solver[t]['text']}" for t in lost)
    if suite == "ops":  # the stage really ran: most op tests lower a delegate through it
        laid_out = sum(1 for r in solver.values() if r["delegates"] > 0)
        assert laid_out >= len(ids) // 2, f"only {laid_out} of {len(ids)} tests went through the stage"


def test_the_models_suite_is_read_from_its_modules():
    """models/ names its files after the model (mobilebert.py, ...), not test_*.py: the benchmark runs them too."""
    names = {f.name for f in conformance.peer_test_files(("models",))}
    assert {"mobilebert.py", "llama2_et_example.py"} <= names and "__init__.py" not in names
    assert conformance.collect([], "anything") == []  # an empty folder is no test, not a crash
