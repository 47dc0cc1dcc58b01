"""Problem model: validation errors that name the culprit, lossless JSON."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from layout_solver import InfeasibleError, Mode, Op, Problem, ProblemError, Value, solve
from layout_solver.core.synthetic import random_problem, transformer_like


def _value(vid, domain=("A", "B"), **kw):
    return Value(id=vid, shape=[2, 3], size_bytes=6, domain=list(domain), **kw)


def _op(oid, operands, results, modes):
    return Op(
        id=oid,
        operands=operands,
        results=results,
        modes=[Mode(name=f"m{i}", operands=list(o), results=list(r)) for i, (o, r) in enumerate(modes)],
    )


def test_unknown_value_is_named():
    with pytest.raises(ValidationError, match="op 'relu' refers to unknown value 'ghost'"):
        Problem(values=[_value("x")], ops=[_op("relu", ["ghost"], ["x"], [(["A"], ["A"])])])


def test_empty_domain_rejected():
    with pytest.raises(ValidationError, match="domain"):
        Value(id="x", domain=[])


def test_mode_label_outside_domain_is_named():
    with pytest.raises(ValidationError, match="op 'conv' mode 'm0' wants value 'x' in 'C'"):
        Problem(values=[_value("x"), _value("y")], ops=[_op("conv", ["x"], ["y"], [(["C"], ["A"])])])


def test_fixed_label_outside_domain_rejected():
    with pytest.raises(ValidationError, match="value 'x': fixed label 'C'"):
        _value("x", fixed="C")


def test_value_produced_twice_is_named():
    with pytest.raises(ValidationError, match="value 'y' is produced by both 'a' and 'b'"):
        Problem(
            values=[_value("x"), _value("y")],
            ops=[_op("a", ["x"], ["y"], [(["A"], ["A"])]), _op("b", ["x"], ["y"], [(["A"], ["A"])])],
        )


def test_dynamic_shape_rejected():
    with pytest.raises(ValidationError, match="dynamic shapes"):
        Value(id="x", shape=[-1, 4], domain=["A"])


def test_mode_arity_checked():
    with pytest.raises(ValidationError, match="op 'add': mode 'm0' labels 1 operands"):
        _op("add", ["x", "y"], ["z"], [(["A"], ["A"])])


def test_infeasible_names_op_and_value():
    problem = Problem(
        values=[_value("x"), _value("y", fixed="B")],
        ops=[_op("conv", ["x"], ["y"], [(["A"], ["A"])])],
    )
    with pytest.raises(InfeasibleError) as info:
        solve(problem)
    assert info.value.ops == ["conv"]
    assert info.value.values == ["y"]
    assert "value 'y' must be ['B'] but op 'conv' can only produce ['A']" in str(info.value)


def test_infeasible_multi_result_op():
    problem = Problem(
        values=[_value("x"), _value("y", fixed="A"), _value("z", fixed="B")],
        ops=[_op("split", ["x"], ["y", "z"], [(["A"], ["A", "A"]), (["B"], ["B", "B"])])],
    )
    with pytest.raises(InfeasibleError, match="op 'split': no single mode"):
        solve(problem)


def test_problem_error_is_a_value_error():
    assert issubclass(ProblemError, ValueError) and issubclass(InfeasibleError, ProblemError)


@pytest.mark.parametrize("problem", [random_problem(3, n_ops=6, p_fixed=0.0), transformer_like(2, 4)])
def test_problem_and_solution_json_round_trip(problem):
    again = Problem.model_validate_json(problem.model_dump_json())
    assert again == problem
    solution = solve(problem)
    from layout_solver import Solution

    assert Solution.model_validate_json(solution.model_dump_json()) == solution


def test_shared_constant_across_graphs_gets_one_label():
    # Two methods of one program share a weight; only the weight's label is shared.
    w = Value(id="w", domain=["A", "B"], size_bytes=100, kind="constant")
    x1, x2 = _value("x1", fixed="A"), _value("x2", fixed="B")
    y1, y2 = _value("y1"), _value("y2")
    ops = [
        Op(
            id="f.mm",
            graph="forward",
            operands=["x1", "w"],
            results=["y1"],
            modes=[Mode(name="a", operands=["A", "A"], results=["A"])],
        ),
        Op(
            id="g.mm",
            graph="encode",
            operands=["x2", "w"],
            results=["y2"],
            modes=[Mode(name="b", operands=["B", "B"], results=["B"])],
        ),
    ]
    priced = Problem(values=[w, x1, x2, y1, y2], ops=ops, price_constants=True)
    solution = solve(priced)
    assert solution.labels["w"] in ("A", "B")
    assert len(solution.transitions) == 1 and solution.transitions[0].value == "w"
    assert solution.objective == 100
    folded = solve(Problem(values=[w, x1, x2, y1, y2], ops=ops))
    assert folded.objective == 0  # constants' transitions fold at compile time


def test_core_does_not_import_torch():
    code = (
        "import sys, layout_solver, layout_solver.cli, layout_solver.core.solve, layout_solver.core.synthetic, layout_solver.core.multimethod;"
        "from layout_solver.core.synthetic import cnn_like; layout_solver.solve(cnn_like(2));"
        "bad = [m for m in ('torch', 'executorch') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_service_layers_import_what_they_need_only():
    """The client the passes use needs only the standard library; the server and pool need no torch."""
    code = (
        "import sys, layout_solver.lowering.client, cost_models.query;"
        "bad = [m for m in ('fastapi', 'uvicorn', 'pebble', 'prometheus_client', 'torch') if m in sys.modules];"
        "assert not bad, bad;"
        "import layout_solver.service.app, layout_solver.service.pool;"
        "bad = [m for m in ('torch', 'executorch') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_parse_problem_rejects_what_json_would_silently_accept():
    from layout_solver.core.problem import parse_problem

    for raw, words in (
        (b'{"values": [], "ops": [], "ops": []}', "duplicate JSON key 'ops'"),
        (b'{"values": [], "ops": [], "default_cost_per_byte": Infinity}', "non-finite number Infinity"),
        (b"\xff", "not UTF-8"),
        (b"null", "expected a JSON object"),
    ):
        with pytest.raises(ProblemError, match=words):
            parse_problem(raw, "p.json")


def test_problem_digest_ignores_the_name_only():
    from layout_solver.core.problem import problem_digest
    from layout_solver.core.synthetic import cnn_like

    a, b = cnn_like(3), cnn_like(3)
    b.name = "renamed"
    assert problem_digest(a) == problem_digest(b)
    assert problem_digest(a) != problem_digest(cnn_like(3, channels=16))


def test_schema_is_json_schema():
    from layout_solver.cli import main

    assert main(["schema", "problem"]) == 0


def test_schema_mentions_every_field(capsys):
    from layout_solver.cli import main

    main(["schema"])
    schema = json.loads(capsys.readouterr().out)
    assert set(schema) == {"problem", "solution"}
    assert {"values", "ops", "transition_costs"} <= set(schema["problem"]["properties"])
    assert {"objective", "bound", "gap", "transitions", "timings"} <= set(schema["solution"]["properties"])


def _project_imports():
    """The project's import graph read from source (every import statement, lazy ones included)."""
    import ast

    import networkx as nx

    root = Path(__file__).resolve().parents[2]
    modules = {}
    for package in ("layout_solver", "cost_models", "graph_io"):
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([base] if base else []))
                targets = [f"{base}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def test_no_import_cycles_among_the_projects_modules():
    """layout_solver, cost_models and graph_io import each other in one direction only (lazy imports too)."""
    import networkx as nx

    graph = _project_imports()
    assert len(graph) > 30
    assert list(nx.simple_cycles(graph)) == []
    # cost models are priced by the library, never the other way round; graph_io knows no solver
    assert not [
        e for e in graph.edges if e[0].startswith("cost_models") and e[1].startswith(("layout_solver", "graph_io"))
    ]
    assert not [e for e in graph.edges if e[0].startswith("graph_io") and e[1].startswith("layout_solver")]


def test_the_lowering_path_does_not_import_the_measurement_harness():
    """What runs inside a user's lowering (the passes, their rules and hooks) reaches neither the
    measurement code (quantize, Vela runs, reference model, comparisons, the zoo) nor calibration."""
    import networkx as nx

    graph = _project_imports()
    lowering = [
        "layout_solver.arm.hooks",
        "layout_solver.arm.passes",
        "layout_solver.vulkan.hooks",
        "layout_solver.vulkan.passes",
    ]
    harness = (
        "layout_solver.targets.ethos_u.measure",
        "layout_solver.targets.ethos_u.equivalence",
        "layout_solver.arm.compare",
        "layout_solver.compare",
        "layout_solver.zoo",
        "layout_solver.targets.vulkan.runtime",
        "layout_solver.targets.vulkan.calibrate",
        "cost_models.calibration",
    )
    reached = set().union(*(nx.descendants(graph, m) for m in lowering))
    assert not sorted(m for m in reached if m.startswith(harness))


def test_cost_models_import_without_torch():
    code = (
        "import sys, cost_models.vulkan, cost_models.ethos_u55, cost_models.query;"
        "bad = [m for m in ('torch', 'executorch') if m in sys.modules]; assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_library_imports_without_the_zoo_extra():
    """ray, matplotlib and tqdm belong to the `zoo` extra: the library and the CLI load without them, and
    `zoo` names what is missing."""
    code = (
        "import sys\n"
        "for name in ('ray', 'matplotlib', 'tqdm'): sys.modules[name] = None  # as if not installed\n"
        "import layout_solver, cost_models, cost_models.vulkan, layout_solver.cli, layout_solver.compare\n"
        "import layout_solver.vulkan.passes, layout_solver.arm.passes, layout_solver.zoo.runner\n"
        "from layout_solver.cli import main\n"
        "assert main(['zoo', '--models', 'resnet8', '--target', 'vulkan']) == 2\n"
    )
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "pip install 'layout-solver[zoo]'" in out.stderr


def _undocumented(path: Path, body, prefix: str = "") -> list[str]:
    """Public functions and classes under `body` without a docstring, as "path:line Qualified.name"."""
    import ast

    overrides = {"forward", "call", "call_operator"}
    rule_hooks = {"operands", "seed", "propagate", "modes", "applies", "cost"}
    found = []
    for node in body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if node.name.startswith("_") or node.name in overrides:
            continue
        rule_hook = path.name == "op_rules.py" and prefix != "OpRule." and node.name in rule_hooks
        if not ast.get_docstring(node) and not rule_hook:
            found.append(f"{path}:{node.lineno} {prefix}{node.name}")
        if isinstance(node, ast.ClassDef):
            found += _undocumented(path, node.body, f"{prefix}{node.name}.")
    return found


def test_every_public_function_and_class_has_a_docstring():
    """The library's public names say what they take and return. Exempt: overrides of a documented base
    method (torch's forward, a pass's call / call_operator, an Arm op rule's hooks, documented on OpRule)."""
    import ast

    root = Path(__file__).resolve().parents[2]
    missing = [
        entry
        for package in ("layout_solver", "cost_models", "graph_io")
        for path in sorted((root / package).rglob("*.py"))
        for entry in _undocumented(path.relative_to(root), ast.parse(path.read_text()).body)
    ]
    assert not missing, "\n".join(missing)


def test_a_problem_priced_again_is_the_problem_validated_at_those_prices():
    """`with_costs` skips re-validating the structure; the result is what validating the same problem at the new
    prices gives, and a price out of range is refused with its op or value named."""
    import random

    problem = random_problem(5, n_ops=8, p_fixed=0.0)
    rng = random.Random(5)
    mode_costs = [[round(rng.uniform(0, 40), 3) for _ in op.modes] for op in problem.ops]
    domains = {v.id: v.domain for v in problem.values}
    transitions = {
        (v, s, d): round(rng.uniform(0, 9), 3) for v, dom in domains.items() for s in dom for d in dom if s != d
    }
    repriced = problem.with_costs(mode_costs, transitions, 0.5, name="again")
    data = problem.model_dump()
    data.update(name="again", default_cost_per_byte=0.5)
    for op, costs in zip(data["ops"], mode_costs):
        for mode, cost in zip(op["modes"], costs):
            mode["cost"] = cost
    data["transition_costs"] = [{"value": v, "src": s, "dst": d, "cost": c} for (v, s, d), c in transitions.items()]
    assert repriced == Problem.model_validate(data)
    repriced.values[0].fixed = repriced.values[0].domain[0]  # a caller pins a value of the copy: not the original's
    repriced.ops[0].modes[0].cost = 123.0
    assert problem.values[0].fixed is None and problem.ops[0].modes[0].cost != 123.0
    assert problem.with_costs([[m.cost for m in op.modes] for op in problem.ops], problem.transition_table()) == problem
    bad = [list(costs) for costs in mode_costs]
    bad[2][0] = float("nan")
    with pytest.raises(ProblemError, match=f"op '{problem.ops[2].id}'"):
        problem.with_costs(bad, transitions)
    value = problem.values[0]
    with pytest.raises(ProblemError, match=f"transition of '{value.id}'"):
        problem.with_costs(mode_costs, {(value.id, value.domain[0], "NOT_A_LABEL"): 1.0})
    with pytest.raises(ProblemError, match="ops priced"):
        problem.with_costs(mode_costs[:-1], transitions)


def test_a_problem_priced_again_prices_its_transitions_as_given_and_evaluates_as_the_original():
    """`with_costs` builds its transition list from prices it checked itself (no second validation): the listed
    prices are the ones given, a price out of range or a label outside the value's domain is refused by name, and
    an assignment evaluated on the problem priced at its own prices costs what it costs on the original (the
    evaluation reads the listed prices of the values it moves only)."""
    from layout_solver.core.evaluate import TransitionPricer, evaluate

    base = transformer_like(2)
    listed = [(v.id, v.domain[0], v.domain[1]) for v in base.values if len(v.domain) > 1][:6]
    problem = Problem.model_validate(
        {**base.model_dump(), "transition_costs": [{"value": v, "src": s, "dst": d, "cost": 3.0 + k}
                                                   for k, (v, s, d) in enumerate(listed)]}
    )  # fmt: skip
    table = problem.transition_table()
    again = problem.with_costs([[m.cost for m in op.modes] for op in problem.ops], table)
    assert len(table) == 6 and again.transition_table() == table
    assert again.transition_costs[0] is not problem.transition_costs[0]
    assert Problem.model_validate(again.model_dump()) == again  # what it built is what validation would build
    solution = solve(problem, time_limit=5)
    for p in (problem, again):
        assert evaluate(p, solution.modes, solution.labels).objective == pytest.approx(solution.objective, abs=1e-9)
    (value, src, dst), cost = next(iter(table.items()))
    with pytest.raises(ProblemError, match=value):
        problem.with_costs([[m.cost for m in op.modes] for op in problem.ops], {(value, src, dst): -1.0})
    with pytest.raises(ProblemError, match=value):
        problem.with_costs([[m.cost for m in op.modes] for op in problem.ops], {(value, src, "nowhere"): 1.0})
    pricer = TransitionPricer(problem, frozenset({value}))
    assert pricer(value, src, dst) == cost
    other = next(v.id for v in problem.values if v.id != value)
    with pytest.raises(KeyError, match=other):
        pricer(other, src, dst)
