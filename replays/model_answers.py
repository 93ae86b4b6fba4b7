"""The model-fixture loop's one entry for its three doors (issue 36): `replay_model_answer_stage` finds the model
request a replay stopped on and stages a proposed answer to it for review (`fixtures_review.model_answers`). The
command `stage_model_answer`, the missing-fixture page's "Answer this model request" form and
`POST /api/v1/replays/<id>/missing/model-answer/` parse their input, call it, and say its answer or its one-line
refusal: `ModelAnswerNotFound` (no such replay, or no such missing fixture: 404), `ModelAnswerForbidden` (the role:
403), `ModelAnswerRefused` (anything else: 400). Nothing is staged when it refuses.
"""

from __future__ import annotations

from typing import Any

from accounts.audit import audit_record
from fixtures_review.model_answers import (
    ModelAnswerForbidden,
    ModelAnswerRefused,
    ModelAnswerStaged,
    model_answer_stage,
)
from n17q_engine.agent.model import MODEL_TOOL

from .models import Replay

__all__ = [
    "ModelAnswerForbidden",
    "ModelAnswerNotFound",
    "ModelAnswerRefused",
    "model_missing_index",
    "replay_model_answer_stage",
]


class ModelAnswerNotFound(ValueError):
    """No such replay, or no such missing fixture of it (HTTP 404); one line."""


def model_missing_index(replay: Replay) -> int:
    """The index (in `replay.missing`) of the model request the replay stopped on; ModelAnswerRefused, saying what
    it stopped on instead, when there is none."""
    for i, record in enumerate(replay.missing or []):
        if record.get("tool") == MODEL_TOOL:
            return i
    if not replay.missing:
        raise ModelAnswerRefused(
            f"replay {replay.pk} did not stop on a missing fixture (it is {replay.state}"
            f"{', its run ' + replay.run.final_state if replay.run is not None else ''}): there is no model request "
            "to answer"
        )
    tools = ", ".join(sorted({str(r.get("tool")) for r in replay.missing}))
    raise ModelAnswerRefused(
        f"replay {replay.pk} did not stop on a model request ({MODEL_TOOL}): it stopped on {tools}"
    )


def replay_model_answer_stage(
    *,
    replay_id: Any,
    user: Any,
    index: int | None = None,
    token: Any = None,
    request: Any = None,
    answer: Any = None,
    content: str | None = None,
    tool_calls: Any = None,
    copy_similar: bool = False,
) -> ModelAnswerStaged:
    """Stage a proposed answer to the model request replay `replay_id` stopped on (its missing fixture `index`, or
    the first model request among them) for review; audited. See the module's docstring for the refusals."""
    if user is not None and not getattr(user, "is_authenticated", False):
        raise ModelAnswerForbidden("staging a model answer needs the operator or reviewer role")
    text = str(replay_id)
    if not (text.isascii() and text.isdigit() and len(text) <= 18):  # a number the database's key can hold
        raise ModelAnswerNotFound(f"no replay {text[:40]!r} (a replay is named by its number)")
    pk = int(text)
    replay = Replay.objects.select_related("run", "run__parent").filter(pk=pk).first()
    if replay is None:
        raise ModelAnswerNotFound(f"no replay {pk}")
    if replay.run is None:
        raise ModelAnswerRefused(f"replay {pk} has not run ({replay.state}): there is no model request to answer")
    if index is None:
        index = model_missing_index(replay)
    elif not 0 <= index < len(replay.missing or []):
        raise ModelAnswerNotFound(f"replay {pk} has no missing fixture #{index}")
    record = replay.missing[index]
    if record.get("tool") != MODEL_TOOL:
        raise ModelAnswerRefused(
            f"replay {pk} did not stop on a model request ({MODEL_TOOL}) there: missing fixture #{index} is "
            f"{record.get('tool')}"
        )
    staged = model_answer_stage(
        replay_run=replay.run,
        missing=record,
        user=user,
        token=token,
        answer=answer,
        content=content,
        tool_calls=tool_calls,
        copy_similar=copy_similar,
    )
    audit_record(
        actor=user,
        action="fixture.model_answer",
        target=f"staged:{staged.recording.public_id}",
        detail={"replay": pk, "missing": staged.missing_event, "answer": staged.answer, "copied": staged.copied},
        request=request,
    )
    return staged
