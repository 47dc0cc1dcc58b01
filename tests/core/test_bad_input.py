"""No traceback, ever: malformed problems and CLI arguments end in exit 0, 2 or 3 with a message."""

from __future__ import annotations

import contextlib
import copy
import io
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from layout_solver.cli import bundled_example, main

VALID = json.loads(bundled_example("resnet_like").read_text())


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:  # argparse's own usage errors
            code = exc.code
    return code, out.getvalue(), err.getvalue()


def assert_clean(code: int, out: str, err: str) -> None:
    assert code in (0, 2, 3), (code, err)
    assert "Traceback" not in out + err
    if code:
        assert err.strip(), "an error exit needs a message"


@pytest.mark.parametrize(
    "text, words",
    [
        ('{"values": [], "ops": [], "ops": []}', "duplicate JSON key"),
        ('{"schema_version": 7, "values": [], "ops": []}', "schema_version"),
        (
            (
                '{"values": [{"id": "a", "domain": ["X"]}], "ops": [{"id": "o", "operands": ["a"], "results": ["a"], '
                '"modes": [{"name": "m", "operands": ["X"], "results": ["X"]}]}]}'
            ),
            "cycle: o -> o",
        ),
        (
            (
                '{"values": [{"id": "a", "domain": ["X"], "kind": "input"}, {"id": "b", "domain": ["X"]}], "ops": [{"id": "o", '
                '"operands": ["a"], "results": ["b"], "modes": [{"name": "m", "operands": ["X"], "results": ["X"], '
                '"cost": 1e999}]}]}'
            ),
            "op 'o' mode 'm' cost: Input should be a finite number",
        ),
        (
            (
                '{"values": [{"id": "a", "domain": ["X", "Y"]}], "ops": [], "transition_costs": [{"value": "a", "src": "X", '
                '"dst": "Y", "cost": 1e200}]}'
            ),
            "less than or equal to 1000000000000000",
        ),
        (
            (
                '{"values": [{"id": "a", "domain": ["X", "Y"]}], "ops": [], "transition_costs": [{"value": "a", "src": "X", '
                '"dst": "Y", "cost": 1}, {"value": "a", "src": "X", "dst": "Y", "cost": 2}]}'
            ),
            "given twice",
        ),
        ('{"values": [], "ops": [], "default_cost_per_byte": Infinity}', "non-finite"),
    ],
)
def test_bad_problems_are_named(tmp_path, text, words):
    path = tmp_path / "p.json"
    path.write_text(text)
    code, out, err = run_cli(["solve", str(path)])
    assert code == 2 and words in err, err
    assert_clean(code, out, err)


def test_bad_paths_and_limits(tmp_path):
    good = str(bundled_example("resnet_like"))
    (tmp_path / "bad.json").write_bytes(b"\xff\xfe")
    for argv, words in (
        (["solve", str(tmp_path / "bad.json")], "not UTF-8"),
        (["solve", str(tmp_path / "missing.json")], "cannot read"),
        (["solve", str(tmp_path)], "cannot read"),
        (["solve", good, "--out", str(tmp_path / "no" / "x.json")], "does not exist"),
        (["solve", good, "--out", good], "refusing to overwrite the input"),
        (["solve", good, "--out", str(tmp_path)], "is a directory"),
        (["solve", good, "--time-limit", "inf"], "positive finite"),
        (["solve", good, "--time-limit", "nan"], "positive finite"),
        (["solve", good, "--time-limit", "-1"], "positive finite"),
        (["solve", good, "--workers", "0"], "--workers"),
        (["cost", "transpose", "--shape", "1,16,32,64"], "needs a permutation"),
        (["cost", "transpose", "--shape", "1,-2,3", "--perm", "0,2,1"], ">= 1"),
        (["cost", "transpose", "--shape", "1000000,1000000,1000000", "--perm", "0,2,1"], "above the limit"),
        (["cost", "transpose", "--shape", "2,3", "--perm", "0,0"], "not a permutation"),
        (["cost", "transpose", "--target", "vulkan", "--shape", "4", "--src", "NOPE"], "not a Vulkan representation"),
        (["cost", "transpose", "--target", "vulkan", "--shape", "4", "--perm", "0"], "perm means nothing"),
        (
            ["cost", "transpose", "--shape", "2,3", "--perm", "1,0", "--src", "BUFFER:TENSOR_WIDTH_PACKED"],
            "Vulkan options",
        ),
    ):
        code, out, err = run_cli(argv)
        assert code == 2 and words in err, (argv, err)
        assert_clean(code, out, err)
    # The output is written atomically and only after a successful solve.
    target = tmp_path / "solution.json"
    assert run_cli(["solve", good, "--out", str(target), "--time-limit", "5"])[0] == 0
    assert json.loads(target.read_text())["status"] == "optimal"
    assert not list(tmp_path.glob(".solution.json.*"))


