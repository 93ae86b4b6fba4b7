"""A model reviewer's qualitative assessments of a run (issue 39, seed 003 "The scenario definition grew richer"):
asked through an approved model connection and the worker's relay (replays/relay.py), recorded by runs/assessments.py.
It lives with the relay (the layers: runs may not import replays or fixtures_review)."""

from __future__ import annotations

import json
from typing import Any

from fixtures_review.connections import ConnectionRefused, model_connection_resolve
from n17q_engine.assessments import AssessmentRefused, check_cited, parse_review, review_request
from runs.annotations import Appended
from runs.assessments import _known, _refs, assessment_record
from runs.models import Event, Run
from runs.trace import row_summary
from runs.verdict import verdict_build

from .relay import ModelRelay, RelayRefused


def model_review(run: Run, *, user: Any, connection: str, model: str, request: Any = None) -> list[Appended]:
    """Ask the model behind the approved model connection `connection` to assess every dimension of `run`, and record
    what it answered. Refused (AssessmentRefused, one line) when the connection is not an approved model connection,
    the call fails, or an answer cites an id the run does not hold: then nothing is recorded."""
    try:
        endpoint = model_connection_resolve(connection)
        relay = ModelRelay(endpoint, max_calls=1)
    except (ConnectionRefused, RelayRefused) as exc:
        raise AssessmentRefused(str(exc), field="connection") from None
    rows = Event.objects.filter(run=run).order_by("seq").only("event_id", "kind", "body")[:200]
    lines = [{"id": e.event_id, "kind": e.kind, "summary": row_summary(e.body)[0]} for e in rows]
    verdict = verdict_build(run)
    body = review_request(model=model, title=run.title or run.run_id, events=lines, verdict=verdict.headline)
    answer = json.loads(relay(json.dumps(body).encode()))
    if "error" in answer:
        raise AssessmentRefused(f"the model reviewer could not be asked: {answer['error']}", field="connection")
    found = parse_review(answer["body"])
    for item in found:  # every cited id checked before anything is written: all or nothing
        refs = _refs(item["cited"])
        check_cited(refs, _known(run, refs))
    return [
        assessment_record(
            run,
            user=user,
            dimension=item["dimension"],
            score=item["score"],
            cited=item["cited"],
            rationale=item["rationale"],
            reviewer_kind="model",
            model=model,
            connection=connection,
            request=request,
        )
        for item in found
    ]
