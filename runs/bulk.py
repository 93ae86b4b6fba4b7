"""Fast appends of many rows for the importer: in its one transaction, or on SQLite in slices.

`bulk_create` builds a model instance and prepares every field of every row: at 100,000 events that
was two thirds of an import's time. The importer already holds validated values, so it writes rows as
tuples instead: `executemany` on SQLite, `COPY` on PostgreSQL. Primary keys are reserved up front so
that edges can point at events written in the same batch without reading them back.
"""

from __future__ import annotations

import gc
import queue
import sqlite3
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any, Protocol

from django.apps import apps
from django.db import connection

from console.gated_fields import GATED_FIELDS
from n17q_secrets.gate import GatedText


class Appender:
    def __init__(self, table: str, columns: Sequence[str], *, id_block: int = 1) -> None:
        self.table = table
        self.columns = tuple(columns)
        # The storage gate (issue 32): these rows bypass the fields' get_prep_value, so a gated column takes only a
        # GatedText here (the JSON text the import's scan passed: n17q_secrets.gate.already_masked), or None.
        self.gated = _gated_positions(table, self.columns)
        self._next_id: int | None = None
        self.id_block = id_block
        self._pool: list[int] = []

    def prime(self, count: int, ahead: KeysAhead | None = None) -> None:
        """Reserve `count` keys now, for `take_ids` to draw on later: those `ahead` reserved, if it could."""
        reserved = ahead.keys() if ahead is not None else None
        self._pool.extend(reserved if reserved is not None and len(reserved) == count else self.reserve_ids(count))

    def take_ids(self, count: int) -> list[int]:
        """`count` fresh primary keys, drawn from blocks of `id_block` reserved at a time.

        On PostgreSQL each reservation is a query that waits for the connection while the writer
        thread streams a COPY, so reserving in blocks keeps the parser from stalling. Unused keys of a
        block are simply never used (gaps in a sequence are harmless).
        """
        if len(self._pool) < count:
            self._pool.extend(self.reserve_ids(max(count - len(self._pool), self.id_block)))
        taken, self._pool = self._pool[:count], self._pool[count:]
        return taken

    def reserve_ids(self, count: int) -> list[int]:
        """`count` fresh primary keys for rows this transaction will insert."""
        if count <= 0:
            return []
        with connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                # Values drawn from the table's own identity sequence are unique across concurrent imports.
                cursor.execute(
                    "SELECT nextval(pg_get_serial_sequence(%s, 'id')) FROM generate_series(1, %s)",
                    [self.table, count],
                )
                return [row[0] for row in cursor.fetchall()]
            if not connection.in_atomic_block:
                # In slices (runs/import_slices.py), other writers insert between this import's batches.
                return _sqlite_reserve(cursor, self.table, count)
            if self._next_id is None:
                # In one transaction, which holds the write lock from its start (transaction_mode IMMEDIATE), nobody
                # else inserts until it commits: the next key is read once and counted on here, so the parser never
                # touches the connection the writer thread is using. Past every key reserved in slices, too.
                cursor.execute(
                    f'SELECT MAX((SELECT COALESCE(MAX(id), 0) FROM "{self.table}"), '
                    "COALESCE((SELECT seq FROM sqlite_sequence WHERE name = %s), 0))",
                    [self.table],
                )
                self._next_id = int(cursor.fetchone()[0]) + 1
            start = self._next_id
            self._next_id += count
            return list(range(start, start + count))

    def insert(self, rows: Sequence[tuple[Any, ...]]) -> None:
        connection.ensure_connection()
        self.execute(connection.connection, self.prepare(connection.connection, connection.vendor, rows))

    def prepare(self, raw: Any, vendor: str, rows: Sequence[tuple[Any, ...]]) -> list[tuple[str, Any]]:
        """The statements that insert `rows`, with their data, ready for `execute`.

        Preparing is Python work (it needs the GIL); executing is the database's (it does not), so a
        writer thread is handed prepared statements and spends its time where the GIL is free.
        """
        if not rows:
            return []
        for i in self.gated:
            for row in rows:
                if row[i] is not None and type(row[i]) is not GatedText:
                    raise TypeError(
                        f"{self.table}.{self.columns[i]} is a gated column: append what the storage gate produced "
                        f"(n17q_secrets.gate), not {type(row[i]).__name__}"
                    )
        cols = ", ".join(f'"{c}"' for c in self.columns)
        if vendor == "postgresql":
            return [(f'COPY "{self.table}" ({cols}) FROM STDIN', _copy_text(rows))]
        # Many rows per statement: SQLite then runs one step for the lot with the GIL released, where
        # executemany would hand the GIL back and forth once per row.
        width = len(self.columns)
        per_statement = max(1, min(1000, raw.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) // width))
        one = "(" + ", ".join(["?"] * width) + ")"
        statements = []
        for start in range(0, len(rows), per_statement):
            part = rows[start : start + per_statement]
            sql = f'INSERT INTO "{self.table}" ({cols}) VALUES {", ".join([one] * len(part))}'
            statements.append((sql, [value for row in part for value in row]))
        return statements

    @staticmethod
    def execute(raw: Any, statements: list[tuple[str, Any]]) -> None:
        for sql, data in statements:
            if sql.startswith("COPY "):
                with raw.cursor() as cursor, cursor.copy(sql) as copy:
                    copy.write(data)
            else:
                raw.execute(sql, data)


class KeysAhead:
    """`count` keys of `table` reserved on PostgreSQL by a thread on a connection of its own, while the import reads
    its manifest and compiles its secret rules, for `Appender.prime` to take. The sequence hands out each value once,
    whatever session asks and whether or not its transaction commits, so these keys are as fresh as the import's own
    connection would reserve; the server's work for them (a `nextval` per key: a quarter of a second at 100,000 keys)
    is no longer on the import's path. `keys()` waits for them; None when the reservation failed (the caller
    reserves them itself, as before)."""

    def __init__(self, table: str, count: int) -> None:
        self._table, self._count = table, count
        self._keys: list[int] | None = None
        self._thread = threading.Thread(target=self._reserve, name="n17q-import-keys", daemon=True)
        self._thread.start()

    @staticmethod
    def wanted() -> bool:
        return connection.vendor == "postgresql"

    def _reserve(self) -> None:
        # This thread's own connection (Django's connections are per thread), in autocommit, closed at the end.
        try:
            self._keys = Appender(self._table, ("id",)).reserve_ids(self._count)
        except Exception:  # the import reserves them itself; a connection it cannot open fails it there, plainly
            self._keys = None
        finally:
            connection.close()

    def keys(self) -> list[int] | None:
        self._thread.join()
        return self._keys


def _gated_positions(table: str, columns: tuple[str, ...]) -> tuple[int, ...]:
    for model in apps.get_models():
        if model._meta.db_table == table:
            gated = {f.column for f in model._meta.concrete_fields if isinstance(f, GATED_FIELDS)}
            return tuple(i for i, c in enumerate(columns) if c in gated)
    raise LookupError(f"no model has the table {table}: its gated columns are not known")


# UPDATE … RETURNING (SQLite 3.35): a reservation in one statement. Slices need it (runs.import_slices.wanted).
SQLITE_HAS_RETURNING = sqlite3.sqlite_version_info >= (3, 35, 0)


def _sqlite_reserve(cursor: Any, table: str, count: int) -> list[int]:
    """`count` keys of `table` that no other insert will take, whatever writes between this and their insert.

    The history tables are AUTOINCREMENT: SQLite gives a new row max(sqlite_sequence's seq, the largest key) + 1,
    so raising `seq` past a block, in one statement, reserves it against every other writer (an ORM insert, another
    import).
    """
    bump = (
        f'UPDATE sqlite_sequence SET seq = MAX(seq, (SELECT COALESCE(MAX(id), 0) FROM "{table}")) + %s '
        "WHERE name = %s RETURNING seq"
    )
    for _attempt in range(2):
        cursor.execute(bump, [count, table])
        # fetchall, not fetchone: a write statement not read to its end keeps its transaction (and the lock) open.
        rows = cursor.fetchall()
        if rows:
            end = int(rows[0][0])
            return list(range(end - count + 1, end + 1))
        # The table never had a row, so SQLite keeps no sequence for it yet.
        cursor.execute(
            "INSERT INTO sqlite_sequence (name, seq) SELECT %s, 0 "
            "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = %s)",
            [table, table],
        )
    raise RuntimeError(f"no sequence for {table}")


def _copy_str(value: str) -> str:
    # COPY's text format: a backslash, tab, newline or carriage return inside a value is escaped.
    if "\\" in value or "\t" in value or "\n" in value or "\r" in value:
        return value.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return value


def _copy_other(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, str):  # a subclass of str
        return _copy_str(value)
    return str(value)


# One lookup by exact type instead of a chain of isinstance checks: 1.6 million fields at 100,000 events.
_COPY_FORMAT: dict[type, Callable[[Any], str]] = {
    str: _copy_str,
    GatedText: _copy_str,  # an event's body (the storage gate's type)
    int: str,
    type(None): lambda _value: "\\N",
    datetime: datetime.isoformat,
}


def _copy_field(value: Any) -> str:
    return _COPY_FORMAT.get(type(value), _copy_other)(value)


def _copy_text(rows: Sequence[tuple[Any, ...]]) -> bytes:
    fmt = _COPY_FORMAT
    other = _copy_other
    return "".join(["\t".join([fmt.get(type(v), other)(v) for v in row]) + "\n" for row in rows]).encode("utf-8")


def datetime_adapter() -> Callable[[datetime], Any]:
    """How an aware datetime goes into a column, chosen once per import (Django's adapter, without its
    per-call overhead). SQLite stores UTC as naive ISO text, exactly what `adapt_datetimefield_value` gives."""
    if connection.vendor == "sqlite":
        # "…+00:00" cut from the UTC form; bundles mostly write UTC ("Z"), which needs no conversion.
        return lambda value: (value if value.tzinfo is UTC else value.astimezone(UTC)).isoformat(" ")[:-6]
    return lambda value: value


# While an import's writer thread runs, the interpreter hands the GIL between threads every 0.5 ms instead of
# Python's default 5 ms. The writer needs the GIL for a moment at every chunk of a COPY and at every statement;
# with the parser holding it, each of those moments waited up to a whole interval, and at 100,000 events on
# PostgreSQL that waiting was a quarter of the import (docs/benchmarks.md). The first import in a process sets
# it, the last one to finish puts the previous value back.
WRITER_SWITCH_INTERVAL_S = 0.0005
_switch_lock = threading.Lock()
_switch_users = 0
_switch_saved = 0.0


def _writer_switch_interval(start: bool) -> None:
    global _switch_users, _switch_saved
    with _switch_lock:
        if start:
            if _switch_users == 0:
                _switch_saved = sys.getswitchinterval()
                sys.setswitchinterval(min(_switch_saved, WRITER_SWITCH_INTERVAL_S))
            _switch_users += 1
        else:
            _switch_users -= 1
            if _switch_users == 0:
                sys.setswitchinterval(_switch_saved)


# While an import runs, the cyclic garbage collector's youngest generation waits for IMPORT_GC_THRESHOLD new objects
# instead of Python's 700. An import makes no reference cycles worth collecting: its decoded events, rows and the
# lineage graph's entries are freed by reference counting. But a batch of 2,000 decoded events is tens of thousands
# of objects alive at once, so at the default the collector made some 950 passes over them during a 100,000-event
# import, and a few full passes over everything the process holds: 0.8-1 s of it (docs/decisions.md, issue 17). The
# collector still runs, only rarely. The first import in a process raises the threshold, the last one to finish puts
# the previous value back; a process that turned automatic collection off (threshold 0) keeps it off.
IMPORT_GC_THRESHOLD = 50_000
_gc_lock = threading.Lock()
_gc_users = 0
_gc_saved: tuple[int, ...] = ()


@contextmanager
def fewer_collections() -> Iterator[None]:
    global _gc_users, _gc_saved
    with _gc_lock:
        if _gc_users == 0:
            _gc_saved = gc.get_threshold()
            if _gc_saved[0]:
                gc.set_threshold(max(_gc_saved[0], IMPORT_GC_THRESHOLD), *_gc_saved[1:])
        _gc_users += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_users -= 1
            if _gc_users == 0:
                gc.set_threshold(*_gc_saved)


class Slices(Protocol):
    """How a writer thread commits in slices (runs.import_slices.ImportSlices): on a connection of its own, each
    batch of statements in a transaction of its own."""

    def connect(self) -> Any:
        """Open the writer's own connection (in the writer's thread) and return its DB-API connection."""

    def write(self, raw: Any, statements: list[tuple[str, Any]]) -> None:
        """Execute `statements` on `raw` in one transaction, committed before this returns."""

    def disconnect(self) -> None:
        """Close the writer's connection (in the writer's thread)."""


class BackgroundInserts:
    """Runs the inserts of one import on a second thread while the first goes on parsing.

    The database driver releases the GIL while the database works (sqlite3_step, the COPY stream), so on
    two cores parsing and writing overlap. Without `slices`, both threads use the one connection of the import's
    transaction: the worker through the raw DB-API connection, the caller only between batches (the driver
    serializes them). With `slices` (SQLite, runs.import_slices), the worker writes on a connection of its own and
    commits each batch in a transaction of its own. Any error in the worker is raised again from `submit` or
    `close`.
    """

    def __init__(self, slices: Slices | None = None) -> None:
        connection.ensure_connection()
        # The caller's connection prepares the statements (it knows the driver's limits) in either case.
        self._raw = connection.connection
        self._vendor = connection.vendor
        self._slices = slices
        if self._vendor == "postgresql":
            # Django's foreign keys are deferred to COMMIT. Checked at the end of each COPY instead, the
            # checks run on the writer thread while the parser goes on, not all at once in the commit.
            with connection.cursor() as cursor:
                cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        self._queue: queue.Queue[list[tuple[str, Any]] | None] = queue.Queue(maxsize=4)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._work, name="n17q-import-writer", daemon=True)
        _writer_switch_interval(True)
        self._thread.start()

    def _work(self) -> None:
        slices = self._slices
        raw = self._raw
        if slices is not None:
            try:
                raw = slices.connect()
            except BaseException as exc:
                self._error = exc
        try:
            while True:
                job = self._queue.get()
                if job is None:
                    return
                if self._error is not None:
                    continue  # drain: the caller will see the first error
                try:
                    if slices is None:
                        Appender.execute(raw, job)
                    else:
                        slices.write(raw, job)
                except BaseException as exc:
                    self._error = exc
        finally:
            if slices is not None:
                slices.disconnect()

    def submit(self, appender: Appender, rows: Sequence[tuple[Any, ...]]) -> None:
        self._raise()
        if rows:
            self._queue.put(appender.prepare(self._raw, self._vendor, rows))

    def close(self) -> None:
        """Wait for every submitted insert; raise the first error any of them had."""
        self._queue.put(None)
        self._thread.join()
        _writer_switch_interval(False)
        self._raise()

    def abandon(self) -> None:
        """Stop after a refusal: the transaction is rolled back (or, in slices, the rows removed), so pending rows
        no longer matter."""
        self._error = self._error or RuntimeError("import abandoned")
        self._queue.put(None)
        self._thread.join()
        _writer_switch_interval(False)

    def _raise(self) -> None:
        if self._error is not None:
            raise self._error
