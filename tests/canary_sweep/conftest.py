"""The canary sweep (issue 32, point 2): fresh canary secrets of every shape, planted through one door per test, then
the whole database, the sqlite file and the data folder read back (tests/canary_sweep/reader.py): zero canaries.

A door's test asks for `sweep`, plants `sweep.canaries` through its door the way a user or a harness would, checks
that the door took the input (a positive control: a refused input stores nothing and proves nothing), then calls
`sweep.check("<door>")`. A test that asks for `sweep` and never checks fails at teardown, so a door cannot join by
half. The tests are transactional: the sqlite file must hold what a real process would have committed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.fixtures_review.conftest import seed_scenarios  # noqa: F401 (a fixture, shared)

from . import reader
from .canaries import Canaries, Canary
from .reader import Hit, Snapshot


class Sweep:
    def __init__(self, canaries: Canaries, snapshot: Snapshot):
        self.canaries = canaries
        self.snapshot = snapshot
        self.checked: list[str] = []
        self.extra: list[Canary] = []

    def use(self, canaries: Canaries) -> None:
        """Sweep for canaries made once for a module (a door whose input is costly to make, like a real eval's
        log): still unknown to every file the snapshot saw, as long as they were made after the module began."""
        self.canaries = canaries

    def also(self, canary: Canary | Canaries) -> Canary | Canaries:
        """More canaries a door needs (a credential only the worker holds, a second set for a second door planted
        in the same test): swept like the others."""
        self.extra += canary.all if isinstance(canary, Canaries) else [canary]
        return canary

    def hits(self) -> list[Hit]:
        from django.db import connection

        return reader.sweep([*self.canaries.all, *self.extra], connection=connection, snapshot=self.snapshot)

    def check(self, door: str) -> None:
        self.checked.append(door)
        hits = self.hits()
        if not hits:
            return
        lines = [f"{len(hits)} canary hit(s) after the door {door!r} (shape: where):"]
        for area in ("database", "data folder", "sqlite file"):
            places: dict[str, tuple[set[str], set[str]]] = {}
            for hit in hits:
                if hit.area == area:
                    m = re.fullmatch(r"(.*?) row (\S+)(.*)", hit.where, re.S)
                    place, row = (m[1] + m[3], m[2]) if m else (hit.where, "")
                    shapes, rows = places.setdefault(place, (set(), set()))
                    shapes.add(hit.canary.shape)
                    rows.add(row)
            if places:
                lines.append(f"-- {area} --")
            for place, (shapes, rows) in places.items():
                at = f" (rows {', '.join(sorted(rows, key=lambda r: (len(r), r)))})" if any(rows) else ""
                lines.append(f"{door} | {place}{at} | {', '.join(sorted(shapes))}")
        pytest.fail("\n".join(lines), pytrace=False)


def data_roots(settings) -> list[Path]:
    """The data folder and every storage's location (a test's blob store lives outside the data folder)."""
    roots = [Path(settings.DATA_DIR)]
    for storage in settings.STORAGES.values():
        location = storage.get("OPTIONS", {}).get("location")
        if location:
            roots.append(Path(location))
    for cache in settings.CACHES.values():
        if cache["BACKEND"].endswith("FileBasedCache"):
            roots.append(Path(cache["LOCATION"]))
    return roots


@pytest.fixture
def sweep(request, settings, _blob_store, transactional_db):
    _blob_store.mkdir(parents=True, exist_ok=True)
    snapshot = Snapshot.take(data_roots(settings))
    made = Sweep(Canaries.fresh(), snapshot)  # made after the snapshot: no file taken before can hold them
    yield made
    call = getattr(request.node, "rep_call", None)
    if call is not None and call.passed and not made.checked:
        pytest.fail("a canary sweep test planted canaries and never called sweep.check(door)", pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report
