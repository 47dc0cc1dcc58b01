"""Differential execution on a real Vulkan device (lavapipe in CI): the device is the judge.

Every program is lowered twice (stock TagMemoryMetaPass, solver) and run by
ExecuTorch's Vulkan runtime in a child process. The solver's program must run
wherever stock's runs and match eager at least as well. Needs the runtime
plugin ($LAYOUT_SOLVER_VULKAN_RUNTIME) and a Vulkan driver; locally they are
skipped without them, in CI (CI=true) their absence fails the suite.
"""

import contextlib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip("executorch.backends.vulkan")

from layout_solver.targets.vulkan.measure import lower_vulkan
from layout_solver.targets.vulkan.runtime import ENV_VAR, VulkanRuntimeUnavailable, execute, locate_runtime, probe
from layout_solver.vulkan import solver_layouts, stock_layouts
from layout_solver.zoo.models import ZOO, build

sys.path.insert(0, str(Path(__file__).parent))
import vulkan_graphs

# The upstream conv2d_dw.glsl bug (runtime README): a 7x7 depthwise conv with
# padding 3 is wrong in its last 3 output columns, whatever the layouts.
UPSTREAM_WRONG = {"convnext_stack"}
TOLERANCE = 1e-4
# Other kernels (buffer versus texture, other packings) sum in other orders: float rounding may move the
# error against eager by a few percent either way; "no worse than stock" allows that much.
ROUNDING_SLACK = 1.05


def _eager(module, inputs):
    with torch.no_grad():
        return [t.numpy() for t in torch.utils._pytree.tree_leaves(module(*inputs)) if isinstance(t, torch.Tensor)]


def _diff(outputs, expected) -> float:
    return float(max(np.abs(o.astype(np.float64) - e).max() for o, e in zip(outputs, expected)))


# CI runs five of the zoo's twelve on the device, one of each kind (a residual CNN, the upstream-wrong ConvNeXt with its
# depthwise convolutions, a decoder, windowed attention, an encoder-decoder; 12 models took 520 of the suite's 6,494
# test-seconds, and with six CI still took 47 minutes);
# LAYOUT_SOLVER_VULKAN_ZOO=all runs the whole zoo, as does `layout-solver zoo --target vulkan --execute`.
CI_ZOO = ["resnet8", "convnext_stack", "decoder_stack", "swin_like", "unet_like"]
ZOO_ON_DEVICE = list(ZOO) if os.environ.get("LAYOUT_SOLVER_VULKAN_ZOO") == "all" else CI_ZOO


def test_the_ci_sample_of_the_zoo_names_zoo_models():
    assert set(CI_ZOO) <= set(ZOO) and UPSTREAM_WRONG <= set(CI_ZOO)


@pytest.mark.parametrize("model", ZOO_ON_DEVICE)
def test_zoo_model_runs_and_matches_eager_like_stock(runtime, model):
    module, inputs = build(model)
    expected = _eager(module, inputs)
    programs = {
        "stock": lower_vulkan(module, inputs, stock_layouts)[0],
        "solver": lower_vulkan(module, inputs, lambda: solver_layouts(cost_profile="lavapipe"))[0],
    }
    ran = execute(programs, inputs, runtime=runtime, time_runs=False)
    assert ran["stock"].executed, f"stock program does not run: {ran['stock'].error}"
    assert ran["solver"].executed, f"solver program does not run where stock does: {ran['solver'].error}"
    stock, solver = _diff(ran["stock"].outputs, expected), _diff(ran["solver"].outputs, expected)
    if model in UPSTREAM_WRONG:
        # Upstream shader bug: stock is wrong too; the solver must compute exactly what stock computes.
        assert stock > TOLERANCE, f"{model}: the upstream depthwise bug no longer shows; drop it from UPSTREAM_WRONG"
        assert _diff(ran["solver"].outputs, ran["stock"].outputs) <= TOLERANCE
    else:
        assert solver <= max(stock, TOLERANCE) * ROUNDING_SLACK, (
            f"{model}: solver differs from eager by {solver}, stock by {stock}"
        )


