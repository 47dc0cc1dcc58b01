import json
import subprocess
import sys

import pytest

from layout_solver.cli import bundled_example, main
from layout_solver.core.synthetic import random_problem


def test_solve_json(tmp_path, capsys):
    out = tmp_path / "solution.json"
    assert main(["solve", str(bundled_example()), "--json", "--out", str(out)]) == 0
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["status"] == "optimal" and printed["gap"] == 0
    assert json.loads(out.read_text())["objective"] == printed["objective"]


def test_solve_summary(capsys):
    assert main(["solve", str(bundled_example("transformer_like")), "--time-limit", "20"]) == 0
    text = capsys.readouterr().out
    for word in ("objective", "bound", "gap", "transitions", "timings"):
        assert word in text


def test_bad_file_names_the_problem(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(
        json.dumps(
            {
                "values": [{"id": "x", "domain": ["A"]}],
                "ops": [
                    {
                        "id": "relu",
                        "operands": ["nope"],
                        "results": [],
                        "modes": [{"name": "m", "operands": ["A"], "results": []}],
                    }
                ],
            }
        )
    )
    assert main(["solve", str(bad)]) == 2
    assert "unknown value 'nope'" in capsys.readouterr().err


def test_missing_file(capsys):
    assert main(["solve", "/nonexistent/p.json"]) == 2
    assert "cannot read" in capsys.readouterr().err


def test_infeasible_exit_code(tmp_path, capsys):
    problem = {
        "values": [{"id": "x", "domain": ["A", "B"]}, {"id": "y", "domain": ["A", "B"], "fixed": "B"}],
        "ops": [
            {
                "id": "conv",
                "operands": ["x"],
                "results": ["y"],
                "modes": [{"name": "m", "operands": ["A"], "results": ["A"]}],
            }
        ],
    }
    path = tmp_path / "p.json"
    path.write_text(json.dumps(problem))
    assert main(["solve", str(path)]) == 3
    assert "conv" in capsys.readouterr().err


def test_console_script_installed(tmp_path):
    path = tmp_path / "p.json"
    path.write_text(random_problem(1, n_ops=4).model_dump_json())
    result = subprocess.run(
        [sys.executable, "-m", "layout_solver.cli", "solve", str(path), "--json"],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode in (0, 3), result.stderr


def test_method_weights_are_checked_before_lowering(capsys):
    assert main(["compare", "resnet8", "--target", "vulkan", "--method-weights", "decode=1"]) == 2
    assert "multi-method models" in capsys.readouterr().err
    for bad in ("decode=-1", "decode", "=3", "decode=nan"):
        try:
            main(["compare", "decoder_kv", "--target", "vulkan", "--method-weights", bad])
        except SystemExit as exc:
            assert exc.code == 2
        else:
            raise AssertionError(f"--method-weights {bad} was accepted")
        assert "method-weights" in capsys.readouterr().err


def test_calibration_is_the_targets_own(tmp_path):
    """Calibration is a method of the target: Vulkan measures a device profile; a target its compiler
    prices for each compile spec says it has nothing to calibrate, before any lowering."""
    from layout_solver.targets import get_target

    with pytest.raises(ValueError, match="nothing to calibrate"):
        get_target("ethos-u55-128").calibrate(tmp_path / "profile.json")
    with pytest.raises(ValueError, match="unknown op classes"):
        get_target("vulkan").calibrate(tmp_path / "profile.json", ops=["no_such_op"])
    with pytest.raises(ValueError, match="not a directory"):
        get_target("vulkan").calibrate(tmp_path / "missing" / "profile.json")


def test_cost_query_is_priced_by_the_target(capsys):
    """`cost transpose` asks the registered target: moved bytes for TOSA INT (none for a reshape-like identity),
    and a target without a cost model of that kind says so."""
    assert main(["cost", "transpose", "--target", "tosa-int", "--shape", "1,4,8,2", "--perm", "0,2,3,1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["bytes_moved"] == 4 * 8 * 2
    assert main(["cost", "transpose", "--target", "tosa-int", "--shape", "3,5", "--perm", "0,1", "--json"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["bytes_moved"] == 0
    assert main(["cost", "transpose", "--target", "tosa-int", "--shape", "3,5", "--perm", "1,0", "--dtype", "x"]) == 2
    assert "a transpose on TOSA takes one of" in capsys.readouterr().err
