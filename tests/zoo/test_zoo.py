"""Batch analysis: parallel, resumable, failure-tolerant, on local processes and on Ray."""

import csv
from pathlib import Path

import pytest

from layout_solver.zoo.runner import run_zoo

TINY = Path(__file__).parents[1] / "models" / "tiny.py"


def test_local_zoo_runs_resumes_and_records_failures(tmp_path):
    models = [f"{TINY}:residual", f"{TINY}:no_such_factory"]
    results = run_zoo(models, ["vulkan", "ethos-u55-128"], tmp_path, jobs=2, log=lambda _: None)
    by = {(Path(r["model"]).name, r["target"]): r for r in results}
    assert by[("tiny.py:residual", "vulkan")]["status"] == "ok"
    assert by[("tiny.py:residual", "ethos-u55-128")]["status"] == "ok"
    assert by[("tiny.py:residual", "ethos-u55-128")]["equivalent"] is True
    failed = by[("tiny.py:no_such_factory", "vulkan")]
    assert failed["status"] != "ok" and "no_such_factory" in (failed.get("error") or failed["stock"]["error"])
    for name in ("results.csv", "report.md", "transpose_cycles.png", "transitions.png", "solve_time_vs_size.png"):
        assert (tmp_path / name).stat().st_size > 0
    with (tmp_path / "results.csv").open() as f:
        table = list(csv.DictReader(f))
    assert len(table) == 4
    verdicts = {(Path(r["model"]).name, r["target"]): r["verdict"] for r in table}
    assert verdicts[("tiny.py:no_such_factory", "vulkan")] == "export failed"
    assert verdicts[("tiny.py:residual", "ethos-u55-128")] in ("better", "unchanged")
    assert "## Verdicts per target" in (tmp_path / "report.md").read_text()
    assert (tmp_path / "ratio_ethos-u55-128.png").stat().st_size > 0
    # Each record says what produced it: the digest of the code its backend reads, and the tool versions.
    from layout_solver.lowering.provenance import source_digest, tool_versions

    for r in results:
        backend = "vulkan" if r["target"] == "vulkan" else "arm"
        assert r["provenance"] == {"source": source_digest(backend), "tools": tool_versions()}
    assert {r["source"] for r in table} == {source_digest("vulkan"), source_digest("arm")}
    assert f"{source_digest('arm')}: 2" in (tmp_path / "report.md").read_text()
    # Resume: everything comes from the cache, nothing is lowered again.
    logged = []
    again = run_zoo(models, ["vulkan", "ethos-u55-128"], tmp_path, jobs=2, log=logged.append)
    assert len(logged) == 4 and all(line.startswith("[cached]") for line in logged)
    assert [r["status"] for r in again] == [r["status"] for r in results]
    # Pruned: the results of the jobs left out of a run go, the rest stay.
    logged = []
    kept = run_zoo(models[:1], ["ethos-u55-128"], tmp_path, jobs=1, log=logged.append, prune=True)
    assert logged == [
        f"[cached] {models[0]} on ethos-u55-128: ok",
        f"pruned 3 results this run did not use from {tmp_path / 'cache'}",
    ]
    assert len(list((tmp_path / "cache").glob("*.json"))) == 1 and kept[0]["status"] == "ok"


def test_a_job_that_kills_its_worker_is_recorded_and_the_rest_go_on(tmp_path):
    """A native abort (the reference model's REQUIRE on an out-of-range index did this) takes its worker
    process down and the pool with it: the job is recorded as crashed, the job beside it still runs."""
    from layout_solver.zoo.runner import Job, execute_local

    crashing = tmp_path / "crashing.py"
    crashing.write_text("import os\n\ndef abort():\n    os.abort()\n")
    jobs = [Job(f"{crashing}:abort", "vulkan", ()), Job("no_such_model", "vulkan", ())]
    records = {job.model: record for job, record in execute_local(jobs, workers=2)}
    assert "worker process died" in records[f"{crashing}:abort"]["error"]
    assert records[f"{crashing}:abort"]["status"] == "crashed"
    assert records["no_such_model"]["status"] != "ok" and "worker process died" not in str(records["no_such_model"])


