"""The TOSA INT target (`layout_solver.targets.tosa`): a target added as one module and one registration,
measured as every target is: stock against the stage, both lowered from one int8 program, on the TOSA
reference model."""

import json
from pathlib import Path

from layout_solver.targets import get_target

TINY = Path(__file__).parents[1] / "models" / "tiny.py"


def test_registered_with_its_own_measure():
    target = get_target("tosa-int")
    assert target.family == "tosa" and target.headline == ("transition_cost",)
    assert target.options == frozenset()  # no compiler, no device: nothing to choose


def test_compare_on_the_reference_model(capsys):
    """The stage writes fewer transposes moving fewer bytes, and both programs compute the same outputs
    bit for bit on the reference model."""
    from layout_solver.cli import main

    assert main(["compare", f"{TINY}:residual", "--target", "tosa-int", "--json"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    stock, solver = result["stock"], result["solver"]
    assert result["equivalent"] is True and result["stock_reference"] == result["solver_reference"] == "ok"
    assert solver["pricing"] == "moved-bytes"
    assert solver["tosa_transposes"] <= stock["tosa_transposes"]
    assert solver["transition_cost"] <= stock["transition_cost"]
    assert stock["eager_check"] == solver["eager_check"] == "ok"


def test_options_of_other_targets_are_refused(capsys):
    from layout_solver.cli import main

    assert main(["compare", f"{TINY}:residual", "--target", "tosa-int", "--execute"]) == 2
    assert "Vulkan options" in capsys.readouterr().err


def test_the_zoo_report_has_a_section_from_what_the_target_measures(tmp_path):
    """A target with no hand-written report table gets one from its own measures (`Target.row_fields`)."""
    from layout_solver.cli import main

    assert (
        main(["zoo", "--models", f"{TINY}:residual", "--target", "tosa-int", "--jobs", "1", "--out", str(tmp_path)])
        == 0
    )
    report = (tmp_path / "report.md").read_text()
    section = report[report.index("## TOSA 1.0 INT (no compiler; moved bytes): tosa-int") :]
    assert "| transition_cost stock / solver |" in section and "| 512.0 / 256.0 |" in section
