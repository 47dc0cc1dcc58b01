"""Where the Vulkan cost model is right and wrong: each op's device time against its modelled price.

Run: LAYOUT_SOLVER_VULKAN_RUNTIME=/path/to/libvkbackend.so \\
     .venv/bin/python -m benchmarks.vulkan.profile [--models a,b] [--profile lavapipe] [--out FILE.md]

Per zoo model (and the decoder_kv multi-method model, per method), the stock and solver programs are lowered, and every shader dispatch of each is timed on the
device by the runtime's query pool (`layout_solver.targets.vulkan.runtime.profile`). Per operator the table holds the
measured time (sum of its dispatches, median of runs) and the profile's price (`modelled_cost_by_op`), on
both sides: the change in one column and not the other is where a prediction goes wrong.
"""

from __future__ import annotations

import sys
from collections import Counter

from benchmarks import harness
from layout_solver.lowering.quiet import quiet
from layout_solver.targets.vulkan.measure import lower_vulkan
from layout_solver.targets.vulkan.runtime import profile
from layout_solver.vulkan import solver_layouts, stock_layouts
from layout_solver.zoo.models import ZOO, build
from layout_solver.zoo.multi_method import MULTI_METHOD_ZOO, build_methods


def _lower_methods(built, context) -> tuple[bytes, list]:
    """One multi-method program (every method exported from the same module) inside `context()`."""
    import copy

    import torch
    from executorch.backends.vulkan.partitioner.vulkan_partitioner import VulkanPartitioner
    from executorch.backends.vulkan.vulkan_preprocess import VulkanBackend
    from executorch.exir import to_edge_transform_and_lower

    from layout_solver.lowering.joint_lowering import naming_partitions

    exported = {m: torch.export.export(copy.deepcopy(built.module), inputs) for m, inputs in built.inputs.items()}
    with context() as reports, naming_partitions(VulkanBackend):
        return to_edge_transform_and_lower(exported, partitioner=[VulkanPartitioner()]).to_executorch().buffer, reports


def measure(model: str, cost_profile: str, runs: int) -> dict[str, tuple[dict[str, Counter], dict[str, Counter]]]:
    """Per method ("forward" for a one-method model): (measured us by operator, modelled us by operator) for
    each side."""
    contexts = (("stock", lambda: stock_layouts(cost_profile)), ("solver", lambda: solver_layouts(10.0, cost_profile)))
    buffers, modelled = {}, {}
    if model in MULTI_METHOD_ZOO:
        built = build_methods(model)
        methods = dict(built.inputs)
        for side, context in contexts:
            with quiet():
                buffers[side], reports = _lower_methods(built, context)
            for method in methods:  # a method's delegates are partitions "method#k"
                mine = [r for r in reports if r.partition.split("#")[0] == method]
                modelled[(side, method)] = sum((r.modelled_us_by_op for r in mine), Counter())
    else:
        module, inputs = build(model)
        methods = {"forward": inputs}
        for side, context in contexts:
            with quiet():
                buffers[side], reports = lower_vulkan(module, inputs, context)
            modelled[(side, "forward")] = sum((r.modelled_us_by_op for r in reports), Counter())
    runs_of = {f"{side}/{m}": buffers[side] for side in buffers for m in methods}
    found = profile(
        runs_of,
        {name: methods[name.split("/")[1]] for name in runs_of},
        runs=runs,
        methods={name: name.split("/")[1] for name in runs_of},
    )
    out = {}
    for method in methods:
        measured = {}
        for side in buffers:
            dispatches = found[f"{side}/{method}"]
            if isinstance(dispatches, str):
                sys.exit(f"{model} {side} {method}: {dispatches}")
            measured[side] = Counter()
            for d in dispatches:
                measured[side][d.operator or "(staging copies)"] += d.us
        out[method] = (measured, {side: modelled[(side, method)] for side in buffers})
    return out


def table(model: str, measured: dict[str, Counter], modelled: dict[str, Counter]) -> list[str]:
    ops = sorted(set().union(*measured.values(), *modelled.values()))
    lines = [
        f"### {model}",
        "",
        (
            "| operator | measured stock us | measured solver us | measured change | modelled stock us | "
            "modelled solver us | modelled change |"
        ),
        "|" + "---|" * 7,
    ]
    rows = []
    for op in ops:
        ms, mo = measured["stock"][op], measured["solver"][op]
        ps, po = modelled["stock"][op], modelled["solver"][op]
        rows.append(
            (
                abs(mo - ms) + abs(po - ps),
                f"| {op} | {ms:,.0f} | {mo:,.0f} | {mo - ms:+,.0f} | {ps:,.0f} | {po:,.0f} | {po - ps:+,.0f} |",
            )
        )
    lines += [r for _, r in sorted(rows, reverse=True)]
    tm = [sum(measured[s].values()) for s in ("stock", "solver")]
    tp = [sum(modelled[s].values()) for s in ("stock", "solver")]
    lines.append(
        f"| **all** | {tm[0]:,.0f} | {tm[1]:,.0f} | {tm[1] - tm[0]:+,.0f} | {tp[0]:,.0f} | {tp[1]:,.0f} | {tp[1] - tp[0]:+,.0f} |"
    )
    return lines + [""]


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--models", default=",".join([*ZOO, "decoder_kv"]))
    parser.add_argument("--profile", default="lavapipe")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    lines = [
        harness.provenance("device times from the runtime's query pool, median of runs"),
        "",
    ]
    for model in args.models.split(","):
        for method, (measured, modelled) in measure(model, args.profile, args.runs).items():
            part = table(model if method == "forward" else f"{model} ({method})", measured, modelled)
            print("\n".join(part), flush=True)
            lines += part
    harness.write(lines, args.out)


if __name__ == "__main__":
    main()
