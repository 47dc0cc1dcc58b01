"""A target's source digest (the zoo's and the Arm decision caches' keys) leaves out the other backends' code and
the report's: checked here against what a zoo job on each backend really imports and opens, read by an audit hook
in a fresh process, not against provenance's own lists."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from layout_solver.lowering import provenance
from layout_solver.lowering.provenance import BACKEND_CODE, ROOT, foreign_code
from layout_solver.targets import TARGETS

# One zoo job in a fresh process, as a zoo worker runs it (`run_job`: the model built, stock and solver lowered and
# measured, the record made); prints the project files it imported or opened (compiled modules by their source).
AUDITED_JOB = r"""
import json, sys
from pathlib import Path

root, model, target = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
opened = set()

def record(event, args):
    if event == "open" and args and isinstance(args[0], (str, bytes)):
        opened.add(args[0].decode() if isinstance(args[0], bytes) else args[0])

sys.addaudithook(record)
from layout_solver.zoo.runner import Job, run_job

result = run_job(Job(model, target))
assert result["status"] == "ok", result
files = set(opened) | {m.__file__ for m in list(sys.modules.values()) if getattr(m, "__file__", None)}
read = set()
for name in files:
    path = Path(name).resolve()
    if path.parent.name == "__pycache__":  # a compiled module stands for its source
        path = path.parent.parent / (path.name.split(".")[0] + ".py")
    if path.is_relative_to(root) and ".venv" not in path.parts:
        read.add(path.relative_to(root).as_posix())
print(json.dumps(sorted(read)))
"""

MODEL = """
import torch


class ConvThenLinear(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3)
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.linear(torch.relu(self.conv(x)).permute(0, 2, 3, 1))


def conv_then_linear():
    return ConvThenLinear().eval(), (torch.randn(1, 3, 8, 8),)
"""


def _inside(relative: str, paths) -> bool:
    return any(relative == p or relative.startswith(p + "/") for p in paths)


def test_every_backends_code_exists_and_every_target_names_a_known_backend():
    for backend, paths in BACKEND_CODE.items():
        for path in paths:
            assert (ROOT / path).exists(), f"{backend}: {path} does not exist"
    assert {t.backend for t in TARGETS.values()} <= set(BACKEND_CODE)
    with pytest.raises(ValueError, match="unknown backend 'npu'"):
        foreign_code("npu")


def test_a_backends_change_moves_its_own_digest_and_not_the_others(tmp_path, monkeypatch):
    for package in ("layout_solver", "cost_models", "graph_io"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(provenance, "ROOT", tmp_path)
    digest = provenance.source_digest.__wrapped__  # uncached: the copy changes under it

    def digests():
        return {backend: digest(backend) for backend in (None, "arm", "vulkan")}

    before = digests()
    with (tmp_path / "layout_solver/vulkan/problem_builder.py").open("a") as rules:
        rules.write("# a Vulkan rule changed\n")
    after_vulkan = digests()
    assert after_vulkan["arm"] == before["arm"]
    assert after_vulkan["vulkan"] != before["vulkan"] and after_vulkan[None] != before[None]
    with (tmp_path / "cost_models/data/ethos_u55_v2.json").open("a") as data:
        data.write("\n")
    after_arm = digests()
    assert after_arm["vulkan"] == after_vulkan["vulkan"] and after_arm["arm"] != after_vulkan["arm"]
    with (tmp_path / "layout_solver/core/solvers/cpsat.py").open("a") as shared:
        shared.write("# a solver changed\n")
    after_shared = digests()
    assert all(v != after_arm[k] for k, v in after_shared.items())  # shared code is in every digest
    with (tmp_path / "layout_solver/zoo/report.py").open("a") as report:
        report.write("# the report reads differently\n")
    after_report = digests()
    assert after_report["arm"] == after_shared["arm"] and after_report["vulkan"] == after_shared["vulkan"]


@pytest.mark.parametrize("target", ["ethos-u55-128", "vulkan", "xnnpack"])
def test_a_zoo_job_reads_none_of_the_code_its_digest_leaves_out(target, tmp_path):
    backend = TARGETS[target].backend
    (tmp_path / "model.py").write_text(MODEL)
    env = {"LAYOUT_SOLVER_VELA_CACHE": str(tmp_path / "cache")}  # no stored decision cuts the lowering short
    done = subprocess.run(
        [sys.executable, "-c", AUDITED_JOB, str(ROOT), f"{tmp_path / 'model.py'}:conv_then_linear", target],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, **env},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    read = json.loads(done.stdout.strip().splitlines()[-1])
    assert _inside("layout_solver/zoo/runner.py", read)  # the hook saw the project's files
    assert _inside(f"layout_solver/{backend}/problem_builder.py", read)
    leaked = [path for path in read if _inside(path, foreign_code(backend))]
    assert not leaked, f"a zoo job on {target} reads code its source digest leaves out: {leaked}"
