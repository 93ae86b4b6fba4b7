"""Per-event state that moves to disk when a run is large, so that a check's memory stays bounded (issue 20).

The lineage checker keeps, for every event, its id (to tell a reference it can resolve from a dangling one) and,
for a hostile bundle, a dangling reference or a finding per event too. Held in dicts, that is about half a
kilobyte per event: a million-event bundle asked for gigabytes. These two containers behave like the dicts they
replace while a run is small (they *are* those dicts then: same speed), and past `SPILL_AFTER` entries move
their contents into a private SQLite database in a temporary file (the standard library's `sqlite3`, no server,
deleted when closed). Lookups then cost a query each (microseconds) instead of a hash probe; the order of
iteration is kept (insertion order, as a dict's); the pages SQLite caches are bounded (`CACHE_KIB`).

Exactness is not traded for memory: every id is kept whole, nothing is hashed down or sampled. (The index's filter
below only tells which keys were certainly never added; any other key is asked of the store.)

While an import runs, other threads (its writer, its secret scan) wait for the interpreter's lock, and every call
into SQLite hands it to them and waits to get it back. So the stores are written many rows to a statement, and a key
the index never held, as every new event's id is, is told apart without a query.
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
# Rows written by one INSERT: one step of SQLite's for them all, where executemany made one (and handed the
# interpreter's lock to another thread and back) per row.
ROWS_PER_STATEMENT = 400

_MISSING: Any = object()


def _insert_rows(db: sqlite3.Connection, into: str, rows: Iterable[tuple[Any, Any]], *, then: str = "") -> None:
    """Insert two-column `rows` with `INSERT INTO {into} VALUES (?, ?), …{then}`, ROWS_PER_STATEMENT at a time."""
    chunk: list[Any] = []
    for row in rows:
        chunk.extend(row)
        if len(chunk) == 2 * ROWS_PER_STATEMENT:
            db.execute(f"INSERT INTO {into} VALUES {', '.join(['(?, ?)'] * ROWS_PER_STATEMENT)}{then}", chunk)
            chunk = []
    if chunk:
        db.execute(f"INSERT INTO {into} VALUES {', '.join(['(?, ?)'] * (len(chunk) // 2))}{then}", chunk)


class _KeyFilter:
    """The keys an index certainly never held: a Bloom filter, two bits of a bit array per key drawn from the key's
    hash (Python caches a string's hash, so this costs two probes of a bytearray). It answers "maybe" for every key
    added and for about 1.5% of the others (16 bits per key); the index asks the store about those, so answers stay
    exact, and a new id costs no query. 2 bytes per key: 2 MB at a million events."""

    BITS_PER_KEY = 16

    def __init__(self, capacity: int) -> None:
        bits = 1 << max(16, (capacity * self.BITS_PER_KEY - 1).bit_length())
        self.capacity = bits // self.BITS_PER_KEY
        self._mask = bits - 1
        self._bits = bytearray(bits // 8)

    def add(self, key: Any) -> None:
        h = hash(key)
        i, j = h & self._mask, (h >> 32) & self._mask
        self._bits[i >> 3] |= 1 << (i & 7)
        self._bits[j >> 3] |= 1 << (j & 7)

    def __contains__(self, key: Any) -> bool:
        h = hash(key)
        i, j = h & self._mask, (h >> 32) & self._mask
        return bool(self._bits[i >> 3] & (1 << (i & 7))) and bool(self._bits[j >> 3] & (1 << (j & 7)))


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
        # rowid order is insertion order; the UNIQUE index answers lookups. It is made after the first rows are in
        # (one sort, where inserting into it row by row cost more than the rows).
        self._db.execute("CREATE TABLE ids (ord INTEGER PRIMARY KEY, id TEXT NOT NULL, value INTEGER)")
        self._pending: dict[str, int] = {}
        # Never stale: a key set again goes to `_pending`, which is asked first, and is written before `_recent` is
        # replaced by the batch that holds it.
        self._recent: dict[str, int] = {}
        self._filter = _KeyFilter(2 * SPILL_AFTER)
        self._len = 0
        self._db.execute("BEGIN")
        _insert_rows(self._db, "ids (id, value)", self._filtered(items))
        self._db.execute("CREATE UNIQUE INDEX ids_id ON ids (id)")
        self._db.execute("COMMIT")
        if self._len > self._filter.capacity:
            self._grow_filter()

    def _filtered(self, items: Iterable[tuple[str, int]]) -> Iterator[tuple[str, int]]:
        """`items` on their way to the store, each key added to the filter and counted."""
        for key, value in items:
            self._filter.add(key)
            self._len += 1
            yield key, value

    def _flush(self) -> None:
        if not self._pending:
            return
        self._db.execute("BEGIN")
        _insert_rows(
            self._db,
            "ids (id, value)",
            self._pending.items(),
            then=" ON CONFLICT (id) DO UPDATE SET value = excluded.value",
        )
        self._db.execute("COMMIT")
        self._recent, self._pending = self._pending, {}

    def _grow_filter(self) -> None:
        """A filter for twice the keys held, from the store: past its capacity a filter answers "maybe" too often."""
        self._flush()
        self._filter = _KeyFilter(2 * self._len)
        cursor = self._db.execute("SELECT id FROM ids")
        while rows := cursor.fetchmany(_FETCH):
            for (key,) in rows:
                self._filter.add(key)

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
            if value is _MISSING and key in self._filter:
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
            self._filter.add(key)
        self._pending[key] = value
        if len(self._pending) >= PENDING_MAX:
            self._flush()
        if self._len > self._filter.capacity:
            self._grow_filter()

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
        _insert_rows(
            self._db, "items (key, item)", ((key, pickle.dumps(item)) for key, values in items for item in values)
        )
        self._db.execute("COMMIT")

    def _flush(self) -> None:
        if not self._pending:
            return
        self._db.execute("BEGIN")
        _insert_rows(self._db, "items (key, item)", self._pending)
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
