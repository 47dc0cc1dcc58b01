"""A Llama-style decoder through XNNPACK: the stage's own time against the whole lowering (issue 69, item 3), both
programs run and timed here.

Run: .venv/bin/python -m benchmarks.xnnpack.llama_decoder [--layers 32] [--targets xnnpack,xnnpack-int8]
     [--threads 1] [--rounds 15] [--out benchmarks/results/xnnpack_llama_decoder.md]

The zoo's `llama_decoder` (transformers LlamaConfig: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU;
small widths; prefill 16 tokens weighted 1, decode one token weighted 64, the KV cache an input of both), both
methods lowered together as one program, stock's ChannelsLastTaggedReshapePass against the stage
(`targets.xnnpack.methods`: no joint side, nothing the stage decides is shared between methods). Per side: the
whole lowering's seconds (export, to_edge_transform_and_lower, to_executorch), the stage's own (its delegate passes
and program-level pass; stock's pass on the stock side) and their share; per method the delegates, conversions,
run time and paired ratio on this CPU, and the outputs against eager.
"""

from __future__ import annotations

from benchmarks import harness
from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.lowering.quiet import quiet
from layout_solver.targets import get_target
from layout_solver.targets.base import int_list
from layout_solver.zoo.multi_method import build_methods

SHARE_BOUND = 0.10  # issue 69: the stage's time <= 10% of the lowering (stated for Vulkan, measured here too)


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--layers", type=int, default=32)
    parser.add_argument("--targets", default="xnnpack,xnnpack-int8")
    parser.add_argument("--threads", type=int_list, default=[1], help="the thread count to run with (the first)")
    parser.add_argument("--rounds", type=int, default=15, help="interleaved paired rounds per method")
    args = parser.parse_args()
    lines = [f"Provenance: {harness.provenance()}", ""]
    for target in args.targets.split(","):
        built = build_methods("llama_decoder", layers=args.layers)
        with quiet():
            result = get_target(target).compare_methods(
                built, time_limit=DEFAULT_TIME_LIMIT, threads=args.threads, rounds=args.rounds
            )
        methods = list(built.weights)
        heading = (
            f"## {target}: `llama_decoder({args.layers})`, method weights {built.weights}, {args.threads[0]} thread(s)"
        )
        lines += [heading, ""]
        rows = []
        for side in ("stock", "per_method"):
            record = getattr(result, side)
            if record is None or record.error:
                rows.append([side, (record.error if record else "not lowered")[:120], *[""] * 8])
                continue
            per = record.per_method
            rows.append([
                side, f"{record.lower_seconds:.1f}", f"{record.stage_seconds:.2f}",
                f"{record.stage_seconds / record.lower_seconds:.1%}",
                " / ".join(str(per[m]["delegates"]) for m in methods),
                " / ".join(str(per[m]["transitions"]) for m in methods),
                " / ".join(_ms(per[m].get("run_ms")) for m in methods),
                " / ".join(str(per[m].get("paired_ratio", "")) for m in methods) if side != "stock" else "",
                _ms(record.weighted_run_ms),
                " / ".join(harness.executed(per[m]) for m in methods),
            ])  # fmt: skip
        lines += harness.table(
            ["side", "lowering s", "stage s", "stage share", "delegates (" + " / ".join(methods) + ")",
             "conversions", "run ms", "paired ratio to stock", "weighted run ms", "max |diff| vs eager"],
            rows,
        )  # fmt: skip
        solver = result.per_method
        if solver is not None and solver.stage_seconds is not None:
            share = solver.stage_seconds / solver.lower_seconds
            verdict = "met" if share <= SHARE_BOUND else "not met"
            same = result.stock is not None and result.stock.pte_sha256 == solver.pte_sha256
            stage = (
                f"- the stage's {solver.stage_seconds:.2f} s are {share:.1%} of the lowering's {solver.lower_seconds:.1f}"
                f" s (bound {SHARE_BOUND:.0%}: {verdict}); stock's pass {result.stock.stage_seconds:.2f} s"
            )
            outputs = (
                f"- programs: {'the same bytes as stock' if same else 'different from stock'}; outputs against stock's:"
                f" max |diff| {result.max_abs_diff_solver_vs_stock}, equivalent: {result.per_method_equivalent}"
            )
            lines += ["", stage, outputs]
        lines.append("")
        print("\n".join(lines), flush=True)
    harness.emit(lines, args.out)


def _ms(value) -> str:
    return "" if value is None else f"{value:.3f}"


if __name__ == "__main__":
    main()
