"""Qualitative reviewer assessments of a run (issue 39, seed 003 "The scenario definition grew richer"), stored as
`review.assessment` events appended after the run's last, through the same append as annotations (storage gate,
audit, edges to what they cite): append-only, a later assessment of a dimension is read beside the earlier ones.

A person posts one (`assessment_record`); a model reviewer is asked through an approved model connection
(replays/model_review.py: the relay of replays/relay.py, one call, the credential resolved by the worker's environment
only) and each assessment of its answer is recorded the same way. Nothing here touches the verdict, the facts or the
findings: the run page shows the dimensions beside the verdict (`run_assessments`), never merged into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from n17q_engine.assessments import (
    ASSESSMENT_KIND,
    DIMENSIONS,
    RATIONALE_MAX,
    SCALE,
    AssessmentRefused,
    check_cited,
    check_dimension,
    check_score,
)

from .annotations import Appended, _append, _author_role, _text
from .models import Event, Run, RunObject

SHOWN_PER_DIMENSION = 5


def _known(run: Run, refs: list[str]) -> set[str]:
    """Which of `refs` the run holds, as an event id or an object id (attempt, workspace, artifact)."""
    wanted = set(refs)
    events = set(Event.objects.filter(run=run, event_id__in=wanted).values_list("event_id", flat=True))
    objects = set(RunObject.objects.filter(run=run, ref__in=wanted).values_list("ref", flat=True))
    return events | objects


def _refs(value: Any) -> list[str]:
    if isinstance(value, list):
        return [r for r in value if isinstance(r, str)][:100]
    return [r for r in str(value or "").replace(",", " ").split() if r][:100]


def assessment_record(
    run: Run,
    *,
    user: Any,
    dimension: Any,
    score: Any,
    cited: Any,
    rationale: Any = None,
    reviewer_kind: str = "person",
    model: str | None = None,
    connection: str | None = None,
    request: Any = None,
) -> Appended:
    """One assessment of one dimension of `run`, citing ids the run holds (any other is refused)."""
    dimension = check_dimension(dimension)
    score = check_score(score)
    refs = _refs(cited)
    cited_ids = check_cited(cited if isinstance(cited, list) else refs, _known(run, refs))
    fields: dict[str, Any] = {
        "dimension": dimension,
        "score": score,
        "scale": SCALE,
        "cited_ids": cited_ids,
        "reviewer": {"kind": reviewer_kind, "name": model if reviewer_kind == "model" else user.get_username()},
        "author": user.get_username(),
        "author_role": _author_role(user),
    }
    try:
        text = _text(rationale, "rationale", limit=RATIONALE_MAX)
    except ValueError as exc:
        raise AssessmentRefused(str(exc), field="rationale") from None
    if text:
        fields["rationale"] = text
    if model:
        fields["model"] = model[:200]
    if connection:
        fields["connection"] = connection[:200]
    return _append(run, ASSESSMENT_KIND, fields, user=user, request=request)


@dataclass
class Dimension:
    key: str
    question: str
    assessments: list[dict[str, Any]] = field(default_factory=list)  # newest first

    @property
    def title(self) -> str:
        return self.question.split(":", 1)[0]

    @property
    def reviewed(self) -> bool:
        return bool(self.assessments)


def run_assessments(run: Run) -> list[Dimension]:
    """Each dimension with its assessments (newest first, at most SHOWN_PER_DIMENSION). A run without one costs no
    query: its kind counts say so."""
    dimensions = {key: Dimension(key, question) for key, question in DIMENSIONS.items()}
    if (run.kind_counts or {}).get(ASSESSMENT_KIND):
        rows = Event.objects.filter(run=run, kind=ASSESSMENT_KIND).order_by("-seq").only("event_id", "body")[:200]
        for event in rows:
            body = event.body if isinstance(event.body, dict) else {}
            shown = dimensions.get(str(body.get("dimension")))
            if shown is not None and len(shown.assessments) < SHOWN_PER_DIMENSION:
                shown.assessments.append({"id": event.event_id, **body})
    return list(dimensions.values())


def assessments_json(run: Run) -> dict[str, Any]:
    return {
        "run": run.run_id,
        "scale": SCALE,
        "dimensions": [
            {
                "dimension": d.key,
                "question": d.question,
                "reviewed": d.reviewed,
                "assessments": [
                    {
                        k: a.get(k)
                        for k in ("id", "score", "cited_ids", "rationale", "reviewer", "author", "model", "connection")
                    }
                    | {"at": (a.get("at") or {}).get("wall")}
                    for a in d.assessments
                ],
            }
            for d in run_assessments(run)
        ],
    }
