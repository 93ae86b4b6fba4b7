"""A run's facts as stored (issue 34): the one place a page gets what a run's events say happened.

The import computes them as it streams the events (runs/importer.py feeds `n17q_engine.facts.FactBuilder`) and
stores them on `Run.facts`; a replay's run gets them the same way when its worker imports it. `facts_of` is how
every surface reads them: the stored answer when it is there and of the current version, else computed from the
stored events and saved (a run imported before the fact layer, or by an older version of it), so a page never
crashes on an old run and never counts for itself. `python manage.py run_facts` computes them ahead for every
such run.

A replay inherits its source run's required validation purposes (n17q_engine/facts.py says why): `required_for`
reads them from the parent's facts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from n17q_engine.facts import FACTS_VERSION, FactBuilder

from .models import Event, Run

READ_BATCH = 2000


def required_for(parent: Run | None) -> list[str]:
    """The validation purposes a run made from `parent` inherits (its source's required ones)."""
    if parent is None:
        return []
    return list(facts_of(parent)["validations"]["required"])


def _bodies(run: Run, upto: int | None = None) -> Iterator[dict[str, Any]]:
    """The run's event bodies in seq order (up to and including seq `upto`, when given), a batch of rows at a time
    (keyset on seq: no offset scans)."""
    last = -1
    held = Event.objects.filter(run=run) if upto is None else Event.objects.filter(run=run, seq__lte=upto)
    while True:
        rows = list(held.filter(seq__gt=last).order_by("seq").values_list("seq", "body")[:READ_BATCH])
        if not rows:
            return
        for _seq, body in rows:
            yield body
        last = rows[-1][0]


def facts_compute(run: Run) -> dict[str, Any]:
    """The facts of a stored run, from its stored events (masked as stored)."""
    builder = FactBuilder(run.manifest_run or {}, required=required_for(run.parent))
    for body in _bodies(run):
        builder.add(body)
    return builder.result()


def facts_builder_upto(run: Run, upto: int) -> FactBuilder:
    """A fact builder fed the run's stored events up to and including seq `upto`: the run as it stood then (the
    review surface of an approval reads it, n17q_engine/review_surface.py)."""
    builder = FactBuilder(run.manifest_run or {}, required=required_for(run.parent))
    for body in _bodies(run, upto):
        builder.add(body)
    return builder


def facts_of(run: Run) -> dict[str, Any]:
    """The run's facts: stored, or computed now and saved (see the module docstring)."""
    facts = run.facts
    if isinstance(facts, dict) and facts.get("version") == FACTS_VERSION:
        return facts
    facts = facts_compute(run)
    run.facts = facts
    Run.objects.filter(pk=run.pk).update(facts=facts)
    return facts