# 6 is a buffer-only wide graph (seed % 7 == 6). 8 graphs in CI (22 until the suite took the transformers catalog
# and the Arm bad-input tests, 16 until CI took 41 minutes, 12 until it took 57: the 40-minute budget);
# LAYOUT_SOLVER_VULKAN_GRAPHS=200 runs 200.
SEEDS = list(range(int(os.environ.get("LAYOUT_SOLVER_VULKAN_GRAPHS", "8"))))


def _generated_runs(runtime):
    """Lower every generated graph both ways and run all of them in one batch (one child per crash)."""
    cases = {seed: vulkan_graphs.random_graph(seed) for seed in SEEDS}
    programs, inputs, expected = {}, {}, {}
    for seed, (steps, shape) in cases.items():
        module, example = vulkan_graphs.make(steps, shape, seed)
        expected[seed] = _eager(module, example)
        for side, context in (("stock", stock_layouts), ("solver", lambda: solver_layouts(cost_profile="lavapipe"))):
            programs[(seed, side)] = lower_vulkan(module, example, context)[0]
            inputs[(seed, side)] = example
    names = {key: f"{key[0]}-{key[1]}" for key in programs}
    ran = execute(
        {names[k]: v for k, v in programs.items()},
        {names[k]: v for k, v in inputs.items()},
        runtime=runtime,
        time_runs=False,
    )
    return cases, expected, {key: ran[name] for key, name in names.items()}


def _case_fails(steps, shape, seed, runtime) -> str | None:
    """Why the solver's program is worse than stock's on this graph, or None."""
    module, example = vulkan_graphs.make(steps, shape, seed)
    expected = _eager(module, example)
    programs = {
        "stock": lower_vulkan(module, example, stock_layouts)[0],
        "solver": lower_vulkan(module, example, lambda: solver_layouts(cost_profile="lavapipe"))[0],
    }
    ran = execute(programs, example, runtime=runtime, time_runs=False)
    return _verdict(ran["stock"], ran["solver"], expected)


def _verdict(stock, solver, expected) -> str | None:
    if stock.executed and not solver.executed:
        return f"solver program does not run: {solver.error}"
    if stock.executed and solver.executed:
        s, o = _diff(stock.outputs, expected), _diff(solver.outputs, expected)
        if o > max(s, TOLERANCE) * ROUNDING_SLACK:
            return f"solver differs from eager by {o:.3g}, stock by {s:.3g}"
    return None


# One test for all the generated graphs, lowered and run in one batch: per-seed tests sharing a fixture relied on
# xdist's loadgroup to build it once, and pytest 9.2 broke loadgroup (the batch was built on both workers).
def test_generated_graphs_run_and_match_eager_like_stock(runtime):
    cases, expected, ran = _generated_runs(runtime)
    # The generator reaches what it is meant to: both storages, several packings, wide tensors.
    assert any(shape[-1] > 16384 for _, shape in cases.values())
    assert all(r.executed for (seed, side), r in ran.items() if side == "stock")
    failures = []
    for seed, (steps, shape) in cases.items():
        why = _verdict(ran[(seed, "stock")], ran[(seed, "solver")], expected[seed])
        if why:
            smallest = vulkan_graphs.shrink(
                steps, lambda s, seed=seed, shape=shape: _case_fails(s, shape, seed, runtime) is not None
            )
            failures.append(
                f"seed {seed}: {why}; smallest failing graph: input {shape}, steps {[str(s) for s in smallest]}"
            )
    assert not failures, "\n".join(failures)


def test_issue_reproduction_view_between_storages(runtime):
    """conv -> flatten -> transpose -> 5-D reshape -> permute: the view once read a texture into a buffer."""

    class Repro(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 16, 2, stride=2)

        def forward(self, x):
            y = self.conv(x).flatten(2).transpose(1, 2)
            return y.reshape(1, 4, 4, 2, 8).permute(0, 2, 3, 1, 4)

    torch.manual_seed(0)
    module, inputs = Repro().eval(), (torch.randn(1, 3, 8, 8),)
    programs = {"solver": lower_vulkan(module, inputs, solver_layouts)[0]}
    ran = execute(programs, inputs, runtime=runtime, time_runs=False)
    assert ran["solver"].executed, ran["solver"].error
    assert _diff(ran["solver"].outputs, _eager(module, inputs)) <= TOLERANCE


