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
