"""The import contracts of the design (pyproject.toml's [tool.importlinter]): the core (problem model, solvers)
imports neither torch, executorch, the adapters nor the service; graph_io and cost_models never import
layout_solver; no import cycles between layout_solver's packages."""

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or shutil.which("lint-imports")
    assert lint, "import-linter is a test dependency (pip install -e '.[test]')"
    run = subprocess.run([lint, "--no-cache"], check=False, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


PACKAGE = ROOT / "layout_solver"
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 100
LONG_BY_NATURE = {("cli.py", "build_parser")}  # an argument parser: one declaration per flag


def _sources():
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def test_no_source_file_over_600_lines_nor_function_over_100():
    import ast

    long_files = [
        f"{p.relative_to(ROOT)}: {n}" for p in _sources() if (n := p.read_text().count("\n")) > MAX_FILE_LINES
    ]
    long_functions = [
        f"{p.relative_to(ROOT)}:{f.lineno} {f.name}: {f.end_lineno - f.lineno + 1} lines"
        for p in _sources()
        for f in ast.walk(ast.parse(p.read_text()))
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
        and f.end_lineno - f.lineno + 1 > MAX_FUNCTION_LINES
        and (p.name, f.name) not in LONG_BY_NATURE
    ]
    assert not long_files and not long_functions, "\n".join(long_files + long_functions)


def test_what_differs_per_target_is_a_method_of_the_target():
    """No family dispatch and no target name outside `layout_solver/targets/`: a backend package may name itself
    (`layout_solver/vulkan/` "vulkan") and the tables of backend packages (provenance, the moved modules) name them all."""
    import ast

    from layout_solver.targets import TARGETS

    backends = {p.name for p in PACKAGE.iterdir() if (p / "passes.py").exists()}
    found = []
    for path in _sources():
        relative = path.relative_to(PACKAGE)
        if relative.parts[0] == "targets":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare) and any(
                isinstance(side, ast.Attribute) and side.attr == "family" for side in [node.left, *node.comparators]
            ):
                found.append(f"{relative}:{node.lineno}: dispatch on a target's family")
            if isinstance(node, ast.Constant) and node.value in TARGETS:
                own = node.value == relative.parts[0] or (
                    node.value in backends and path.name in ("provenance.py", "_moved.py")
                )
                if not own:
                    found.append(f"{relative}:{node.lineno}: target name {node.value!r}")
    assert not found, "\n".join(found)


def test_each_layer_lives_in_its_own_folder():
    """The core, the lowering glue, each backend's passes and each target's measuring code: one folder each."""
    assert {p.name for p in (PACKAGE / "core").glob("*.py")} >= {"problem.py", "solve.py", "model.py", "evaluate.py"}
    assert (PACKAGE / "core" / "solvers").is_dir()
    assert {p.name for p in (PACKAGE / "lowering").glob("*.py")} >= {"solver_pass.py", "pass_report.py", "client.py"}
    for backend in ("arm", "vulkan", "xnnpack"):
        assert (PACKAGE / backend / "passes.py").exists()
    for target in ("ethos_u", "vulkan", "xnnpack"):
        assert (PACKAGE / "targets" / target / "measure.py").exists()
    loose = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert loose == ["__init__.py", "_moved.py", "cli.py"], loose
