"""What the benchmarks share: the parser with `--out`, the provenance line (the command as run, the day, the
installed tools' versions, the machine), markdown tables, paired ratios and their geometric mean, printing and
writing the result."""

from __future__ import annotations

import argparse
import math
import os
import shlex
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from layout_solver.lowering.provenance import tool_versions

# The tools a results line names, in this order, as "name version" (the ones installed).
NAMED_TOOLS = {"executorch": "executorch", "ethos-u-vela": "Vela", "torch": "torch", "transformers": "transformers"}


def parser(doc: str | None, out_help: str = "also write the result to this markdown file") -> argparse.ArgumentParser:
    """An argument parser showing the module's docstring, with the `--out FILE` every benchmark takes."""
    made = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    made.add_argument("--out", help=out_help)
    return made


def command() -> str:
    """The command that is running, as a reader would retype it from the repository root."""
    spec = getattr(sys.modules["__main__"], "__spec__", None)
    program = f"-m {spec.name}" if spec is not None else sys.argv[0]
    return f".venv/bin/python {program} {shlex.join(sys.argv[1:])}".rstrip()


def versions(tools: Iterable[str] = NAMED_TOOLS) -> str:
    """'executorch 1.5.1, Vela 5.1.0, torch 2.13.0+cpu' for the tools given that are installed."""
    installed = tool_versions(tuple(tools))
    return ", ".join(f"{NAMED_TOOLS.get(t, t)} {v}" for t, v in installed.items() if v != "absent")


def provenance(note: str = "", tools: Iterable[str] = NAMED_TOOLS) -> str:
    """The line every result opens with: `Command: ... (day; versions; cores[; note])`."""
    parts = [time.strftime("%Y-%m-%d"), versions(tools), f"{os.cpu_count()}-core machine"]
    return f"Command: {command()} ({'; '.join(p for p in (*parts, note) if p)})"


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A markdown table: the header, its rule, one line per row (cells as given, None as empty)."""
    return [row(header), "|" + "---|" * len(header), *(row(cells) for cells in rows)]


def row(cells: Sequence[object]) -> str:
    """One markdown table row (None as an empty cell), for tables printed as they are measured."""
    return "| " + " | ".join("" if cell is None else str(cell) for cell in cells) + " |"


def ratio(solver: float | None, stock: float | None) -> float | None:
    """The paired ratio solver / stock of one measured quantity (None when either is missing or stock is 0)."""
    if solver is None or not stock:
        return None
    return solver / stock


def geomean(values: Iterable[float | None]) -> float:
    """The geometric mean of the positive values given (NaN if there are none)."""
    kept = [v for v in values if isinstance(v, (int, float)) and v > 0]
    return statistics.geometric_mean(kept) if kept else math.nan


def executed(row: dict) -> str:
    """A cell for one method's run on the device against eager: "-" (not run), "failed: why" or "max |diff| x"."""
    if "executed" not in row:
        return "-"
    if not row["executed"]:
        return f"failed: {str(row.get('execute_error'))[:60]}"
    return f"max |diff| {row.get('max_abs_diff_vs_eager', float('nan')):.2g}"


def emit(lines: list[str], out: str | Path | None) -> None:
    """Print the result and, with `--out`, write it to that file."""
    print("\n".join(lines))
    write(lines, out)


def write(lines: list[str], out: str | Path | None) -> None:
    """With `--out`, write the result (already printed as it came) to that file."""
    if out:
        Path(out).write_text("\n".join(lines) + "\n")
