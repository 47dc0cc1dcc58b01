"""The tuning notebooks execute (small configuration), so they never rot."""

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"
TINY = Path(__file__).parents[1] / "models" / "tiny.py"


@pytest.mark.parametrize(
    "name", ["calibrate_ethos_u55", "vulkan_cost_model", "vulkan_device", "zoo_report", "arm_pricing"]
)
def test_notebook_executes(name, tmp_path, monkeypatch):
    if name == "vulkan_device" and not os.environ.get("LAYOUT_SOLVER_VULKAN_RUNTIME"):
        if os.environ.get("CI"):
            pytest.fail("CI must run the Vulkan device notebook: LAYOUT_SOLVER_VULKAN_RUNTIME is not set")
        pytest.skip("needs the Vulkan runtime plugin (LAYOUT_SOLVER_VULKAN_RUNTIME)")
    monkeypatch.delenv("LAYOUT_SOLVER_FULL", raising=False)
    monkeypatch.setenv("ZOO_REPORT_OUT", str(tmp_path / "zoo"))
    monkeypatch.setenv("ZOO_REPORT_MODEL", f"{TINY}:residual")
    monkeypatch.setenv("ARM_PRICING_MODELS", str(TINY))
    monkeypatch.setenv("PYTHONPATH", str(NOTEBOOKS.parent) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    nb = nbformat.read(NOTEBOOKS / f"{name}.ipynb", as_version=4)
    NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs)  # every notebook plots something
