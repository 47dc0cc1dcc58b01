"""What produced a number: the installed version of every tool that can change one, and a digest of the
project's own source. Part of every cache key that stores a result (zoo jobs, verified lowering decisions)."""

from __future__ import annotations

import hashlib
from functools import cache
from importlib import metadata
from pathlib import Path

TOOLS = ("layout-solver", "executorch", "torch", "ethos-u-vela", "tosa-tools", "ortools")


@cache
def tool_versions(tools: tuple[str, ...] = TOOLS) -> dict[str, str]:
    """The installed version of every tool that can change a number (or of `tools`); "absent" if not installed."""
    versions = {}
    for tool in tools:
        try:
            versions[tool] = metadata.version(tool)
        except metadata.PackageNotFoundError:
            versions[tool] = "absent"
    return versions


ROOT = Path(__file__).resolve().parents[2]


def _measuring(target_folder: str) -> tuple[str, ...]:
    """A target's measuring code: every module of `layout_solver/targets/<target_folder>/` but its __init__ (the
    registry's, which every comparison imports)."""
    folder = ROOT / "layout_solver" / "targets" / target_folder
    return tuple(sorted(p.relative_to(ROOT).as_posix() for p in folder.glob("*.py") if p.name != "__init__.py"))


# The code only one backend's zoo jobs read (folders or files, relative to the repository root). A target's
# source digest leaves out the code of every other backend, so a change to Vulkan's rules keeps the Ethos-U
# results cached, and the other way round. tests/zoo/test_source_digest.py checks each entry against what a zoo
# job (model built, both sides lowered and measured) on every other backend really imports and opens; code both
# read (the registry in layout_solver/targets, the solvers, cost_models/ethos_u55.py that the TOSA target imports)
# stays in every digest.
BACKEND_CODE: dict[str, tuple[str, ...]] = {
    "arm": ("layout_solver/arm", *_measuring("ethos_u"), "graph_io/arm.py", "graph_io/tosa.py",
            "cost_models/vela.py", "cost_models/tosa_probe.py", "cost_models/calibration",
            "cost_models/data/ethos_u55_v2.json"),
    "vulkan": ("layout_solver/vulkan", *_measuring("vulkan"), "graph_io/vulkan.py", "cost_models/vulkan.py",
               "cost_models/data/vulkan_lavapipe.json", "cost_models/data/vulkan_v1.json"),
    "xnnpack": ("layout_solver/xnnpack", *_measuring("xnnpack"), "cost_models/data/xnnpack_ci_x86.json",
                "cost_models/data/xnnpack_ci_x86_xeon.json"),
}  # fmt: skip
# Code that only renders finished results (no zoo worker or comparison imports it): in no backend's digest, so a
# change to the report keeps every cached result. Checked by the same test.
RENDERING_CODE: tuple[str, ...] = (
    "layout_solver/zoo/report.py",
    "layout_solver/targets/ethos_u/report.py",
    "layout_solver/targets/vulkan/report.py",
)


def foreign_code(backend: str | None) -> tuple[str, ...]:
    """The code a comparison for `backend` never reads: every other backend's, and the rendering code (nothing
    when `backend` is None: the whole project counts)."""
    if backend is None:
        return ()
    if backend not in BACKEND_CODE:
        raise ValueError(f"unknown backend {backend!r}; known: {', '.join(BACKEND_CODE)}")
    return RENDERING_CODE + tuple(p for b, paths in BACKEND_CODE.items() if b != backend for p in paths)


@cache
def source_digest(backend: str | None = None) -> str:
    """A digest of the project's code and data files (read once per process): a change invalidates results.
    Given a backend ("arm", "vulkan"), the code its comparisons never read (`foreign_code`) is left out."""
    skipped = foreign_code(backend)
    digest = hashlib.sha1()
    for package in ("layout_solver", "cost_models", "graph_io"):
        for path in sorted((ROOT / package).rglob("*")):
            relative = path.relative_to(ROOT).as_posix()
            if any(relative == s or relative.startswith(s + "/") for s in skipped):
                continue
            if path.suffix in (".py", ".json") and "__pycache__" not in path.parts:
                digest.update(path.read_bytes())
    return digest.hexdigest()[:12]


def node_signature(node) -> bytes:
    """What a graph node contributes to a content key: op, name, target, arguments, tensor shape and dtype. repr,
    not format_node: 5x faster on long argument lists (a node's repr is its name)."""
    val = node.meta.get("val")
    return repr((node.op, node.name, node.target, node.args, node.kwargs, getattr(val, "shape", None),
                 getattr(val, "dtype", None))).encode()  # fmt: skip


def graph_content(nodes, node_bytes=lambda node: b"") -> bytes:
    """A graph's content for a content key, whatever order its nodes come in: the placeholders in order (they
    are the graph's input positions), then every node's signature (with `node_bytes(node)`, e.g. its
    constant's values) hashed and sorted. A node's arguments name the nodes it reads, so the sorted signatures
    still pin the wiring. executorch 1.5.1 can hand the same graph over in another topological order from one
    process to the next (resnet8: two orders in five processes); a key that read the order missed the answer an
    earlier process stored."""
    nodes = list(nodes)
    placeholders = repr([n.name for n in nodes if n.op == "placeholder"]).encode()
    signatures = sorted(hashlib.sha1(node_signature(n) + node_bytes(n)).digest() for n in nodes)
    return placeholders + b"".join(signatures)


def tensor_bytes(tensor) -> bytes:
    """A tensor's raw bytes for a content key, whatever its dtype (bfloat16 has no numpy twin, so the bytes are
    read as uint8). Raises RuntimeError or TypeError for a dtype with no byte view (quantized tensors)."""
    import torch

    return tensor.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes()