def test_missing_plugin_and_missing_device_are_clear_errors(runtime, tmp_path, monkeypatch):
    monkeypatch.delenv(ENV_VAR, raising=False)
    with pytest.raises(VulkanRuntimeUnavailable, match="--vulkan-runtime PATH"):
        locate_runtime()
    with pytest.raises(VulkanRuntimeUnavailable, match="does not exist"):
        locate_runtime(tmp_path / "nowhere.so")
    monkeypatch.setenv("VK_ICD_FILENAMES", str(tmp_path / "nonexistent.json"))
    with pytest.raises(VulkanRuntimeUnavailable, match="no Vulkan device"):
        probe(runtime)


def test_a_crashing_program_is_a_record_not_the_end(runtime):
    """A view that reads a texture into a buffer (what the validator now refuses) kills the driver's process:
    the crash is pinned on that program, the other program in the batch still runs."""
    from executorch.backends.vulkan import utils

    from graph_io.vulkan import label_repr
    from layout_solver.lowering.pass_report import collecting_reports
    from layout_solver.vulkan import hooks, passes

    class Unchecked(passes.SolverTagMemoryMetaPass):
        def write_back(self, gm, built, solution):
            super().write_back(gm, built, solution)
            view = next(n for n in gm.graph.nodes if "view_copy" in str(n.target))
            assert utils.get_node_repr(view).storage_type.name == "TEXTURE_3D"
            utils.set_node_repr(view, label_repr("BUFFER:TENSOR_WIDTH_PACKED"))

        def check(self, gm, before):
            pass  # no post-condition: the wrong program reaches the device

    @contextlib.contextmanager
    def unchecked():
        with collecting_reports() as reports, hooks.substituted_pass(Unchecked):
            yield reports

    class Flatten(torch.nn.Module):
        def forward(self, x):
            return torch.relu(torch.relu(x).reshape(1, 8, 32)) + 1.0

    module, inputs = Flatten().eval(), (torch.randn(1, 8, 4, 8),)
    programs = {
        "bad": lower_vulkan(module, inputs, unchecked)[0],
        "good": lower_vulkan(module, inputs, solver_layouts)[0],
    }
    ran = execute(programs, inputs, runtime=runtime, time_runs=False)
    assert ran["good"].executed and _diff(ran["good"].outputs, _eager(module, inputs)) <= TOLERANCE
    assert not ran["bad"].executed and "crashed the process" in ran["bad"].error


def test_a_ratio_outside_the_tolerance_is_read_again_in_fresh_timing_processes(runtime):
    """Two different programs: the first timing process's paired ratio is confirmed by more processes and the
    comparison keeps their median; byte-identical programs are never timed again (their ratio counts as 1)."""
    import statistics

    from layout_solver.targets.vulkan.measure import execute_on_device

    class Double(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) * 2.0

    class SumOfTwo(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) + torch.relu(x)

    inputs = (torch.randn(1, 8, 16, 16),)
    double, twice = (lower_vulkan(m().eval(), inputs, stock_layouts)[0] for m in (Double, SumOfTwo))
    assert double != twice

    def sides():
        return {side: {"modelled_us": 0.0} for side in ("stock", "solver")}

    extra = execute_on_device(Double(), inputs, {"stock": double, "solver": twice}, sides(), runtime, rounds=3,
                              confirm_timings=1, confirm_beyond=-1.0)  # fmt: skip
    assert len(extra["run_ratio_timings"]) == 2
    assert extra["run_ratio_paired"] == pytest.approx(statistics.median(extra["run_ratio_timings"]), abs=1e-4)
    same = execute_on_device(Double(), inputs, {"stock": double, "solver": double}, sides(), runtime, rounds=3,
                             confirm_timings=1, confirm_beyond=-1.0)  # fmt: skip
    assert same["same_program"] and "run_ratio_timings" not in same


