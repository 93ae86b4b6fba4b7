"""On PostgreSQL the importer's first event keys are reserved by a thread on a connection of its own while the import
reads its manifest (runs.bulk.KeysAhead): they must be as fresh as keys the import's own connection reserves (never
one another import or an ordinary insert could take), and a reservation that fails leaves the import to reserve them
itself, as it did before."""

from __future__ import annotations

import threading

import pytest
from django.db import connection

from runs import bulk
from runs.importer import run_import_from_path
from runs.models import Event, Run
from tests import bundles

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _postgresql_only():
    if connection.vendor != "postgresql":
        pytest.skip("keys are reserved ahead on PostgreSQL only (SQLite counts them in its one transaction)")


def test_keys_reserved_ahead_are_fresh_and_never_the_import_connection_s():
    table = Event._meta.db_table
    ahead = bulk.KeysAhead(table, 500)
    own = bulk.Appender(table, ("id",)).reserve_ids(500)
    keys = ahead.keys()
    assert keys is not None and len(keys) == len(set(keys)) == 500
    assert not set(keys) & set(own)
    run_import_from_path(bundles.EXAMPLE)  # an import after both: its rows take none of them
    assert not set(Event.objects.values_list("id", flat=True)) & (set(keys) | set(own))


def test_a_failed_reservation_ahead_leaves_the_import_to_reserve_its_keys(monkeypatch):
    real = bulk.Appender.reserve_ids
    main_thread = threading.main_thread()

    def refused_in_the_thread(self, count):
        if threading.current_thread() is not main_thread:
            raise RuntimeError("no connection for the thread")
        return real(self, count)

    monkeypatch.setattr(bulk.Appender, "reserve_ids", refused_in_the_thread)
    ahead = bulk.KeysAhead(Event._meta.db_table, 10)
    assert ahead.keys() is None
    appender = bulk.Appender(Event._meta.db_table, ("id",))
    appender.prime(10, ahead)
    assert len(appender.take_ids(10)) == 10
    result = run_import_from_path(bundles.EXAMPLE)  # the whole import, its keys reserved by itself
    assert Run.objects.get(run_id=result.run.run_id).event_count == Event.objects.filter(run=result.run).count() > 0
