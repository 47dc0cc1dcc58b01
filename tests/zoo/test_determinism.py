"""The same model gives the same program in two processes, one of them beside a CPU hog on every core.

The whole zoo and outside set is `benchmarks/zoo/determinism.py` (benchmarks/results/determinism.md); CI lowers
ds_cnn on XNNPACK (fp32) and Vulkan (with int8 too it took 219 test-seconds, when CI ran over its 40 minutes).
"""

from benchmarks.zoo.determinism import compare_runs, run_process

MODELS = ["ds_cnn"]
TARGETS = ["xnnpack", "vulkan"]


def test_programs_are_byte_identical_in_two_processes_one_under_load():
    quiet = run_process(MODELS, TARGETS, loaded=False, log=lambda _: None)
    loaded = run_process(MODELS, TARGETS, loaded=True, log=lambda _: None)
    rows = compare_runs(quiet, loaded)
    assert len(rows) == len(MODELS) * len(TARGETS) * 2, rows  # models x targets x sides, every one lowered
    assert all(r["same"] for r in rows), [r for r in rows if not r["same"]]
