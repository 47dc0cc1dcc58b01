"""The Vulkan stage's own time: the solver's TagMemoryMetaPass against stock's, on the same delegate graphs.

Run: .venv/bin/python -m benchmarks.vulkan.pass_time [--models zoo,outside] [--rounds 7]
        [--out benchmarks/results/compile_time.md]

Each model is lowered once with the stage (the default objective: every profile), keeping an untagged copy of
every delegate's graph as vulkan_preprocess hands it to the pass. Then, per delegate, `--rounds` interleaved
rounds time stock's pass and the solver's pass (requires, call and ensures: its snapshot, problems, solves,
pricing, write-back, report and post-condition) on fresh copies; a model's time is the sum over its delegates of
each side's median. Issue 69's bound is solver <= 2 x stock + 100 ms per model; the table also gives the stage's
share of the whole lowering (one lowering with the stage, timed end to end) and where the stage's time goes (its
phases, summed over delegates).
"""

from __future__ import annotations

import contextlib
import copy
import statistics
import time

from benchmarks import harness
from layout_solver.lowering.pass_report import collecting_reports
from layout_solver.lowering.quiet import quiet
from layout_solver.targets.vulkan.measure import lower_vulkan
from layout_solver.vulkan import solver_layouts
from layout_solver.vulkan.hooks import substituted_pass
from layout_solver.vulkan.passes import detach_specs
from layout_solver.zoo.models import build, expand_names

BOUND_FACTOR, BOUND_SECONDS = 2.0, 0.100  # issue 69: the stage's pass <= 2x stock's TagMemoryMetaPass + 100 ms


def _untagged_copy(graph_module):
    """A copy of a delegate graph module whose tagging cannot show through in the original."""
    detached = copy.deepcopy(graph_module)
    detach_specs(detached.graph)
    return detached


def captured_delegates(module, inputs) -> tuple[list, float]:
    """Lower `module` with the stage; each delegate's (solver pass, untagged graph) and the lowering's seconds."""
    from executorch.backends.vulkan import vulkan_preprocess

    delegates = []

    @contextlib.contextmanager
    def capturing():
        with solver_layouts() as reports:
            solver_cls = vulkan_preprocess.TagMemoryMetaPass  # the pass solver_layouts installed

            class Capture(solver_cls):
                def call(self, graph_module):
                    if recording:  # the lowering's own calls, not the timed ones after it
                        delegates.append((self, _untagged_copy(graph_module)))
                    return super().call(graph_module)

            with substituted_pass(Capture):
                yield reports

    recording = True
    start = time.perf_counter()
    with quiet():
        lower_vulkan(module, inputs, capturing)
    elapsed = time.perf_counter() - start
    recording = False
    return delegates, elapsed


def timed_solver_pass(solver_pass, graph_module):
    """Seconds of the solver's whole pass on a fresh untagged copy of one delegate graph, as PassBase runs it (its
    snapshot and post-condition too), and the pass's report."""
    graph = _untagged_copy(graph_module)
    with collecting_reports() as reports, quiet():
        start = time.perf_counter()
        solver_pass.requires(graph)
        solver_pass.call(graph)
        solver_pass.ensures(graph)
        return time.perf_counter() - start, reports[-1]


def time_delegate(solver_pass, graph_module, rounds: int) -> dict:
    """Median seconds of stock's pass and the solver's on fresh copies of one delegate graph, interleaved, and the
    solver's phases in its median round."""
    from executorch.backends.vulkan._passes.tag_memory_meta_pass import TagMemoryMetaPass

    # stock's own pass, built as vulkan_preprocess built the solver's (the solver's pass overrides some of stock's
    # methods with faster ones of its own: calling stock's `call` on it would time a faster stock)
    stock_pass = TagMemoryMetaPass(
        solver_pass.texture_limits, solver_pass.default_storage, solver_pass.default_layout, solver_pass.force_fp16
    )
    stock_pass.max_trace_search_depth = solver_pass.max_trace_search_depth
    stock, solver, phases = [], [], []
    for _ in range(rounds):
        graph = _untagged_copy(graph_module)
        start = time.perf_counter()
        stock_pass.call(graph)
        stock.append(time.perf_counter() - start)
        seconds, report = timed_solver_pass(solver_pass, graph_module)
        solver.append(seconds)
        phases.append(report.phase_seconds)
    middle = sorted(range(rounds), key=solver.__getitem__)[rounds // 2]
    return {
        "stock": statistics.median(stock),
        "solver": statistics.median(solver),
        "phases": phases[middle],
        "decision": report.notes[-1] if report.notes else "",
    }


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--models", default="zoo,outside", help="models or sets (zoo, outside), comma-separated")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timed rounds per delegate")
    args = parser.parse_args()
    header = ["model", "delegates", "stock pass ms", "stage pass ms", "bound ms", "within",
              "build / solve / write / check ms", "stage / lowering", "decision"]  # fmt: skip
    lines = [harness.provenance("one process, quiet"), "", *harness.table(header, [])]
    print("\n".join(lines), flush=True)
    rows = []
    for name in expand_names(args.models.split(",")):
        module, inputs = build(name)
        try:
            delegates, lowering = captured_delegates(module, inputs)
        except Exception as exc:  # noqa: BLE001 - an upstream lowering failure is a row, not the end of the run
            line = harness.row([name, "", "", "", "", "", "", "", f"lowering failed: {type(exc).__name__}"])
            print(line, flush=True)
            lines.append(line)
            continue
        timed = [time_delegate(p, g, args.rounds) for p, g in delegates]
        stock, solver = sum(t["stock"] for t in timed), sum(t["solver"] for t in timed)
        bound = BOUND_FACTOR * stock + BOUND_SECONDS
        phases = [sum(t["phases"].get(k, 0.0) for t in timed) * 1e3 for k in ("build", "solve", "write_back", "check")]
        decisions = sorted({t["decision"].split(":")[0] for t in timed if t["decision"]})
        rows.append((name, stock, solver, bound))
        line = harness.row([
            name, len(timed), f"{stock * 1e3:.1f}", f"{solver * 1e3:.1f}", f"{bound * 1e3:.1f}",
            "yes" if solver <= bound else "**no**", " / ".join(f"{p:.0f}" for p in phases),
            f"{solver / lowering:.1%}", "; ".join(decisions),
        ])  # fmt: skip
        print(line, flush=True)
        lines.append(line)
    within = sum(solver <= bound for _, _, solver, bound in rows)
    ratios = [solver / stock for _, stock, solver, _ in rows if stock > 0]
    summary = [
        "",
        f"- within 2x stock + 100 ms: {within} of {len(rows)} models",
        f"- stage / stock pass time: median {statistics.median(ratios):.2f}x, "
        f"geometric mean {harness.geomean(ratios):.2f}x"
        if ratios
        else "- no model lowered",
    ]
    print("\n".join(summary), flush=True)
    harness.write(lines + summary, args.out)


if __name__ == "__main__":
    main()
