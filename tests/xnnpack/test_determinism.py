"""The same model gives the same XNNPACK program in two processes, one of them beside a CPU hog on every core.

The whole zoo and outside set is `benchmarks/xnnpack/determinism.py` (benchmarks/results/xnnpack_determinism.md);
CI lowers the issue's model (several delegates, the program-level pass at work) in fp32 and ds_cnn in int8.
"""

from benchmarks.xnnpack.determinism import compare_runs, run_process

MODELS = ["benchmarks/xnnpack/issue_models.py:channel_layer_norm_cnn", "ds_cnn"]


def test_programs_are_byte_identical_in_two_processes_one_under_load():
    quiet = run_process(MODELS, ["xnnpack", "xnnpack-int8"], loaded=False, log=lambda _: None)
    loaded = run_process(MODELS, ["xnnpack", "xnnpack-int8"], loaded=True, log=lambda _: None)
    rows = compare_runs(quiet, loaded)
    assert len(rows) == 2 * 2 * 2, rows  # models x targets x sides, every one lowered
    assert all(r["same"] for r in rows), [r for r in rows if not r["same"]]
