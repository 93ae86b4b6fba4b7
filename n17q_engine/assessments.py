"""Qualitative reviewer assessments, kept apart from the hard invariants (seed 003, "The scenario definition grew
richer": "Model-based reviewers assessed code clarity, diagnostic reasoning, report usefulness, and whether the chosen
path was unnecessarily wasteful. They cited events and artifacts. A qualitative high score could not override a
cross-workspace evidence violation. A hard pass could coexist with poor explanation.").

An assessment is a `review.assessment` event appended to the run (like an annotation, runs/assessments.py): one
dimension, a score on 1..5, the event and object ids it cites (each must be the run's: an unknown id is refused), a
rationale, and who made it (`reviewer {kind: person|model, name}`; a model's connection and model name). Nothing reads
an assessment into the verdict, the facts or the lineage checks: the verdict is the deterministic evaluators' alone,
and a page shows the dimensions beside it, never averaged into it.

This module is the Django-free part: the dimensions, checking one assessment's values, the chat request a model
reviewer is sent (`review_request`) and the reading of its answer (`parse_review`). The model is reached only through
an approved model connection (fixtures_review/model_endpoints.py, replays/relay.py), never a typed URL.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

ASSESSMENT_KIND = "review.assessment"
SCALE = "1..5"
SCORE_MIN, SCORE_MAX = 1, 5
REVIEWER_KINDS = ("person", "model")
# The dimensions, in the order pages show them, each with the question a reviewer answers (5 is best).
DIMENSIONS: dict[str, str] = {
    "code_clarity": "Code clarity: is the patch clear, idiomatic and scoped to the task? (5: very clear)",
    "diagnostic_reasoning": "Diagnostic reasoning: did the agent find and explain the actual cause from what it "
    "observed? (5: sound and evidenced)",
    "report_usefulness": "Report usefulness: does the final account tell a reviewer exactly what was validated and "
    "what was not? (5: precise and complete)",
    "path_economy": "Path economy: was the chosen path free of unnecessary, wasteful work (reruns, detours, spent "
    "budget)? (5: no waste)",
}
CITED_MAX = 20
RATIONALE_MAX = 4000
# What a model reviewer is shown of the run: at most this many event lines.
CONTEXT_EVENTS = 200


class AssessmentRefused(ValueError):
    """Bad input for an assessment: one line, safe to show, naming the field."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def check_dimension(value: Any) -> str:
    if not isinstance(value, str) or value not in DIMENSIONS:
        raise AssessmentRefused(f"dimension must be one of {' | '.join(DIMENSIONS)}", field="dimension")
    return value


def check_score(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int) or not SCORE_MIN <= value <= SCORE_MAX:
        raise AssessmentRefused(f"score must be a whole number on {SCALE}", field="score")
    return value


def check_cited(value: Any, known: Iterable[str]) -> list[str]:
    """The cited ids as a list, each one the run holds (`known`: those of `value` the run has); at least one."""
    refs = value if isinstance(value, list) else [r for r in str(value or "").replace(",", " ").split() if r]
    if not refs or not all(isinstance(r, str) and r for r in refs):
        raise AssessmentRefused("cited must name at least one event or artifact id of the run", field="cited")
    if len(refs) > CITED_MAX:
        raise AssessmentRefused(f"cited names at most {CITED_MAX} ids", field="cited")
    held = set(known)
    unknown = [r for r in refs if r not in held]
    if unknown:
        raise AssessmentRefused(f"this run holds no event or object {unknown[0][:200]!r} (cited)", field="cited")
    return list(dict.fromkeys(refs))


def review_request(*, model: str, title: str, events: Iterable[Mapping[str, Any]], verdict: str) -> dict[str, Any]:
    """The chat-completions request a model reviewer is sent: the dimensions, the run's verdict (so it knows it does
    not decide it), and one line per event (id, kind, a short summary), at most CONTEXT_EVENTS."""
    lines = []
    for i, event in enumerate(events):
        if i >= CONTEXT_EVENTS:
            lines.append(f"... (the first {CONTEXT_EVENTS} events are shown)")
            break
        lines.append(f"{event.get('id')} {event.get('kind')} {event.get('summary', '')}".strip()[:300])
    dimensions = "\n".join(f"- {key}: {question}" for key, question in DIMENSIONS.items())
    system = (
        "You review an AI agent's run qualitatively. Score each dimension from 1 to 5 and cite the event or artifact "
        "ids your judgement rests on (only ids listed in the run). The run's pass/fail verdict is decided by "
        "deterministic checks and is not yours to change. Answer with JSON only: "
        '{"assessments": [{"dimension": "...", "score": 1-5, "cited": ["id", ...], "rationale": "..."}]}.\n'
        f"Dimensions:\n{dimensions}"
    )
    user = f"Run: {title}\nVerdict (deterministic, final): {verdict}\nEvents:\n" + "\n".join(lines)
    return {
        "model": model,
        "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        "temperature": 0,
        "response_format": {"type": "json_object"},
    }


def parse_review(completion: Any) -> list[dict[str, Any]]:
    """The assessments in a chat completion's answer, as {dimension, score, cited, rationale} (values not yet checked
    against the run); refused when the answer is not the JSON the request asked for."""
    try:
        content = completion["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise AssessmentRefused("the model's answer holds no message") from None
    if not isinstance(content, str):
        raise AssessmentRefused("the model's answer holds no text")
    text = content.strip()
    if text.startswith("```"):
        text = text.strip("`").removeprefix("json").strip()
    try:
        data = json.loads(text)
    except ValueError:
        raise AssessmentRefused("the model's answer is not JSON") from None
    items = data.get("assessments") if isinstance(data, dict) else None
    if not isinstance(items, list) or not items:
        raise AssessmentRefused("the model's answer holds no assessments list")
    out = []
    for item in items[: len(DIMENSIONS)]:
        if not isinstance(item, dict):
            raise AssessmentRefused("an assessment in the model's answer is not an object")
        rationale = item.get("rationale")
        out.append(
            {
                "dimension": check_dimension(item.get("dimension")),
                "score": check_score(item.get("score")),
                "cited": item.get("cited"),
                "rationale": rationale[:RATIONALE_MAX] if isinstance(rationale, str) else None,
            }
        )
    return out
