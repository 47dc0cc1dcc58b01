"""Ethos-U55 on models from outside the zoo: stock versus the solver stage, and what the remaining transposes are.

Run: .venv/bin/pip install -e .[outside]
     .venv/bin/python -m benchmarks.arm.outside [--models deit,levit,...] [--out benchmarks/results/arm_outside.md]

Per model (layout_solver/zoo/outside.py, Hugging Face configs, int8, ethos-u55-128, Vela 5.1): TOSA transposes,
Vela transpose and total cycles, the ops the solver runs in an algebraic mode (a transposed MATMUL), equivalence
of the two programs on the TOSA reference model, and each program against the quantized eager model (executorch's
INT test tolerance). Then the cost model's split of each side's
transpose cycles by cause: the delegate's input/output contract, Vela's own (MATMUL's second operand, REDUCE_SUM
along a non-innermost axis), and the layout inside the graph, the only part a layout assignment decides.
"""

from __future__ import annotations

from benchmarks import harness
from layout_solver.targets.ethos_u.measure import CAUSES
from layout_solver.zoo.runner import compare_named


def main() -> None:
    from layout_solver.zoo import outside

    parser = harness.parser(__doc__)
    parser.add_argument("--models", default=",".join(outside.MODELS))
    args = parser.parse_args()
    lines = [
        harness.provenance("stock vs solver_layouts(); ethos-u55-128"),
        "",
        *harness.table(
            (
                "model",
                "TOSA transposes stock / solver",
                "transpose cycles stock",
                "solver",
                "change",
                "total cycles stock",
                "solver",
                "change",
                "equivalent",
                "vs quantized eager: stock / solver (max quant steps)",
                "lower s stock",
                "solver",
                "algebraic modes (solver)",
            ),
            (),
        ),
    ]
    print("\n".join(lines), flush=True)
    results = {}
    for name in args.models.split(","):
        r = compare_named(f"outside:{name}", "ethos-u55-128").to_json()
        results[name] = r
        s, o = r.get("stock", {}), r.get("solver", {})
        if "error" in s or "error" in o:
            row = f"| {name} | stock: {s.get('error', 'ok')} | solver: {o.get('error', 'ok')} |"
        else:
            eager = " / ".join(
                f"{x.get('eager_check')}{'' if x.get('eager_within_tolerance') else ' (outside)'} "
                f"({x.get('eager_quant_steps')})"
                for x in (s, o)
            )
            equivalent = r.get("equivalent")
            if equivalent is None:
                refused = f"(reference: {r.get('stock_reference')} / {r.get('solver_reference')})"
                on_examples = r.get("equivalent_on_example_inputs")
                equivalent = (
                    f"not checked {refused}"
                    if on_examples is None
                    else f"{on_examples} on the example inputs; random inputs {refused}"
                )
            row = (
                f"| {name} | {s['tosa_transposes']} / {o['tosa_transposes']} | {s['vela_transpose_cycles']:,} | "
                f"{o['vela_transpose_cycles']:,} | {_change(s['vela_transpose_cycles'], o['vela_transpose_cycles'])} "
                f"| {s['vela_total_cycles']:,} | {o['vela_total_cycles']:,} | "
                f"{_change(s['vela_total_cycles'], o['vela_total_cycles'], '+.1%')} | {equivalent} | {eager} | "
                f"{s['lower_seconds']:.1f} | {o['lower_seconds']:.1f} | {_modes(o.get('modes_chosen'))} |"
            )
        lines.append(row)
        print(row, flush=True)
    ok = {n: r for n, r in results.items() if "error" not in r.get("stock", {}) and "error" not in r.get("solver", {})}
    stock_t = sum(r["stock"]["vela_transpose_cycles"] for r in ok.values())
    solver_t = sum(r["solver"]["vela_transpose_cycles"] for r in ok.values())
    summary = [
        "",
        (
            f"- Vela transpose cycles summed over {', '.join(ok)}: stock {stock_t:,}, solver {solver_t:,} "
            f"({_change(stock_t, solver_t)})"
        ),
        "- Vela total cycles <= stock on every model: "
        + str(all(r["solver"]["vela_total_cycles"] <= r["stock"]["vela_total_cycles"] for r in ok.values())),
        "- every program within executorch's INT tolerance of the quantized eager model: "
        + str(all(r[s].get("eager_within_tolerance") for r in ok.values() for s in ("stock", "solver"))),
        "",
        (
            "Predicted transpose cycles by cause (cost model on the compiled TOSA; it is within "
            f"{_worst_prediction_error(ok):.2%} of Vela's Transpose rows on every side here). graph_input / graph_output: next to a delegate input or output, set by "
            "the I/O contract (NCHW at the delegate boundary, and every CPU op splits the model into delegates); "
            "matmul_operand / reduction_axis: inserted by Vela itself for MATMUL's second operand and for REDUCE_SUM "
            "along a non-innermost axis; inside: the layout inside the graph."
        ),
        "",
        "| model | side | predicted | " + " | ".join(CAUSES) + " |",
        "|" + "---|" * (3 + len(CAUSES)),
    ]
    for name, r in ok.items():
        for side in ("stock", "solver"):
            causes = r[side]["transpose_cycles_by_cause"]
            summary.append(
                f"| {name} | {side} | {r[side]['predicted_transpose_cycles']:,.0f} | "
                + " | ".join(f"{causes[c]:,.0f}" for c in CAUSES)
                + " |"
            )
    inside = {s: sum(r[s]["transpose_cycles_by_cause"]["inside"] for r in ok.values()) for s in ("stock", "solver")}
    summary += [
        "",
        (
            f"- inside-the-graph transpose cycles, summed: stock {inside['stock']:,.0f}, solver {inside['solver']:,.0f} "
            f"({_change(inside['stock'], inside['solver'])})"
        ),
    ]
    print("\n".join(summary), flush=True)
    harness.write([*lines, *summary], args.out)


def _worst_prediction_error(results: dict) -> float:
    """Largest relative gap between the cost model's transpose cycles and Vela's Transpose rows, over every side."""
    return max(
        abs(r[s]["predicted_transpose_cycles"] - r[s]["vela_transpose_cycles"]) / r[s]["vela_transpose_cycles"]
        for r in results.values()
        for s in ("stock", "solver")
        if r[s]["vela_transpose_cycles"]
    )


def _modes(chosen: dict[str, int] | None) -> str:
    return ", ".join(f"{count} {mode}" for mode, count in sorted((chosen or {}).items())) or "none"


def _change(before: float, after: float, fmt: str = "+.0%") -> str:
    return format(after / before - 1, fmt) if before else "n/a"


if __name__ == "__main__":
    main()