def test_compare_turns_every_factory_failure_into_a_named_error(tmp_path):
    models = tmp_path / "m.py"
    models.write_text(
        "import torch\n"
        "def raises():\n    raise RuntimeError('boom')\n"
        "def exits():\n    import sys; sys.exit(3)\n"
        "def wrong():\n    return 42\n"
        "def not_tensors():\n    return torch.nn.ReLU(), ('x',)\n"
    )
    (tmp_path / "broken.py").write_text("def f(:\n")
    for spec, words in (
        (f"{models}:raises", "raised RuntimeError: boom"),
        (f"{models}:exits", "raised SystemExit"),
        (f"{models}:wrong", "must return"),
        (f"{models}:not_tensors", "must be tensors"),
        (f"{models}:missing", "no callable 'missing'"),
        (f"{tmp_path / 'broken.py'}:f", "SyntaxError"),
        (f"{tmp_path / 'none.py'}:f", "not found"),
        ("no_such_model", "unknown model"),
    ):
        code, out, err = run_cli(["compare", spec, "--target", "vulkan"])
        assert code == 2 and words in err and spec.split(":")[0].split("/")[-1] in err, (spec, err)
        assert_clean(code, out, err)


# --- fuzzing: mutated problems and arguments -------------------------------------------------------------------

ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**20), 10**20),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.just([]),
    st.just({}),
    st.just(["X"]),
    st.just(1e308),
)


@st.composite
def mutated_problems(draw) -> str:
    data = copy.deepcopy(VALID)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["set", "delete", "duplicate", "self_loop", "rename"]))
        section = draw(st.sampled_from(["values", "ops", "transition_costs"]))
        items = data.get(section)
        if not isinstance(items, list) or not items:
            data[section] = copy.deepcopy(draw(ODD))
            continue
        i = draw(st.integers(0, len(items) - 1))
        item = items[i]
        if kind == "duplicate":
            items.append(copy.deepcopy(item))
        elif not isinstance(item, dict) or not item:
            items[i] = copy.deepcopy(draw(ODD))
        elif kind == "set":
            item[draw(st.sampled_from(sorted(item)))] = copy.deepcopy(draw(ODD))
        elif kind == "delete":
            del item[draw(st.sampled_from(sorted(item)))]
        elif (
            kind == "self_loop" and section == "ops" and item.get("results") and isinstance(item.get("operands"), list)
        ):
            item["operands"] = [*item["operands"], item["results"][0]]
        elif kind == "rename" and "id" in item:
            item["id"] = draw(st.sampled_from([v.get("id") for v in items if isinstance(v, dict)] + ["zz"]))
    text = json.dumps(data, allow_nan=True)
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(text)))
        text = text[:cut] if draw(st.booleans()) else text.replace('"', "'", 1)
    return text


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)
@given(text=mutated_problems())
def test_fuzzed_problems_exit_cleanly(tmp_path, text):
    path = tmp_path / "fuzz.json"
    path.write_text(text)
    assert_clean(*run_cli(["solve", str(path), "--time-limit", "2", "--workers", "1"]))


WORDS = [
    "solve",
    "cost",
    "transpose",
    "schema",
    "--shape",
    "--perm",
    "--time-limit",
    "--out",
    "--target",
    "vulkan",
    "ethos-u55-128",
    "--dtype",
    "int8",
    "float64",
    "1,2,3",
    "0,2,1",
    "-1",
    "inf",
    "nan",
    "0",
    "x",
    "--json",
    "--src",
    "--dst",
    "BUFFER:TENSOR_WIDTH_PACKED",
    "problem",
    "--form",
    "as_given",
    "--workers",
    "2",
]


@settings(max_examples=150, deadline=None)
@given(argv=st.lists(st.sampled_from(WORDS), min_size=1, max_size=8))
def test_fuzzed_arguments_exit_cleanly(argv):
    if argv[0] == "solve":
        argv = ["solve", str(bundled_example("resnet_like")), *argv[1:]]
    if "--out" in argv:
        return  # writing files is covered above
    assert_clean(*run_cli(argv))