@pytest.mark.parametrize("after_a_crash", [False, True])
def test_a_stopped_zoo_stops_its_workers(tmp_path, after_a_crash):
    """SIGTERM to a zoo run ends it and its worker processes: none is left lowering as an orphan. Also once a
    job has killed the pool's worker and the rest run one by one, each in a worker of its own."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import psutil

    marker = tmp_path / "worker.pid"
    slow = tmp_path / "slow.py"
    slow.write_text(
        f"import os, time\n\ndef model():\n    open({str(marker)!r}, 'w').write(str(os.getpid()))\n    time.sleep(600)\n"
        "\n\ndef abort():\n    os.abort()\n"
    )
    models = [f"{slow}:abort"] * after_a_crash + [f"{slow}:model"]  # one worker: the abort runs first
    script = (
        "from pathlib import Path\nfrom layout_solver.zoo.runner import run_zoo\n"
        f"run_zoo({models!r}, ['vulkan'], Path({str(tmp_path / 'out')!r}), jobs=1, log=print)\n"
    )
    runner = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 120
    while not marker.exists() or not marker.read_text():
        assert runner.poll() is None and time.monotonic() < deadline, "the job never started"
        time.sleep(0.5)
    worker = psutil.Process(int(marker.read_text()))
    os.kill(runner.pid, signal.SIGTERM)
    assert runner.wait(timeout=60) != 0
    worker.wait(timeout=30)  # raises psutil.TimeoutExpired if the worker outlives the run
    assert not worker.is_running()


def test_ray_executor_on_a_local_cluster(tmp_path):
    pytest.importorskip("ray")
    results = run_zoo([f"{TINY}:residual"], ["vulkan"], tmp_path, jobs=2, executor="ray", log=lambda _: None)
    assert [r["status"] for r in results] == ["ok"]
    assert results[0]["solver"]["transitions"] <= results[0]["stock"]["transitions"]


def test_zoo_passes_target_options_and_keys_the_cache_by_them(tmp_path):
    """`zoo --cost-profile` reaches compare(); a run with other options is not served from the cache."""
    model = f"{TINY}:residual"
    measured = run_zoo(
        [model], ["vulkan"], tmp_path, jobs=1, log=lambda _: None, options={"vulkan": {"cost_profile": "lavapipe"}}
    )
    assert measured[0]["status"] == "ok" and measured[0]["cost_profile"] == "lavapipe"
    logged = []
    default = run_zoo([model], ["vulkan"], tmp_path, jobs=1, log=logged.append)
    assert not logged and default[0]["cost_profile"] == "default"


def test_zoo_reports_a_multi_method_model_per_method(tmp_path):
    results = run_zoo(["decoder_kv"], ["vulkan"], tmp_path, jobs=1, log=lambda _: None)
    assert results[0]["status"] == "ok", results[0]
    with (tmp_path / "results.csv").open() as f:
        rows = {row["model"]: row for row in csv.DictReader(f)}
    assert set(rows) == {"decoder_kv:prefill", "decoder_kv:decode"}
    assert rows["decoder_kv:decode"]["method_weight"] == "128.0"
    assert float(rows["decoder_kv:decode"]["solver_modelled_us"]) > 0
    assert any((tmp_path / "subproblems").rglob("*.json"))  # the joint solve's cache, shared by later jobs


def test_the_zoo_table_reads_fields_the_comparison_schema_defines():
    """The zoo's columns and every target's headline measure are fields of the typed comparison result, so a
    renamed field fails here."""
    from layout_solver.compare.result import Side
    from layout_solver.targets import TARGETS

    for target in TARGETS.values():
        assert target.row_fields and set(target.row_fields) <= set(Side.model_fields), target.name
        assert target.headline and set(target.headline) <= set(Side.model_fields), target.name


U55, VK = "ethos-u55-128", "vulkan"


@pytest.mark.parametrize(
    "record, expected",
    [
        ({"target": U55, "status": "crashed", "error": "the worker process died"}, "job crashed"),
        ({"target": U55, "status": "error", "error": "ModelError"}, "export failed"),
        ({"target": U55, "status": "stock failed", "stock": {"error": "x"}, "solver": {}}, "stock lowering failed"),
        ({"target": VK, "status": "solver failed", "stock": {}, "solver": {"error": "x"}}, "solver lowering failed"),
        ({"target": VK, "status": "ok", "stock": {"executed": True}, "solver": {"executed": False}},
         "program failed to run"),
        ({"target": VK, "status": "ok", "stock": {"executed": False, "modelled_us": 2.0},
          "solver": {"executed": False, "modelled_us": 1.0}}, "not checked"),  # the runtime takes neither program
        ({"target": VK, "status": "ok", "stock": {"max_abs_diff_vs_eager": 1e-5, "modelled_us": 2.0},
          "solver": {"max_abs_diff_vs_eager": 0.5, "modelled_us": 1.0}}, "not equivalent"),
        ({"target": U55, "status": "ok", "equivalent": False, "stock": {"vela_total_cycles": 9},
          "solver": {"vela_total_cycles": 8}}, "not equivalent"),
        ({"target": U55, "status": "ok", "equivalent": None, "stock": {"vela_total_cycles": 9},
          "solver": {"vela_total_cycles": 8}}, "not checked"),
        ({"target": U55, "status": "ok", "equivalent": None, "equivalent_on_example_inputs": True,
          "stock": {"vela_total_cycles": 1000}, "solver": {"vela_total_cycles": 900}}, "better"),
        ({"target": U55, "status": "ok", "equivalent": True, "stock": {"vela_total_cycles": 1000},
          "solver": {"vela_total_cycles": 1001}}, "unchanged"),
        ({"target": U55, "status": "ok", "equivalent": True, "stock": {"vela_total_cycles": 1000},
          "solver": {"vela_total_cycles": 1002}}, "dearer than stock"),
        ({"target": VK, "status": "ok", "stock": {"run_ms": 10.0, "modelled_us": 1.0},
          "solver": {"run_ms": 10.2, "modelled_us": 0.5}}, "unchanged"),  # the device's time decides, within 3%
        ({"target": VK, "status": "ok", "stock": {"run_ms": 10.0}, "solver": {"run_ms": 10.4}}, "dearer than stock"),
        # the paired ratio (the rounds' own ratios) reads through drift between rounds that the medians keep
        ({"target": VK, "status": "ok", "run_ratio_paired": 1.01, "stock": {"run_ms": 10.0},
          "solver": {"run_ms": 10.7}}, "unchanged"),
        ({"target": VK, "status": "ok", "run_ratio_paired": 1.05, "stock": {"run_ms": 10.0},
          "solver": {"run_ms": 10.1}}, "dearer than stock"),
        # the same bytes on both sides: the solver kept stock's layout, and the times differ by noise alone
        ({"target": VK, "status": "ok", "same_program": True, "run_ratio_paired": 1.07, "stock": {"run_ms": 10.0},
          "solver": {"run_ms": 10.7}}, "unchanged"),
    ],
)  # fmt: skip
def test_each_comparison_lands_in_one_verdict(record, expected):
    from layout_solver.zoo.report import VERDICTS, verdict

    assert expected in VERDICTS and verdict({"model": "m", **record}) == expected


def test_a_dearer_program_names_the_operator_classes_that_grew():
    from layout_solver.targets.ethos_u.report import dearer_op_classes

    record = {"target": U55, "stock": {"vela_cycles_by_op": {"Mul": 100, "Add": 50, "Transpose": 400}},
              "solver": {"vela_cycles_by_op": {"Mul": 400, "Add": 60, "Transpose": 20}}}  # fmt: skip
    assert dearer_op_classes(record) == [("Mul", 300), ("Add", 10)]


def test_the_report_reads_its_timing_noise_off_the_identical_pairs():
    """Beside the verdicts: how far one timing process strayed for byte-identical programs in this run, and which
    changed programs were judged on the median of fresh timing processes."""
    from layout_solver.zoo.report import report_markdown, rows

    def vulkan(model, paired, same, timings=None):
        return {"model": model, "target": VK, "status": "ok", "same_program": same, "run_ratio_paired": paired,
                "stock": {"run_ms": 10.0, "executed": True}, "solver": {"run_ms": 10.0, "executed": True},
                **({"run_ratio_timings": timings} if timings else {})}  # fmt: skip

    table = rows([vulkan("a", 0.95, True), vulkan("b", 1.06, True), vulkan("c", 1.0, True),
                  vulkan("d", 1.01, False, [1.05, 1.01, 0.99, 1.02, 0.98])])  # fmt: skip
    assert [r["verdict"] for r in table] == ["unchanged"] * 4  # d's first reading (1.05) did not hold
    report = report_markdown(table)
    assert "3 byte-identical pairs read paired ratios 0.950 - 1.060 (median 1.000)" in report
    assert "d 1.05 1.01 0.99 1.02 0.98 -> 1.01" in report


def test_the_report_says_where_an_unchanged_verdict_hides_a_changed_program(tmp_path):
    """A transition dropped at an equal price is said (what changed, and that the price is equal), not left as a
    bare "unchanged" beside 1 -> 0 transitions: in the report and in the summary the zoo (and `make demo`) prints."""
    from layout_solver.zoo.report import console_summary, report_markdown, rows

    def vulkan(model, same, transitions):
        return {"model": model, "target": VK, "status": "ok", "same_program": same, "run_ratio_paired": 1.004,
                "stock": {"run_ms": 10.0, "executed": True, "transitions": transitions[0]},
                "solver": {"run_ms": 10.0, "executed": True, "transitions": transitions[1]}}  # fmt: skip

    table = rows([vulkan("ds_cnn", False, (1, 0)), vulkan("same", True, (2, 2))])
    assert [r["verdict"] for r in table] == ["unchanged", "unchanged"]
    report = report_markdown(table)
    assert "changed at an equal price" in report and "ds_cnn (transitions 1 -> 0, ratio 1.004)" in report
    assert "same (" not in report  # byte-identical: nothing to say
    printed = console_summary([vulkan("ds_cnn", False, (1, 0)), vulkan("same", True, (2, 2))], tmp_path).splitlines()
    assert "differs from stock's at an equal price (transitions 1 -> 0)" in next(x for x in printed if "ds_cnn" in x)
    assert "equal price" not in next(x for x in printed if "same" in x)


def test_a_catalog_sized_report_plots_one_readable_row_per_model(tmp_path):
    """Past a dozen models the bar charts run one row per model on a log axis (not a 10,000-pixel-wide strip), and
    every axis names the architecture, not only the task."""
    from matplotlib.image import imread

    from layout_solver.zoo.report import _plot_label, plot, rows

    assert _plot_label("transformers:bert/text-classification") == "bert/text-classification"
    assert _plot_label("zoo/models/net.pt2") == "net.pt2" and _plot_label("mobilenet_v2") == "mobilenet_v2"
    table = rows([{"model": f"transformers:m{i}/image-classification", "target": U55, "status": "ok",
                   "equivalent": True, "stock": {"vela_total_cycles": 10**(i % 7 + 3), "vela_transpose_cycles": 10},
                   "solver": {"vela_total_cycles": 10**(i % 7 + 3) // 2, "vela_transpose_cycles": 5}}
                  for i in range(40)])  # fmt: skip
    plot(table, tmp_path)
    height, width = imread(tmp_path / "total_cycles.png").shape[:2]
    assert height > width < 1200, (height, width)


def test_the_workers_native_output_goes_to_the_log_not_the_console(tmp_path, capfd):
    """What native code prints in a zoo worker (file descriptors 1 and 2) lands in OUT/third_party.log."""
    import functools
    import os

    from layout_solver.zoo.runner import _pool

    log = tmp_path / "third_party.log"
    pool = _pool(1, log)
    try:
        pool.submit(functools.partial(os.write, 2, b"WARNING: Different TOSA spec\n")).result()
        pool.submit(functools.partial(os.write, 1, b"native stdout\n")).result()
    finally:
        pool.shutdown()
    assert log.read_text() == "WARNING: Different TOSA spec\nnative stdout\n"
    assert "TOSA" not in capfd.readouterr().err


def test_zoo_explain_draws_each_model_links_it_and_redraws_a_cached_result_without_files(tmp_path, capsys):
    """`zoo --explain`: Model Explorer files per model beside the report, linked from it; the console gets one
    line per target and per model; a cached result whose drawing is gone is lowered again to draw it."""
    import json

    from layout_solver.cli import main

    argv = ["zoo", "--models", f"{TINY}:residual", "--target", "vulkan", "--jobs", "1", "--explain",
            "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("vulkan (") and "residual" in printed[1] and "layout conversions" in printed[1]
    assert len(printed) <= 8  # one screen: no report table on the console
    drawn = tmp_path / "explain" / "tiny.py_residual-vulkan" / "explain.json"
    explained = json.loads(drawn.read_text())
    assert explained["totals"]["solver"]["overlay"] == pytest.approx(
        explained["totals"]["solver"]["reported"], abs=1e-3
    )
    assert "## Layouts in Model Explorer" in (tmp_path / "report.md").read_text()
    logged = []
    run_zoo([f"{TINY}:residual"], ["vulkan"], tmp_path, jobs=1, log=logged.append, explain=True)
    assert logged == [f"[cached] {TINY}:residual on vulkan: ok"]
    drawn.unlink()
    logged = []
    run_zoo([f"{TINY}:residual"], ["vulkan"], tmp_path, jobs=1, log=logged.append, explain=True)
    assert logged == [] and drawn.exists()  # lowered again, drawn again