def test_compare_cli_executes_on_the_device(runtime, capsys):
    import json

    from layout_solver.cli import main

    tiny = Path(__file__).parents[1] / "models" / "tiny.py"
    code = main(
        [
            "compare",
            f"{tiny}:residual",
            "--target",
            "vulkan",
            "--execute",
            "--vulkan-runtime",
            str(runtime),
            "--cost-profile",
            "lavapipe",
            "--json",
        ]
    )
    assert code == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    for side in ("stock", "solver"):
        assert result[side]["executed"] is True
        assert result[side]["max_abs_diff_vs_eager"] <= TOLERANCE
        assert result[side]["run_ms"] > 0
    assert {"same_program", "run_ratio", "run_ratio_paired", "measured_delta_us", "predicted_delta_us"} <= set(result)
    assert 0 < result["run_ratio_paired"] < 10


def test_compare_cli_without_a_runtime_says_how_to_get_one(capsys, monkeypatch):
    from layout_solver.cli import main

    monkeypatch.delenv(ENV_VAR, raising=False)
    tiny = Path(__file__).parents[1] / "models" / "tiny.py"
    assert main(["compare", f"{tiny}:residual", "--target", "vulkan", "--execute"]) == 2
    err = capsys.readouterr().err
    assert "Vulkan runtime" in err and ENV_VAR in err


