"""Which tests the PostgreSQL pass runs (tests/conftest.py `uses_database`, N17Q_TEST_DATABASE_ONLY=1): the tests that
open a database connection, less those marked `database_incidental`; the SQLite pass runs every test."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, cast

from tests.conftest import pytest_collection_modifyitems, uses_database


@dataclass
class _Item:
    """What `uses_database` reads of a collected test: its markers and the fixtures it asks for."""

    name: str
    markers: tuple[str, ...] = ()
    fixturenames: tuple[str, ...] = field(default=())

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


ITEMS = [
    _Item("marked django_db", ("django_db",)),
    _Item("asks for db", fixturenames=("db", "tmp_path")),
    _Item("a live server", fixturenames=("live_server",)),
    _Item("rows only lead to it", ("django_db", "database_incidental")),
    _Item("opens no connection", fixturenames=("tmp_path",)),
]


def test_the_database_pass_keeps_what_touches_the_database_and_leaves_out_what_is_incidental(monkeypatch):
    kept = [i.name for i in ITEMS if uses_database(cast(Any, i))]
    assert kept == ["marked django_db", "asks for db", "a live server"]

    class Config:
        class hook:  # pytest's spelling: config.hook.pytest_deselected
            deselected: list = []

            @classmethod
            def pytest_deselected(cls, items):
                cls.deselected.extend(items)

    items = list(ITEMS)
    monkeypatch.setenv("N17Q_TEST_DATABASE_ONLY", "1")
    pytest_collection_modifyitems(Config, items)
    assert [i.name for i in items] == ["marked django_db", "asks for db", "a live server"]
    assert [i.name for i in Config.hook.deselected] == ["rows only lead to it", "opens no connection"]
    # The SQLite pass runs everything.
    items = list(ITEMS)
    monkeypatch.setenv("N17Q_TEST_DATABASE_ONLY", "0")
    pytest_collection_modifyitems(Config, items)
    assert items == ITEMS
