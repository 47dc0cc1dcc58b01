"""Content-addressed solution cache on disk, shared by every worker and every process.

Key: `problem_digest()` (the problem's canonical JSON minus its name) plus the
solver's version, so an upgraded solver never serves an old answer. One file
per entry, ``<dir>/<key[:2]>/<key>.json``: a first line of metadata (status,
the time limit it was solved with), then the solution JSON as the solver wrote
it, served without re-encoding. Writers go through a temporary file and
``os.replace`` (atomic on POSIX): a reader sees a whole entry or none, and two
writers of one key leave one whole entry. The directory is kept under
`max_bytes` by evicting the least recently used entries (a hit refreshes the
file's mtime); eviction holds an flock so concurrent evictors do not race.
Each process tracks the size it wrote and rescans the directory every
`RESCAN_EVERY` writes (other processes share the directory), so a put does not
list the whole cache.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from layout_solver import __version__
from layout_solver.core.problem import Problem, problem_digest

DEFAULT_MAX_BYTES = 1 << 30
RESCAN_EVERY = 64
# A put's temporary file older than this was left by a writer killed mid-put (a live put takes milliseconds).
STALE_PART_SECONDS = 3600.0


def cache_key(problem: Problem) -> str:
    """The solver version and the problem's content address: an upgraded solver never serves an old answer."""
    return f"v{__version__}-{problem_digest(problem)}"


@dataclass(frozen=True)
class CacheEntry:
    """One cached solution: its JSON, status, the time limit it was solved with and the problem's name."""

    solution_json: bytes
    status: str  # "optimal" | "feasible"
    time_limit: float  # the limit it was solved with
    name: str = ""  # the problem name inside solution_json

    def serves(self, time_limit: float) -> bool:
        """An optimal answer serves any request; a time-limited one only requests that allow no more time."""
        return self.status == "optimal" or time_limit <= self.time_limit


class SolutionCache:
    """`get(key)` / `put(key, entry)` over a directory; safe under concurrent readers and writers."""

    def __init__(self, directory: str | Path, max_bytes: int = DEFAULT_MAX_BYTES):
        if max_bytes <= 0:
            raise ValueError(f"cache size must be positive, got {max_bytes}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.max_bytes = max_bytes
        self._lock_path = self.directory / ".evict.lock"
        self._approx_bytes: int | None = None
        self._puts = 0

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}.json"

    def get(self, key: str) -> CacheEntry | None:
        """The cached solution of a problem digest, or None."""
        path = self._path(key)
        try:
            head, _, solution = path.read_bytes().partition(b"\n")
            meta = json.loads(head)
            os.utime(path)  # recently used: evicted last
        except (OSError, ValueError):  # absent, evicted meanwhile, or unreadable: a miss
            return None
        return CacheEntry(solution, meta["status"], float(meta["time_limit"]), meta.get("name", ""))

    def put(self, key: str, entry: CacheEntry) -> None:
        """Store `entry` under `key` (written atomically), then evict the oldest entries past the size limit."""
        path = self._path(key)
        path.parent.mkdir(exist_ok=True)
        head = json.dumps({"status": entry.status, "time_limit": entry.time_limit, "name": entry.name}).encode()
        # Not "*.json": another process's eviction globs entries and must not take a file still being written.
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(head + b"\n" + entry.solution_json)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        self._evict(len(head) + 1 + len(entry.solution_json))

    def entries(self) -> list[tuple[float, int, Path]]:
        """(mtime, bytes, path) of every entry."""
        found = []
        for path in self.directory.glob("??/*.json"):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            found.append((st.st_mtime, st.st_size, path))
        return found

    def size_bytes(self) -> int:
        """The bytes the cache holds on disk."""
        return sum(size for _, size, _ in self.entries())

    def _evict(self, written: int) -> None:
        self._puts += 1
        if self._approx_bytes is None or self._puts % RESCAN_EVERY == 0:
            self._approx_bytes = self.size_bytes()
        else:
            self._approx_bytes += written
        if self._approx_bytes <= self.max_bytes:
            return
        with open(self._lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            stale = time.time() - STALE_PART_SECONDS
            for part in self.directory.glob("??/.tmp-*.part"):
                try:
                    if part.stat().st_mtime < stale:
                        part.unlink()
                except FileNotFoundError:
                    continue
            entries = sorted(self.entries())  # oldest first, re-read under the lock
            total = sum(size for _, size, _ in entries)
            for _, size, path in entries:
                if total <= self.max_bytes:
                    break
                path.unlink(missing_ok=True)
                total -= size
            self._approx_bytes = total
