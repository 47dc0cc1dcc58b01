"""Results kept on disk by content digest: one SQLite file of JSON values per kind of result, in the cache
folder (`cache_folder()`), shared by processes. Vela's probe answers, the verified lowering's
decisions and the Arm stage's answers are kept here; what makes a key (probe content, graph, constants, flags,
tool versions, the project's source) is each user's business."""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

CACHE_ENV = "LAYOUT_SOLVER_VELA_CACHE"


def cache_folder() -> Path:
    """Where answers are kept: $LAYOUT_SOLVER_VELA_CACHE, default ~/.cache/layout-solver/vela (read on each call)."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "layout-solver" / "vela")


class JsonStore:
    """JSON values by key, in memory and in `<directory>/<name>.sqlite` (in memory only if `directory` is None)."""

    def __init__(self, directory: Path | None, name: str):
        self.path = Path(directory) / f"{name}.sqlite" if directory is not None else None
        self.memory: dict[str, object] = {}
        self._db = None

    def _connect(self):
        if self.path is None:
            return None
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("CREATE TABLE IF NOT EXISTS store (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        return self._db

    def get(self, key: str):
        """The value stored under `key`, or None."""
        if key not in self.memory and (db := self._connect()) is not None:
            row = db.execute("SELECT value FROM store WHERE key = ?", (key,)).fetchone()
            if row is not None:
                self.memory[key] = json.loads(row[0])
        return self.memory.get(key)

    def __len__(self) -> int:
        """Values stored (on disk, or in memory without a folder)."""
        db = self._connect()
        return len(self.memory) if db is None else db.execute("SELECT COUNT(*) FROM store").fetchone()[0]

    def put(self, key: str, value) -> None:
        """Store `value` (anything json.dumps takes) under `key`, in memory and on disk."""
        self.memory[key] = value
        if (db := self._connect()) is not None:
            db.execute("INSERT OR REPLACE INTO store VALUES (?, ?)", (key, json.dumps(value)))


_OPEN: dict[tuple, JsonStore] = {}


def default_store(name: str, kind: type[JsonStore] | None = None) -> JsonStore:
    """The process-wide store `name` (of class `kind`, whose constructor takes the folder) in the cache folder
    of the moment (it follows LAYOUT_SOLVER_VELA_CACHE)."""
    where = (cache_folder(), name, kind)
    if where not in _OPEN:
        _OPEN[where] = JsonStore(where[0], name) if kind is None else kind(where[0])
    return _OPEN[where]