def test_runtime_child_is_importable_without_a_device():
    """The child entry point is a module of the package (what `python -m` runs)."""
    out = subprocess.run(
        [sys.executable, "-c", "import layout_solver.targets.vulkan.runtime as r; print(r.LIBRARY_NAME)"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "libvkbackend.so"


def test_calibrate_cli_writes_a_loadable_profile(runtime, tmp_path, capsys):
    """A small calibration on the device: the view op's modes at one 4-D and one batched 3-D shape, written
    as a profile the solver takes."""
    from cost_models.vulkan import load_profile
    from layout_solver.cli import main

    out = tmp_path / "device.json"
    assert (
        main(
            [
                "calibrate",
                "vulkan",
                "--out",
                str(out),
                "--vulkan-runtime",
                str(runtime),
                "--ops",
                "view",
                "--shapes",
                "1x8x32x32,8x16x32",
                "--rounds",
                "3",
                "--no-transitions",
            ]
        )
        == 0
    )
    profile = load_profile(str(out))
    assert profile.measured and profile.device != "unspecified" and "calibrate vulkan" in profile.command
    labels = profile.op_modes["view"]
    assert {"TEXTURE_3D:TENSOR_WIDTH_PACKED", "BUFFER:TENSOR_WIDTH_PACKED"} <= set(labels)
    sizes = 2  # the two shapes asked for
    assert all(c.points == sizes and c.overhead_us + c.us_per_mib + c.us_per_slice > 0 for c in labels.values())
    # Extending: one more shape, its points join the samples and the touched entries are refitted.
    extended = tmp_path / "extended.json"
    assert (
        main(
            [
                "calibrate",
                "vulkan",
                "--out",
                str(extended),
                "--vulkan-runtime",
                str(runtime),
                "--ops",
                "view",
                "--shapes",
                "1x1x128",
                "--extend",
                str(out),
                "--rounds",
                "3",
                "--reference-passes",
                "2",
                "--no-transitions",
            ]
        )
        == 0
    )
    grown = load_profile(str(extended))
    assert all(c.points == sizes + 1 for c in grown.op_modes["view"].values())
    assert grown.command.startswith(profile.command) and "--extend" in grown.command
    # ... measured beside the reference probes, at the extended profile's scale (a day's speed is not a shape's)
    assert "brought to this profile's scale" in grown.notes[-1] and "(today / profile: * " in grown.notes[-1]
    # Rescaling: the reference probes (view in a width-packed texture and buffer, the smallest 4-D shape)
    # re-timed a minute later on the same device: a factor near 1 (the median of their ratios), written into
    # every price and the notes.
    again = tmp_path / "rescaled.json"
    # Two passes over the reference probes, not the default seven: the suite's time (each pass is a device run).
    argv = ["calibrate", "vulkan", "--out", str(again), "--vulkan-runtime", str(runtime), "--rounds", "3",
            "--reference-passes", "2"]  # fmt: skip
    label = "TEXTURE_3D:TENSOR_WIDTH_PACKED"
    # The CLI's plain rescale only: --by-class's factors are test_vulkan's (rescale_factors), each pass a device run.
    assert main([*argv, "--rescale", str(out)]) == 0
    fresh = load_profile(str(again))
    factor = float(re.search(r"\* ([0-9.]+)", fresh.notes[-1]).group(1))
    assert 0.3 < factor < 3 and "rescaled" in fresh.notes[-1] and "--rescale" in fresh.command
    assert "view@" not in fresh.notes[-1]
    assert fresh.op_modes["view"][label].us_per_mib == pytest.approx(
        factor * profile.op_modes["view"][label].us_per_mib, rel=0.01, abs=1e-3
    )
    capsys.readouterr()
    assert main([*argv, "--by-class"]) == 2
    assert "needs --rescale" in capsys.readouterr().err
    assert main([*argv, "--rescale", "mobile-gpu"]) == 2
    assert "not a measured profile" in capsys.readouterr().err
    assert main([*argv, "--rescale", str(out), "--extend", str(out)]) == 2
    assert "one at a time" in capsys.readouterr().err
    assert main(["calibrate", "vulkan", "--ops", "no_such_op"]) == 2
    assert "unknown op classes" in capsys.readouterr().err


def test_profile_times_every_dispatch_and_the_model_prices_the_same_ops(runtime):
    """The runtime's query pool times each shader dispatch: every op of the program is there with the
    tensors it wrote, the dispatches add up to about the program's run time, and the operator names are
    those the cost model's per-op prices use (so one can be held against the other)."""
    from layout_solver.targets.vulkan.runtime import profile

    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.Hardtanh(-float("inf"), 6.0),
        torch.nn.Flatten(),
        torch.nn.Linear(8 * 14 * 14, 10),
    ).eval()
    inputs = (torch.randn(1, 3, 16, 16),)
    program, reports = lower_vulkan(module, inputs, lambda: solver_layouts(cost_profile="lavapipe"))
    found = profile({"p": program, "broken": b"not a program"}, inputs, runtime=runtime, runs=3)
    assert isinstance(found["broken"], str)  # an error for that program, the other still measured
    dispatches = found["p"]
    assert dispatches and all(d.us > 0 for d in dispatches)
    linear = [d for d in dispatches if d.operator == "aten.linear.default" and "nchw" not in d.kernel]
    assert linear and linear[0].tensors[-1][0] == (1, 10)
    modelled = set(reports[0].modelled_us_by_op)
    assert modelled <= {d.operator for d in dispatches}
    timed = min(execute({"p": program}, inputs, runtime=runtime, rounds=5)["p"].run_ms_all) * 1000
    # Same order of magnitude (a unit would be 1000x off): a program of about a millisecond, timed in two child
    # processes on shared cores, reads up to ~2x apart on a quiet CI machine and 16x on one running a benchmark
    # beside the suite (the least disturbed round is taken; other load only adds to the wall time).
    assert 0.05 * timed < sum(d.us for d in dispatches) < 4 * timed


def test_profile_keeps_every_delegates_dispatches(runtime):
    """A program of several delegates (here a mean the Vulkan partitioner leaves on the CPU between two) numbers
    its dispatches per delegate: each delegate's ops are timed, none overwritten by another's of the same id."""
    from layout_solver.targets.vulkan.runtime import profile

    class TwoDelegates(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.before, self.after = torch.nn.Conv2d(3, 8, 3), torch.nn.Linear(8, 4)

        def forward(self, x):
            pooled = torch.sigmoid(self.before(x)).mean((2, 3))  # mean over H, W: the CPU's in 1.5.1
            return self.after(torch.tanh(pooled))

    inputs = (torch.randn(1, 3, 16, 16),)
    program, _ = lower_vulkan(TwoDelegates().eval(), inputs, lambda: stock_layouts("lavapipe"))
    dispatches = profile({"p": program}, inputs, runtime=runtime, runs=3)["p"]
    operators = {d.operator for d in dispatches}
    assert {"aten.convolution.default", "aten.sigmoid.default"} <= operators  # the first delegate's
    assert {"aten.tanh.default", "aten.linear.default"} <= operators  # the second's


def test_a_calibrated_profile_names_the_device(runtime):
    """The device name a profile records comes from the Vulkan loader, not from vulkaninfo (vulkan-tools), which a
    machine with only the loader and a driver lacks."""
    from layout_solver.targets.vulkan.runtime import device_name

    assert device_name() not in ("", "unknown")
