"""What the Vulkan stage's shortcuts save, each on its own, timed in one process on the same delegate graphs.

Run: .venv/bin/python -m benchmarks.vulkan.pass_speedups [--models outside:mobilevit,outside:swin] [--rounds 7]
        [--out F]

The shortcuts change no program (tests/vulkan/test_vulkan.py checks them byte for byte, and stock's tagging with the
build's registry answers against stock's own), only the pass's time:
- memo: while stock's tagging runs inside the pass, `SolverTagMemoryMetaPass.is_valid_op_node` and
  `get_node_cached_repsets` answer once per node;
- screen: a profile's own optimum that a profile's problem already prices above stock's is refused without being
  written onto the graph's untagged copy and priced there (`robust.dearer_than_stock`);
- reuse: stock's tagging inside the pass gets each op's registry answer from the build, a fresh copy of it, instead
  of asking the registry again (`stock_tagging.registry_answers_reused`);
- fill: exact elimination may take the weighted min-fill order where the min-size one needs tables far past the limit
  (`core.solvers.elimination.elimination_order`); off, min-size alone, as before it. It changed no program of the
  zoo or outside set (where it changes the order, the same optimum is found faster);
- tabulate: ExecuTorch's packed-dim arithmetic on representation sets, which every registry answer and every narrowing
  of stock's tagging runs, answered from a table while the pass runs and while its post-condition asks the registry
  again (`stock_tagging.packed_dims_tabulated`);
- prices: each op's price kept from one tagging the pass prices to the next (stock's, each candidate's, the report's;
  `pricing.modelled_costs_by_node`'s `op_prices`), and stock's tagging read once where the report prices it again
  (`nodes`);
- keep: inside the pass's `compiles_reused()` block, the solvers keep elimination orders and components by the
  factors' scopes and factor tables by their prices (`core.model.kept`), for the up to three solves of a delegate;
- takeback: each candidate is written onto the one untagged copy, priced and taken back, not written onto a copy of
  its own;
- sum: the profiles' weighted sum reads each profile's prices as the build priced them (`robust.weighted_sum`'s
  `prices`), not off its problem's objects.
Each model is lowered once with the stage, capturing its delegate graphs as `benchmarks.vulkan.pass_time` does; then
`--rounds` rounds time the whole pass (requires, call, ensures) on fresh copies with every shortcut on, each one off
on its own, and all off, in turn, interleaved. Process-to-process noise on this 2-core machine is about +-8% a model,
more than any one saving, which is why the variants are compared in one process.
"""

from __future__ import annotations

import contextlib
import statistics

from executorch.backends.vulkan._passes.tag_memory_meta_pass import TagMemoryMetaPass

from benchmarks import harness
from benchmarks.vulkan.pass_time import captured_delegates, timed_solver_pass
from layout_solver.core import model, robust
from layout_solver.core.solvers import elimination, tables
from layout_solver.vulkan import passes
from layout_solver.vulkan.passes import SolverTagMemoryMetaPass
from layout_solver.zoo.models import build, expand_names

SHORTCUTS = ("memo", "screen", "reuse", "fill", "tabulate", "prices", "keep", "takeback", "sum")
VARIANTS = [(), *((name,) for name in SHORTCUTS), SHORTCUTS]  # the shortcuts turned off: none, each, all


