"""What every benchmark shares: the parser with `--out`, a provenance line (the command, the date, the
installed tool versions), markdown tables, writing the result, paired ratios and geometric means."""

from __future__ import annotations

import argparse
import math
import shlex
import statistics
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from layout_solver.provenance import tool_versions


def parser(doc: str | None, out_help: str = "also write the result to this markdown file") -> argparse.ArgumentParser:
    """An argument parser showing the module's docstring, with the `--out FILE` every benchmark takes."""
    made = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    made.add_argument("--out", help=out_help)
    return made


def command() -> str:
    """The command line that ran this benchmark, as a user would type it from the repository root."""
    module = sys.modules["__main__"].__spec__
    head = f"-m {module.name}" if module is not None else shlex.quote(sys.argv[0])
    return f".venv/bin/python {head} {shlex.join(sys.argv[1:])}".rstrip()


def provenance(note: str = "") -> str:
    """One line: the command, the date, the versions of every tool that can change a number, and `note`."""
    versions = ", ".join(f"{tool} {version}" for tool, version in tool_versions().items())
    return f"Command: `{command()}` ({time.strftime('%Y-%m-%d')}; {versions}{'; ' + note if note else ''})"


def table(header: Sequence[str], rows: Iterable[Sequence]) -> list[str]:
    """A markdown table: the header, the rule, one line per row (cells as str())."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join("" if cell is None else str(cell) for cell in row) + " |" for row in rows]
    return lines


def emit(lines: list[str], out: str | Path | None) -> None:
    """Print the result and, with `--out`, write it to that file."""
    print("\n".join(lines))
    write(lines, out)


def write(lines: list[str], out: str | Path | None) -> None:
    """With `--out`, write the result (already printed as it came) to that file."""
    if out:
        Path(out).write_text("\n".join(lines) + "\n")


def ratio(solver: float | None, stock: float | None) -> float | None:
    """The solver side over the stock side of one paired measurement (None where either is missing or stock is 0)."""
    if not isinstance(solver, (int, float)) or not isinstance(stock, (int, float)) or not stock:
        return None
    return solver / stock


def geomean(values: Iterable[float | None]) -> float:
    """The geometric mean of the positive values given (NaN if there are none)."""
    kept = [v for v in values if isinstance(v, (int, float)) and v > 0]
    return statistics.geometric_mean(kept) if kept else math.nan
