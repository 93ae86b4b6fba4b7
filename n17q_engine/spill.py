"""Per-event state that moves to disk when a run is large, so that a check's memory stays bounded (issue 20).

The lineage checker keeps, for every event, its id (to tell a reference it can resolve from a dangling one) and,
for a hostile bundle, a dangling reference or a finding per event too. Held in dicts, that is about half a
kilobyte per event: a million-event bundle asked for gigabytes. These two containers behave like the dicts they
replace while a run is small (they *are* those dicts then: same speed), and past `SPILL_AFTER` entries move
their contents into a private SQLite database in a temporary file (the standard library's `sqlite3`, no server,
deleted when closed). Lookups then cost a query each (microseconds) instead of a hash probe; the order of
iteration is kept (insertion order, as a dict's); the pages SQLite caches are bounded (`CACHE_KIB`).

Exactness is not traded for memory: every id is kept whole, nothing is hashed down or sampled.
"""

from __future__ import annotations

import pickle
import sqlite3
from collections.abc import Iterable, Iterator
from typing import Any

# Entries kept in memory before a container moves to disk; each costs a few hundred bytes in a dict.
SPILL_AFTER = 50_000
# Writes to the disk store are batched; this many wait in memory at most.
PENDING_MAX = 5_000
# SQLite's page cache for the store (KiB): enough for the upper levels of the id index, bounded whatever the run.
CACHE_KIB = 4 * 1024
_FETCH = 2_000

_MISSING: Any = object()


def _open_store() -> sqlite3.Connection:
    # "" opens a private on-disk temporary database, removed when the connection closes. Nothing here needs
    # durability: the store lives as long as one check.
    db = sqlite3.connect("", isolation_level=None, check_same_thread=False)
    db.execute(f"PRAGMA cache_size = -{CACHE_KIB}")
    db.execute("PRAGMA journal_mode = OFF")
    db.execute("PRAGMA synchronous = OFF")
    db.execute("PRAGMA temp_store = FILE")
    return db


class SpilledIndex:
    """A str -> int mapping on disk, with the part of a dict's interface the checker uses: `in`, `get`, `[]`,
    assignment, iteration in insertion order, `len`. New keys wait in `_pending` (a dict) and are written in
    batches.

    The batch written last stays in memory too (`_recent`, replaced at the next write): most lookups name an event
    a few dozen events back (a result its call, a change its cause), and a hash probe answers those where the store
    costs a query each (at 100,000 events, a second of an import). Memory stays bounded: two batches at most."""

    def __init__(self, items: Iterable[tuple[str, int]]) -> None:
        self._db = _open_store()
        # rowid order is insertion order; the UNIQUE index answers lookups.
        self._db.execute("CREATE TABLE ids (ord INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, value INTEGER)")
        self._pending: dict[str, int] = {}
        # Never stale: a key set again goes to `_pending`, which is asked first, and is written before `_recent` is
        # replaced by the batch that holds it.
        self._recent: dict[str, int] = {}
        self._len = 0
        self._db.execute("BEGIN")
        self._db.executemany("INSERT INTO ids (id, value) VALUES (?, ?)", items)
        self._db.execute("COMMIT")
        self._len = self._db.execute("SELECT COUNT(*) FROM ids").fetchone()[0]

    def _flush(self) -> None:
        if not self._pending:
            return
        self._db.execute("BEGIN")
        self._db.executemany(
            "INSERT INTO ids (id, value) VALUES (?, ?) ON CONFLICT (id) DO UPDATE SET value = excluded.value",
            self._pending.items(),
        )
        self._db.execute("COMMIT")
        self._recent, self._pending = self._pending, {}

    def _stored(self, key: str) -> Any:
        if type(key) is not str:
            return _MISSING
        row = self._db.execute("SELECT value FROM ids WHERE id = ?", (key,)).fetchone()
        return _MISSING if row is None else row[0]

    def _held(self, key: str) -> Any:
        """The value of `key` in memory (pending or just written), else from the store, else _MISSING."""
        value = self._pending.get(key, _MISSING)
        if value is _MISSING:
            value = self._recent.get(key, _MISSING)
            if value is _MISSING:
                value = self._stored(key)
        return value

    def get(self, key: str, default: Any = None) -> Any:
        value = self._held(key)
        return default if value is _MISSING else value

    def __contains__(self, key: object) -> bool:
        return self._held(key) is not _MISSING  # type: ignore[arg-type]

    def __getitem__(self, key: str) -> int:
        value = self._held(key)
        if value is _MISSING:
            raise KeyError(key)
        return value

    def __setitem__(self, key: str, value: int) -> None:
        if self._held(key) is _MISSING:
            self._len += 1
        self._pending[key] = value
        if len(self._pending) >= PENDING_MAX:
            self._flush()

    def __iter__(self) -> Iterator[str]:
        self._flush()
        cursor = self._db.execute("SELECT id FROM ids ORDER BY ord")
        while rows := cursor.fetchmany(_FETCH):
            for (key,) in rows:
                yield key

    def __len__(self) -> int:
        return self._len

    def __bool__(self) -> bool:
        return self._len > 0


