"""Layout graphs as Google Model Explorer inputs: a graphs file in its JSON graph format (`model_explorer.
graph_builder`), node-data overlays (`model_explorer.node_data_builder`), and a loopback server to look at them.

Model Explorer's own ExecuTorch adapter (`executorch-extension-model-explorer`) draws a .pte's outer graph, where
a delegate is one opaque node; the layouts live inside the delegates, so each delegate is drawn here as a graph
of its own from what the lowering kept (its tagged fx graph, or its TOSA).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict
from pathlib import Path

from graph_io.layout_graph import LayoutGraph, cost_deltas

# One colour per layout, in the order layouts are first seen (sorted), and the conversions' colour.
PALETTE = ("#c6dbef", "#fdd0a2", "#c7e9c0", "#dadaeb", "#fcbba1", "#d9d9d9", "#9ecae1", "#fdae6b")
CONVERSION_COLOUR = "#e31a1c"


def _graph(layout: LayoutGraph):
    from model_explorer import graph_builder as gb

    graph = gb.Graph(id=layout.id)
    for op in layout.ops:
        attrs = {"op": op.op, "layout": op.layout, "dtype": op.dtype, "shape": str(op.shape), **op.attrs}
        if op.cost is not None:
            attrs[f"cost ({layout.unit})"] = f"{op.cost:,.6g}"
        if op.conversion:
            attrs["conversion"] = "inserted for layout"
        graph.nodes.append(
            gb.GraphNode(
                id=op.id,
                label=op.op,
                attrs=[gb.KeyValue(key=k, value=str(v)) for k, v in attrs.items() if v != ""],
                incomingEdges=[
                    gb.IncomingEdge(sourceNodeId=source, targetNodeInputId=str(i)) for i, source in enumerate(op.inputs)
                ],
                outputsMetadata=[
                    gb.MetadataItem(
                        id="0",
                        attrs=[
                            gb.KeyValue(key="__tensor_tag", value=op.id),
                            gb.KeyValue(key="shape", value=str(op.shape)),
                            gb.KeyValue(key="layout", value=op.layout),
                        ],
                    )
                ],
                style=gb.GraphNodeStyle(borderColor=CONVERSION_COLOUR) if op.conversion else None,
            )
        )
    return graph


def _overlay(name: str, values: dict[str, dict[str, float]], colours: dict[str, dict[str, str]] | None = None):
    from model_explorer import node_data_builder as ndb

    colours = colours or {}
    return ndb.ModelNodeData(
        graphsData={
            graph_id: ndb.GraphNodeData(
                name=name,
                results={
                    node: ndb.NodeDataResult(value=value, bgColor=colours.get(graph_id, {}).get(node))
                    for node, value in nodes.items()
                },
                gradient=[]
                if colours
                else [
                    ndb.GradientItem(stop=0, bgColor="#ffffff"),
                    ndb.GradientItem(stop=1, bgColor="#fb6a4a"),
                ],
            )
            for graph_id, nodes in values.items()
        }
    )


def layout_legend(graphs: list[LayoutGraph]) -> dict[str, int]:
    """Each layout seen in `graphs`, numbered in sorted order: the layout overlay's values."""
    return {layout: i for i, layout in enumerate(sorted({op.layout for g in graphs for op in g.ops if op.layout}))}


def write(side: str, graphs: list[LayoutGraph], out: Path, legend: dict[str, int], title: str) -> dict[str, Path]:
    """`out/{side}.graphs.json` (a graph collection labelled "`title` (`side`)") and its overlays (cost, layout,
    conversions); the paths by kind."""
    from model_explorer import graph_builder as gb

    out.mkdir(parents=True, exist_ok=True)
    paths = {"graphs": out / f"{side}.graphs.json"}
    collection = gb.GraphCollection(label=f"{title} ({side})", graphs=[_graph(g) for g in graphs])
    paths["graphs"].write_text(json.dumps(asdict(collection), indent=1))
    unit = graphs[0].unit if graphs else ""
    overlays = {
        "cost": _overlay(
            f"{side}: cost ({unit})", {g.id: {op.id: op.cost for op in g.ops if op.cost is not None} for g in graphs}
        ),
        "layout": _overlay(
            f"{side}: layout ({', '.join(f'{i}={k}' for k, i in legend.items())})",
            {g.id: {op.id: legend[op.layout] for op in g.ops if op.layout} for g in graphs},
            {g.id: {op.id: PALETTE[legend[op.layout] % len(PALETTE)] for op in g.ops if op.layout} for g in graphs},
        ),
        "conversions": _overlay(
            f"{side}: layout conversions ({unit})",
            {g.id: {op.id: op.cost or 0.0 for op in g.conversions} for g in graphs},
            {g.id: {op.id: CONVERSION_COLOUR for op in g.conversions} for g in graphs},
        ),
    }
    for kind, data in overlays.items():
        paths[kind] = out / f"{side}.{kind}.json"
        data.save_to_file(str(paths[kind]))
    return paths


def write_delta(stock: list[LayoutGraph], solver: list[LayoutGraph], out: Path) -> Path:
    """`out/solver.delta.json`: on the solver's graphs, each op's price minus stock's (`cost_deltas`)."""
    path = out / "solver.delta.json"
    unit = solver[0].unit if solver else ""
    _overlay(f"solver minus stock ({unit})", cost_deltas(stock, solver)).save_to_file(str(path))
    return path


def url_for(graphs: Path, overlays: list[Path], host: str, port: int) -> str:
    """The address that opens `graphs` with `overlays` in a Model Explorer server at host:port."""
    from model_explorer.config import ModelExplorerConfig

    config = ModelExplorerConfig().add_model_from_path(str(graphs))
    for path in overlays:
        config.add_node_data_from_path(str(path))
    return f"http://{host}:{port}/?data={config.to_url_param_value()}"


def serve(port: int = 0, host: str = "127.0.0.1", timeout: float = 60.0) -> tuple[subprocess.Popen, int]:
    """A Model Explorer server on loopback (a child process, `port` 0: a free one), once it answers; the process
    and its port. The caller stops it (`process.terminate()`)."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        raise ValueError(f"Model Explorer is served on loopback only, not {host!r}")
    if not port:
        import portpicker

        port = portpicker.pick_unused_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "model_explorer", "--host", host, "--port", str(port), "--no_open_in_browser"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"Model Explorer's server exited at start (code {process.returncode})")
        try:
            with urllib.request.urlopen(f"http://{host}:{port}/", timeout=2) as response:
                if response.status == 200:
                    return process, port
        except OSError:
            time.sleep(0.3)
    process.terminate()
    raise TimeoutError(f"Model Explorer's server did not answer on {host}:{port} within {timeout:.0f} s")


def serve_until_interrupted(files: dict[str, dict[str, str]], port: int = 0) -> None:
    """Serve Model Explorer on loopback and print the address of each side's files (`Explanation.files`) until
    the server stops or Ctrl+C."""
    process, port = serve(port)
    try:
        for side, paths in files.items():
            overlays = [Path(path) for kind, path in paths.items() if kind != "graphs"]
            print(f"{side}: {url_for(Path(paths['graphs']), overlays, '127.0.0.1', port)}")
        print("Model Explorer is serving on loopback; Ctrl+C stops it.")
        process.wait()
    finally:
        process.terminate()
