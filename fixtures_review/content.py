"""Reading a staged recording's content: its request, response and proposed transition (`content_of`), every
path a reviewer can pick (`leaf_paths`) and where one points (`_locate`), the findings no redaction or synthesis has
covered yet (`unresolved_findings`), and the paths where a change alters what a replay sees (`is_meaning_path`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from . import intake
from .models import ReviewEvent, StagedRecording
from .review_rules import EDITABLE_ROOTS, MEANING_ROOTS, ReviewRefused


def content_of(recording: StagedRecording) -> dict[str, Any]:
    return {
        "request": recording.request,
        "response": recording.response,
        "proposed_transition": recording.proposed_transition,
    }


def leaf_paths(recording: StagedRecording) -> list[str]:
    """Every path a reviewer can pick: each value of the request, the response and the proposed transition."""
    out: list[str] = []

    def walk(value: Any, path: str) -> None:
        if isinstance(value, dict) and not intake._is_encoded(value):
            if not value:
                out.append(path)
            for key, child in value.items():
                walk(child, intake.join(path, key))
        elif isinstance(value, list) and value:
            for i, child in enumerate(value):
                walk(child, intake.join(path, i))
        else:
            out.append(path)

    content = content_of(recording)
    for root in EDITABLE_ROOTS:
        walk(content[root], root)
    return out


def _locate(content: dict[str, Any], path: str) -> tuple[Any, str | int]:
    parts = intake.split_path(path)
    if parts[0] not in EDITABLE_ROOTS or (len(parts) < 2 and parts[0] != "proposed_transition"):
        raise ReviewRefused(f"{path}: pick a value inside request, response or proposed_transition")
    if len(parts) == 1:
        return content, parts[0]
    node: Any = content[parts[0]]
    for part in parts[1:-1]:
        try:
            node = node[part]
        except (KeyError, IndexError, TypeError):
            raise ReviewRefused(f"{path}: the recording holds nothing there") from None
    last = parts[-1]
    try:
        node[last]
    except (KeyError, IndexError, TypeError):
        raise ReviewRefused(f"{path}: the recording holds nothing there") from None
    return node, last


def unresolved_findings(recording: StagedRecording, events: Iterable[ReviewEvent] | None = None) -> list[dict]:
    """Findings no redaction or synthesis has covered yet (each covers its path and everything under it)."""
    if events is None:
        events = recording.events.filter(action__in=[ReviewEvent.Action.REDACT, ReviewEvent.Action.SYNTHESIZE])
    covered = [e.path for e in events if e.action in (ReviewEvent.Action.REDACT, ReviewEvent.Action.SYNTHESIZE)]
    return [f for f in recording.findings if not any(intake.covers(path, f["path"]) for path in covered)]


def is_meaning_path(path: str) -> bool:
    return any(intake.covers(root, path) for root in MEANING_ROOTS)