class MultiMap(dict):
    """key -> list of items, in memory: a dict, plus `add` (what `setdefault(key, []).append(item)` did)."""

    def add(self, key: str, item: Any) -> None:
        self.setdefault(key, []).append(item)


class SpilledMultiMap:
    """key -> list of items on disk (items pickled: findings and reference tuples, made by the checker itself,
    never read from outside), with `MultiMap`'s interface: `add`, `get`, `pop`, assignment (replace a key's
    items), `in`, iteration over keys in order of first insertion, `len`, truth."""

    def __init__(self, items: Iterable[tuple[str, list[Any]]]) -> None:
        self._db = _open_store()
        self._db.execute("CREATE TABLE items (ord INTEGER PRIMARY KEY, key TEXT NOT NULL, item BLOB NOT NULL)")
        self._db.execute("CREATE INDEX items_key ON items (key, ord)")
        self._pending: list[tuple[str, bytes]] = []
        self._db.execute("BEGIN")
        self._db.executemany(
            "INSERT INTO items (key, item) VALUES (?, ?)",
            ((key, pickle.dumps(item)) for key, values in items for item in values),
        )
        self._db.execute("COMMIT")

    def _flush(self) -> None:
        if not self._pending:
            return
        self._db.execute("BEGIN")
        self._db.executemany("INSERT INTO items (key, item) VALUES (?, ?)", self._pending)
        self._db.execute("COMMIT")
        self._pending.clear()

    def add(self, key: str, item: Any) -> None:
        self._pending.append((key, pickle.dumps(item)))
        if len(self._pending) >= PENDING_MAX:
            self._flush()

    def get(self, key: str, default: Any = None) -> Any:
        self._flush()
        rows = self._db.execute("SELECT item FROM items WHERE key = ? ORDER BY ord", (key,)).fetchall()
        return [pickle.loads(item) for (item,) in rows] if rows else default

    def __contains__(self, key: object) -> bool:
        self._flush()
        return self._db.execute("SELECT 1 FROM items WHERE key = ? LIMIT 1", (key,)).fetchone() is not None

    def pop(self, key: str, default: Any = _MISSING) -> Any:
        found = self.get(key, _MISSING)
        if found is _MISSING:
            if default is _MISSING:
                raise KeyError(key)
            return default
        self._db.execute("DELETE FROM items WHERE key = ?", (key,))
        return found

    def __setitem__(self, key: str, items: list[Any]) -> None:
        self._flush()
        self._db.execute("BEGIN")
        self._db.execute("DELETE FROM items WHERE key = ?", (key,))
        self._db.executemany("INSERT INTO items (key, item) VALUES (?, ?)", ((key, pickle.dumps(i)) for i in items))
        self._db.execute("COMMIT")

    def __iter__(self) -> Iterator[str]:
        self._flush()
        cursor = self._db.execute("SELECT key FROM items GROUP BY key ORDER BY MIN(ord)")
        while rows := cursor.fetchmany(_FETCH):
            for (key,) in rows:
                yield key

    def __len__(self) -> int:
        self._flush()
        return int(self._db.execute("SELECT COUNT(DISTINCT key) FROM items").fetchone()[0])

    def __bool__(self) -> bool:
        self._flush()
        return self._db.execute("SELECT 1 FROM items LIMIT 1").fetchone() is not None


def spill_index(index: dict[str, int] | SpilledIndex) -> dict[str, int] | SpilledIndex:
    """The index itself while it is small; past SPILL_AFTER entries, the same entries on disk."""
    if isinstance(index, dict) and len(index) > SPILL_AFTER:
        return SpilledIndex(index.items())
    return index


def spill_multimap(multimap: MultiMap | SpilledMultiMap) -> MultiMap | SpilledMultiMap:
    """The multimap itself while it holds few items; past SPILL_AFTER keys, the same items on disk."""
    if isinstance(multimap, MultiMap) and len(multimap) > SPILL_AFTER:
        return SpilledMultiMap(multimap.items())
    return multimap
