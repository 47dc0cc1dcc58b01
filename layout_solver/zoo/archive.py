"""A zoo run's cached results as one compressed file (`OUT/cache.jsonl.gz`): what a run keeps in the repository
instead of one JSON per model and target. A run reads the archive as it reads `OUT/cache/` (`restore`, before
it looks for cached results), so the command that made it resumes from it; `layout-solver zoo --archive` writes
it after the run (`pack`)."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

ARCHIVE = "cache.jsonl.gz"


def pack(out: Path) -> Path:
    """Every result in `out/cache/` into `out/ARCHIVE`, one JSON line per result ({"key", "result"}), sorted by key
    and with no timestamp in the gzip header: the same results give the same bytes."""
    lines = [
        json.dumps({"key": path.stem, "result": json.loads(path.read_text())}, sort_keys=True)
        for path in sorted((out / "cache").glob("*.json"))
    ]
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as archive:
        archive.write(("\n".join(lines) + "\n").encode() if lines else b"")
    target = out / ARCHIVE
    target.write_bytes(buffer.getvalue())
    return target


def restore(out: Path) -> int:
    """The archived results `out/cache/` lacks, written there (a result already in the cache is kept: it is the
    newer); how many. Nothing when there is no archive."""
    source = out / ARCHIVE
    if not source.exists():
        return 0
    cache = out / "cache"
    cache.mkdir(parents=True, exist_ok=True)
    restored = 0
    for line in gzip.decompress(source.read_bytes()).decode().splitlines():
        entry = json.loads(line)
        path = cache / f"{entry['key']}.json"
        if not path.exists():
            path.write_text(json.dumps(entry["result"]))
            restored += 1
    return restored
