"""What the benchmarks share: the parser with `--out`, printing and writing the result, geometric means of
paired ratios. (Each script still writes its own provenance line and table header.)"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Iterable
from pathlib import Path


def parser(doc: str | None, out_help: str = "also write the result to this markdown file") -> argparse.ArgumentParser:
    """An argument parser showing the module's docstring, with the `--out FILE` every benchmark takes."""
    made = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    made.add_argument("--out", help=out_help)
    return made


def emit(lines: list[str], out: str | Path | None) -> None:
    """Print the result and, with `--out`, write it to that file."""
    print("\n".join(lines))
    write(lines, out)


def write(lines: list[str], out: str | Path | None) -> None:
    """With `--out`, write the result (already printed as it came) to that file."""
    if out:
        Path(out).write_text("\n".join(lines) + "\n")


def geomean(values: Iterable[float | None]) -> float:
    """The geometric mean of the positive values given (NaN if there are none)."""
    kept = [v for v in values if isinstance(v, (int, float)) and v > 0]
    return statistics.geometric_mean(kept) if kept else math.nan