@contextlib.contextmanager
def shortcuts_off(names: tuple[str, ...]):
    """The stage's pass with the shortcuts in `names` off (memo: stock's own per-node answers; screen: a screen that
    refuses nothing, so every own optimum is written and priced, as before it; reuse: the registry asked again; fill:
    no piece tries the min-fill order; tabulate: stock's packed-dim functions; prices: every tagging priced afresh;
    keep: nothing kept between solves; takeback: every candidate written onto a copy of its own; sum: the weighted sum
    reads the problems' objects)."""
    saved_methods = {k: SolverTagMemoryMetaPass.__dict__[k] for k in ("is_valid_op_node", "get_node_cached_repsets")}
    priced_candidate = SolverTagMemoryMetaPass.__dict__["_priced_candidate"]
    saved_kept = model.kept, tables.kept  # `kept_or_made` (orders, components) reads model's
    saved = robust.dearer_than_stock, passes.registry_answers_reused, elimination.FILL_MAX_VARS, robust.weighted_sum
    saved_pricing = passes.packed_dims_tabulated, passes.modelled_costs_by_node, passes.modelled
    try:
        if "memo" in names:
            for method in saved_methods:
                setattr(SolverTagMemoryMetaPass, method, getattr(TagMemoryMetaPass, method))
        if "screen" in names:
            robust.dearer_than_stock = lambda objectives, stock: None
        if "reuse" in names:
            passes.registry_answers_reused = lambda answers, limits: contextlib.nullcontext()
        if "fill" in names:
            elimination.FILL_MAX_VARS = 0
        if "tabulate" in names:
            passes.packed_dims_tabulated = contextlib.nullcontext
        if "prices" in names:
            by_node, modelled = saved_pricing[1:]
            passes.modelled_costs_by_node = lambda graph_module, pricings, op_prices=None, nodes=None: by_node(
                graph_module, pricings
            )
            passes.modelled = lambda graph_module, profile, profiles=None, op_prices=None, nodes=None: modelled(
                graph_module, profile, profiles
            )
        if "keep" in names:
            model.kept = tables.kept = lambda kind: None
        if "takeback" in names:
            SolverTagMemoryMetaPass._priced_candidate = _priced_on_a_copy
        if "sum" in names:
            weighted_sum = saved[3]
            robust.weighted_sum = lambda problems, weights, name=None, prices=None: weighted_sum(
                problems, weights, name
            )
        yield
    finally:
        model.kept, tables.kept = saved_kept
        SolverTagMemoryMetaPass._priced_candidate = priced_candidate
        passes.packed_dims_tabulated, passes.modelled_costs_by_node, passes.modelled = saved_pricing
        for method, saved_method in saved_methods.items():
            setattr(SolverTagMemoryMetaPass, method, saved_method)
        robust.dearer_than_stock, passes.registry_answers_reused, elimination.FILL_MAX_VARS, robust.weighted_sum = saved


def _priced_on_a_copy(self, label, solution, pricings):
    """`SolverTagMemoryMetaPass._priced_candidate` as it was before the take-back: onto a copy of the untagged graph."""
    graph_copy = passes._detached_copy(self.pristine)
    self._write_back(graph_copy, passes.moved_onto(self.built[label], graph_copy.graph), solution)
    return passes.modelled_costs_by_node(graph_copy, pricings, self._op_prices)


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument(
        "--models", default="outside:mobilevit,outside:swin,outside:mobilevitv2,decoder_stack,vit_small"
    )
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds of the variants")
    args = parser.parse_args()
    header = ["model", "all on ms", *(f"{name} off ms" for name in SHORTCUTS), "all off ms", "all on / all off"]
    lines = [harness.provenance("one process, quiet; median over rounds"), "", *harness.table(header, [])]
    print("\n".join(lines), flush=True)
    for name in expand_names(args.models.split(",")):
        module, inputs = build(name)
        delegates, _ = captured_delegates(module, inputs)
        seconds: dict[tuple[str, ...], list[float]] = {v: [] for v in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                with shortcuts_off(variant):
                    seconds[variant].append(sum(timed_solver_pass(p, g)[0] for p, g in delegates))
        medians = [statistics.median(seconds[v]) * 1e3 for v in VARIANTS]
        line = harness.row([name, *(f"{m:.1f}" for m in medians), f"{medians[0] / medians[-1]:.2f}"])
        print(line, flush=True)
        lines.append(line)
    harness.write(lines, args.out)


if __name__ == "__main__":
    main()
