"""Vulkan: how far one comparison's paired ratio strays from one timing process to the next.

Run: LAYOUT_SOLVER_VULKAN_RUNTIME=/path/to/libvkbackend.so \\
     .venv/bin/python -m benchmarks.vulkan.repeat --models a,b [--repeats 5] [--rounds 15] \\
     [--profile default] [--out FILE]

Each repeat is the zoo's own comparison (`compare MODEL --target vulkan --execute`): a fresh export and lowering of
both sides, outputs checked in child processes, then both programs timed in one more child process, interleaved
for --rounds rounds; its paired ratio is the median over rounds of solver time / stock time (for two different
programs first read outside the target's 3%, the comparison's own median over five timing processes). A model whose two
programs are the same bytes measures the machine: the spread of its repeats is what one zoo verdict cannot
resolve. A model whose programs differ is judged by the median of its repeats' paired ratios, each repeat a
fresh timing process (and a fresh solve: the default objective's 30 s solve can pick another candidate, so the
table counts the distinct solver taggings the repeats lowered: transitions and tensor representations, as the
comparison records them; the program bytes themselves are not kept).
"""

from __future__ import annotations

import hashlib
import statistics

from benchmarks import harness
from layout_solver.zoo.runner import compare_named


def _tagging(record: dict) -> str:
    """A short name for a side's tagging: its transitions and tensor representations, as the comparison records them."""
    what = repr((record.get("transition_list"), sorted((record.get("tensors_by_repr") or {}).items())))
    return hashlib.sha1(what.encode()).hexdigest()[:6]


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--models", required=True, help="comma-separated zoo or catalog names")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=15, help="timed rounds per repeat (the zoo's: 15)")
    parser.add_argument("--profile", default="default", help="the solver's cost profile (default: the default)")
    parser.add_argument("--runtime", help="runtime plugin (default $LAYOUT_SOLVER_VULKAN_RUNTIME)")
    args = parser.parse_args()
    lines = [harness.provenance(f"{args.repeats} repeats of {args.rounds} interleaved rounds"), ""]
    header = ("model", "same program", "solver taggings", "paired ratio per repeat", "median", "min - max")
    print("\n".join([*lines, *harness.table(header, ())]), flush=True)
    rows = []
    for model in args.models.split(","):
        ratios, same, taggings = [], set(), set()
        for _ in range(args.repeats):
            result = compare_named(
                model, "vulkan", execute=True, runtime=args.runtime, cost_profile=args.profile, rounds=args.rounds
            ).to_json()
            if result.get("run_ratio_paired") is None:
                break  # a side did not run: nothing to repeat
            ratios.append(result["run_ratio_paired"])
            same.add(result.get("same_program"))
            taggings.add(_tagging(result.get("solver") or {}))
        cells = (
            model,
            "/".join(sorted(str(s) for s in same)) or None,
            len(taggings),
            ", ".join(f"{r:.3f}" for r in ratios) or "did not run",
            f"{statistics.median(ratios):.3f}" if ratios else None,
            f"{min(ratios):.3f} - {max(ratios):.3f}" if ratios else None,
        )
        rows.append(cells)
        print(harness.row(cells), flush=True)
    harness.write([*lines, *harness.table(header, rows)], args.out)


if __name__ == "__main__":
    main()
