"""A Llama-style decoder through Vulkan: the stage's own time against the whole lowering (issue 69: <= 10%).

Run: [LAYOUT_SOLVER_VULKAN_RUNTIME=/path/to/libvkbackend.so] .venv/bin/python -m benchmarks.vulkan.llama_decoder
     [--layers 32] [--out benchmarks/results/llama_decoder.md]

The zoo's `llama_decoder` (transformers LlamaConfig: RMSNorm, rotary embeddings, grouped-query attention, SwiGLU;
32 layers of small widths; prefill 16 tokens weighted 1, decode one token weighted 64, the KV cache an input of
both) lowered for Vulkan three ways in one process (`targets.vulkan.methods.methods_sides`): stock, each method
solved on its own, and one joint solve over both methods. Per side: the whole lowering's seconds (export,
to_edge_transform_and_lower, to_executorch), the stage's own seconds (its passes over every delegate and the joint
solve between them; stock's pass on the stock side) and their ratio, the delegates, transitions, and the default
profile's modelled cost weighted over the methods; with the Vulkan runtime set, every method of every side run on it and checked
against eager.
"""

from __future__ import annotations

import os

from benchmarks import harness
from layout_solver.core.solve import DEFAULT_TIME_LIMIT
from layout_solver.lowering.quiet import quiet
from layout_solver.targets.vulkan.methods import methods_sides
from layout_solver.targets.vulkan.runtime import ENV_VAR
from layout_solver.zoo.multi_method import build_methods

SHARE_BOUND = 0.10  # issue 69: the stage's time <= 10% of the lowering


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--layers", type=int, default=32)
    args = parser.parse_args()
    built = build_methods("llama_decoder", layers=args.layers)
    runtime = os.environ.get(ENV_VAR) or None
    with quiet():
        sides = methods_sides(built, built.weights, DEFAULT_TIME_LIMIT, execute=runtime is not None, runtime=runtime)
    lines = [f"Provenance: {harness.provenance()}", "",
             f"`llama_decoder({args.layers})`, method weights {built.weights}; Vulkan runtime: "
             + (runtime or "not set (nothing executed)"), ""]  # fmt: skip
    rows = []
    for side in ("stock", "per_method", "joint"):
        record = sides.get(side, {})
        if "error" in record:
            rows.append([side, record["error"][:120], "", "", "", "", "", ""])
            continue
        share = record["stage_seconds"] / record["lower_seconds"]
        methods = record["per_method"]
        rows.append([
            side, f"{record['lower_seconds']:.1f}", f"{record['stage_seconds']:.2f}", f"{share:.1%}",
            " / ".join(str(methods[m]["delegates"]) for m in built.weights),
            " / ".join(str(methods[m]["transitions"]) for m in built.weights),
            f"{record['weighted_modelled_us']:,.0f}" if record.get("weighted_modelled_us") is not None else "",
            " / ".join(harness.executed(methods[m]) for m in built.weights),
        ])  # fmt: skip
    lines += harness.table(["side", "lowering s", "stage s", "stage share", "delegates (prefill / decode)",
                            "transitions", "weighted modelled us", "on the device vs eager"], rows)  # fmt: skip
    joint = sides.get("joint", {})
    if "stage_seconds" in joint:
        share = joint["stage_seconds"] / joint["lower_seconds"]
        verdict = "met" if share <= SHARE_BOUND else "not met"
        lines += ["", (f"- joint: the stage's {joint['stage_seconds']:.2f} s are {share:.1%} of the lowering's "
                       f"{joint['lower_seconds']:.1f} s (bound {SHARE_BOUND:.0%}: {verdict}); joint solve "
                       f"{joint.get('joint_solve_seconds', 0):.2f} s over {joint.get('joint_groups')} groups")]  # fmt: skip
    harness.emit(lines, args.out)


if __name__ == "__main__":
    main()
