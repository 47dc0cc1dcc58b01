"""An explained model opened in Google's Model Explorer (its own server, on loopback) in headless Chromium: the
graph renders, with as many nodes as the delegate has ops, and the cost overlay's sum is the delegate's price."""

import os
import re
import shutil
from pathlib import Path

import pytest

from layout_solver.explain import model_explorer

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# Chromium as root on a closed network: no sandbox, no background connections, software WebGL.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--use-gl=swiftshader", "--enable-unsafe-swiftshader"]  # fmt: skip
SCREENSHOT = os.environ.get("LAYOUT_SOLVER_SCREENSHOT")  # where to keep the page's picture (the README's)


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("CI must run the browser test: no chromium (scripts/ensure_chromium.sh installs it)")
        pytest.skip("no chromium")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.mark.xdist_group("explained_convnext_xnnpack")  # the overlay test's lowering, shared
def test_model_explorer_renders_the_solvers_graph_and_its_overlay(browser, explained_convnext_xnnpack, tmp_path):
    explanation, _ = explained_convnext_xnnpack
    files = explanation.files["solver"]
    process, port = model_explorer.serve()
    try:
        url = model_explorer.url_for(Path(files["graphs"]), [Path(files["cost"])], "127.0.0.1", port)
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(url)
        page.get_by_text("op node count").wait_for(timeout=90_000)
        page.get_by_text("Aggregated stats").wait_for(timeout=60_000)
        page.wait_for_timeout(2_000)  # the canvas draws after the panels
        picture = Path(SCREENSHOT) if SCREENSHOT else tmp_path / "model_explorer.png"
        page.screenshot(path=str(picture))
        text = page.inner_text("body")
    finally:
        process.terminate()
    assert "convnext_stack on xnnpack (solver)" in text
    shown = re.search(r"(delegate \d+)\s+(\d+) nodes", text)
    assert shown, text[:2000]
    graph = {g.id: g for g in explanation.graphs["solver"]}[shown.group(1)]
    assert int(shown.group(2)) == len(graph.ops)
    node_count = re.search(r"op node count\s+(\d+)", text)
    assert node_count and int(node_count.group(1)) == len(graph.ops)
    overlay_sum = re.search(r"Sum\s+([\d.,]+)", text)
    assert overlay_sum and float(overlay_sum.group(1).replace(",", "")) == pytest.approx(graph.total, rel=1e-3)
    assert picture.stat().st_size > 20_000  # a picture of a drawn graph, not a blank page
