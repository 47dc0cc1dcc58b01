"""What two of the Vulkan stage's shortcuts save, each on its own, timed in one process on the same delegate graphs.

Run: .venv/bin/python -m benchmarks.vulkan.pass_speedups [--models outside:mobilevit,outside:swin] [--rounds 7]
        [--out F]

The shortcuts change no program (tests/vulkan/test_vulkan.py checks the second byte for byte), only the pass's time:
- memo: `SolverTagMemoryMetaPass.is_valid_op_node` answers once per node while stock's tagging runs inside the pass;
- screen: a profile's own optimum that a profile's problem already prices above stock's is refused without being
  written onto a copy of the graph and priced there (`robust.dearer_than_stock`).
Each model is lowered once with the stage, capturing its delegate graphs as `benchmarks.vulkan.pass_time` does; then
`--rounds` rounds time the whole pass (requires, call, ensures) on fresh copies with each of the four on/off
combinations in turn, interleaved. Process-to-process noise on this 2-core machine is about +-8% a model, more than
either saving, which is why the four are compared in one process.
"""

from __future__ import annotations

import contextlib
import statistics

from executorch.backends.vulkan._passes.tag_memory_meta_pass import TagMemoryMetaPass

from benchmarks import harness
from benchmarks.vulkan.pass_time import captured_delegates, timed_solver_pass
from layout_solver.core import robust
from layout_solver.vulkan.passes import SolverTagMemoryMetaPass
from layout_solver.zoo.models import build, expand_names

VARIANTS = [(True, True), (False, True), (True, False), (False, False)]  # (memo, screen)


@contextlib.contextmanager
def shortcuts(memo: bool, screen: bool):
    """The stage's pass with each shortcut on or off (off: stock's own `is_valid_op_node`; a screen that refuses
    nothing, so every own optimum is written and priced, as before the shortcut)."""
    saved = SolverTagMemoryMetaPass.__dict__["is_valid_op_node"], robust.dearer_than_stock
    try:
        if not memo:
            SolverTagMemoryMetaPass.is_valid_op_node = TagMemoryMetaPass.is_valid_op_node
        if not screen:
            robust.dearer_than_stock = lambda objectives, stock: None
        yield
    finally:
        SolverTagMemoryMetaPass.is_valid_op_node, robust.dearer_than_stock = saved


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument(
        "--models", default="outside:mobilevit,outside:swin,outside:mobilevitv2,decoder_stack,vit_small"
    )
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds of the four variants")
    args = parser.parse_args()
    header = ["model", "both on ms", "memo off ms", "screen off ms", "both off ms", "both on / both off"]
    lines = [harness.provenance("one process, quiet; median over rounds"), "", *harness.table(header, [])]
    print("\n".join(lines), flush=True)
    for name in expand_names(args.models.split(",")):
        module, inputs = build(name)
        delegates, _ = captured_delegates(module, inputs)
        seconds: dict[tuple[bool, bool], list[float]] = {v: [] for v in VARIANTS}
        for _ in range(args.rounds):
            for variant in VARIANTS:
                with shortcuts(*variant):
                    seconds[variant].append(sum(timed_solver_pass(p, g)[0] for p, g in delegates))
        medians = [statistics.median(seconds[v]) * 1e3 for v in VARIANTS]
        line = harness.row([name, *(f"{m:.1f}" for m in medians), f"{medians[0] / medians[-1]:.2f}"])
        print(line, flush=True)
        lines.append(line)
    harness.write(lines, args.out)


if __name__ == "__main__":
    main()
