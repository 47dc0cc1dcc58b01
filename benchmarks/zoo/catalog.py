"""The transformers catalog (`layout_solver.zoo.catalog`): which architectures build and export, and why not.

Run: .venv/bin/python -m benchmarks.zoo.catalog [--modality vision|audio|text] [--all-tasks] [--timeout 180]
     [--out benchmarks/results/zoo_transformers_catalog.md]

Every architecture of the installed transformers' catalog (one task each: its first, as `zoo --source
transformers` takes them; `--all-tasks` for every task) is built by the catalog's shrinking rule with random
weights, run once in eager mode and exported with `torch.export.export`; the table says which stage failed and
why. Stock-against-solver comparisons of the catalog run through the zoo: `layout-solver zoo --source transformers
--target ...`.
"""

from __future__ import annotations

import contextlib
import io
import logging
import signal
import time
import warnings
from collections import Counter

import torch

from benchmarks import harness
from layout_solver.zoo import catalog


class _TimedOut(Exception):
    pass


def _alarm(*_):
    raise _TimedOut


def check(name: str, timeout: int) -> tuple[str, str, float, int]:
    """(stage reached: "ok" / "build" / "run" / "export", the failure's first line, seconds, parameters)."""
    started, stage, params = time.perf_counter(), "build", 0
    signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        torch.manual_seed(0)
        try:
            module, inputs = catalog.build_entry(name)  # runs the model once in eager
        except catalog.DoesNotRun as exc:
            stage, params = "run", exc.parameters
            raise exc.__cause__ from None
        params = sum(p.numel() for p in module.parameters())
        stage = "export"
        torch.export.export(module, inputs)
        return "ok", "", time.perf_counter() - started, params
    except _TimedOut:
        return stage, f"timed out after {timeout} s", time.perf_counter() - started, params
    except Exception as exc:  # noqa: BLE001 - every failure is a row of the table
        text = (str(exc).strip().splitlines() or [""])[0][:200].replace("|", "/")
        return stage, f"{type(exc).__name__}: {text}", time.perf_counter() - started, params
    finally:
        signal.alarm(0)


def main() -> None:
    parser = harness.parser(__doc__)
    parser.add_argument("--modality", choices=catalog.MODALITIES)
    parser.add_argument("--all-tasks", action="store_true", help="every (architecture, task), not one task each")
    parser.add_argument("--timeout", type=int, default=180, help="seconds per architecture (default %(default)s)")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    names = [e.name for e in catalog.catalog(args.modality)] if args.all_tasks else catalog.default_names(args.modality)
    modality = {e.name: e.modality for e in catalog.catalog()}
    rows = []
    for k, name in enumerate(names, 1):
        with contextlib.redirect_stdout(io.StringIO()):
            stage, reason, seconds, params = check(name, args.timeout)
        rows.append((name, modality[name], stage, reason, seconds, params))
        print(f"[{k}/{len(names)}] {name}: {stage} {reason} ({seconds:.1f} s)", flush=True)
    built = [r for r in rows if r[2] == "ok"]
    lines = [
        harness.provenance(tools=("transformers", "torch")),
        "",
        f"- architectures: {len(rows)}; built, ran and exported: **{len(built)}**"
        + "".join(
            f"; {m}: {sum(1 for r in built if r[1] == m)} of {sum(1 for r in rows if r[1] == m)}"
            for m in catalog.MODALITIES
            if any(r[1] == m for r in rows)
        ),
        "- failed at: "
        + ", ".join(f"{stage} {n}" for stage, n in Counter(r[2] for r in rows if r[2] != "ok").most_common()),
        "",
        *harness.table(
            ("model", "modality", "result", "parameters", "seconds", "reason"),
            (
                (name, kind, "ok" if stage == "ok" else f"failed at {stage}", f"{params:,}", f"{seconds:.1f}", reason)
                for name, kind, stage, reason, seconds, params in rows
            ),
        ),
    ]
    harness.emit(lines, args.out)


if __name__ == "__main__":
    main()
