"""LIN011: whether every id an event refers to is one the run holds (the structure of the evidence graph).

A reference nothing answered when its event arrived is kept by the graph (`_unresolved`, since a bundle may refer
forward: DESIGN §3 imports such references and reports the dangling ones); it is a finding only if nothing answered
it by the time findings are asked for. LIN011 is the one warning (`codes.WARNING_CODES`): a dangling reference is
worth investigating but may be an export that left something out. It reads every reference, so it is always
evaluated.
"""

from __future__ import annotations

from collections.abc import Iterator

from .graph import Finding, LineageGraph, _finding


def dangling(graph: LineageGraph, event_id: str) -> Iterator[Finding]:
    """LIN011 for every reference of the event whose target the run still does not hold."""
    for path, target in graph._unresolved.get(event_id, ()):
        if target not in graph._objects and target not in graph._seq:
            yield _finding(
                "LIN011",
                event_id,
                target,
                f"Event {event_id} refers at {path} to {target}, which this run does not hold; find the "
                f"missing event or treat the edge as broken.",
            )
