"""Staging a model answer for the model request a replay stopped on (issue 36, "the model-fixture loop"):
`model_answer_stage` keys a candidate by the exact normalized request of the replay's `model.chat` tool.call (the
one its `fixture.missing` names) and answers it with a proposed chat completion, either typed (a whole completion,
or the assistant's content and/or tool calls, built into one: `completion_from_answer`) or copied from the nearest
model answer its scenario version holds (`nearest_model_fixture`: the longest shared prefix of messages). The
candidate goes through the same intake as every capture (redaction, secret scanning and masking, the storage gate
on its bodies) and the same four-eyes review; approving it mints the next scenario version holding the model
fixture (and the built-in `model.chat` contract, where the version pinned none).

A proposed answer is authored, never recorded from a connection: it is marked synthetic with a fidelity note, and
the record policy (which judges what a reviewed connection may record from the world) has no connection to judge
(docs/decisions.md, 2026-12-06). The command `stage_model_answer`, the missing-fixture page and
`POST /api/v1/replays/<id>/missing/model-answer/` all call this one function (through `replays.model_answers`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from n17q_engine import canonical
from n17q_engine.agent.model import MODEL_TOOL

from . import intake
from .approval import promotion_blockers
from .models import ScenarioVersion, StagedRecording
from .review_rules import CAPTURE_PERM, REVIEW_PERM, ReviewRefused
from .scenarios import FixtureBodies, scenario_bodies, source_expired_sentence
from .staging import StageResult, _stage, capture_digest_key

log = logging.getLogger("fixtures_review.services")

MAX_ANSWER_BYTES = 1024 * 1024  # a proposed completion is a person's text: a megabyte is far beyond one
MAX_TOOL_CALLS = 64


class ModelAnswerRefused(ReviewRefused):
    """A proposed model answer that cannot be staged: one line (HTTP 400); nothing was staged."""


class ModelAnswerForbidden(ReviewRefused):
    """The user may not stage a model answer (HTTP 403)."""


@dataclass
class ModelAnswerStaged:
    """What staging a model answer did: the staged recording (with its blockers) and where its answer came from."""

    result: StageResult
    replay_run: str
    missing_event: str
    answer: str  # "typed" | "copied"
    copied: dict[str, Any] | None  # {"fixture", "scenario", "shared_messages"} when copied

    @property
    def recording(self) -> StagedRecording:
        return self.result.recording

    def to_json(self) -> dict[str, Any]:
        """The `capture --json` keys (DESIGN §8), plus `run`, `missing`, `answer`, `copied_from`."""
        return {
            **self.result.to_json(),
            "run": self.replay_run,
            "missing": self.missing_event,
            "answer": self.answer,
            "copied_from": self.copied,
        }


# --- the proposed answer -----------------------------------------------------------------------------------------


def parse_answer(raw: bytes | str, where: str = "answer", limit: int = MAX_ANSWER_BYTES) -> Any:
    """A proposed answer as given to a door (a file, stdin, a form field, the API's body): JSON, one line naming
    `where` when it is not (too large, not UTF-8, not JSON, nested too deeply)."""
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    if len(data) > limit:
        raise ModelAnswerRefused(f"{where}: larger than {limit} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ModelAnswerRefused(f"{where}: not UTF-8 (byte {exc.start})") from None
    if not text.strip():
        raise ModelAnswerRefused(f"{where}: empty (give a chat completion or an assistant message as JSON)")
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except ValueError as exc:
        raise ModelAnswerRefused(f"{where}: not JSON: {exc}") from None
    except RecursionError:
        raise ModelAnswerRefused(f"{where}: not JSON: nested too deeply") from None
    try:
        intake.check_json_values(value, where)  # what any capture's value may be (depth, integers, text)
    except intake.CaptureError as exc:
        raise ModelAnswerRefused(str(exc)) from None
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def _tool_call(item: Any, i: int, seed: str) -> dict[str, Any]:
    """One tool call of the assistant message: the OpenAI shape, or the short `{"name", "arguments"}`."""
    where = f"tool_calls[{i}]"
    if not isinstance(item, dict):
        raise ModelAnswerRefused(f"{where}: an object ({{name, arguments}} or an OpenAI tool call)")
    function = item.get("function") if "function" in item else item
    if not isinstance(function, dict):
        raise ModelAnswerRefused(f"{where}.function: an object with name and arguments")
    name = function.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ModelAnswerRefused(f"{where}: name must be the tool's name (a non-empty string)")
    arguments = function.get("arguments", {})
    if isinstance(arguments, dict):
        arguments = json.dumps(arguments, sort_keys=True, separators=(",", ":"))
    elif isinstance(arguments, str):
        try:
            json.loads(arguments)
        except ValueError:
            raise ModelAnswerRefused(f"{where}: arguments must be a JSON object (or its JSON text)") from None
    else:
        raise ModelAnswerRefused(f"{where}: arguments must be a JSON object (or its JSON text)")
    call_id = item.get("id")
    if call_id is None:
        # Stable: the same answer to the same request gets the same ids (a re-staging is the same candidate).
        call_id = "call_" + canonical.digest_json([seed, i, name, arguments]).removeprefix("sha256:")[:24]
    if not isinstance(call_id, str) or not call_id:
        raise ModelAnswerRefused(f"{where}.id: a non-empty string")
    if item.get("type", "function") != "function":
        raise ModelAnswerRefused(f"{where}.type: function")
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _message(value: Any, seed: str, where: str = "message") -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ModelAnswerRefused(f"{where}: an object (role, content, tool_calls)")
    role = value.get("role", "assistant")
    if role != "assistant":
        raise ModelAnswerRefused(f"{where}.role: the answer is the assistant's, not {role!r}")
    content = value.get("content")
    if content is not None and not isinstance(content, str):
        raise ModelAnswerRefused(f"{where}.content: text or null")
    calls = value.get("tool_calls")
    if calls is not None and not isinstance(calls, list):
        raise ModelAnswerRefused(f"{where}.tool_calls: a list")
    if calls and len(calls) > MAX_TOOL_CALLS:
        raise ModelAnswerRefused(f"{where}.tool_calls: at most {MAX_TOOL_CALLS}")
    built = [_tool_call(c, i, seed) for i, c in enumerate(calls or [])]
    if not (content and content.strip()) and not built:
        raise ModelAnswerRefused(f"{where}: say something: content text and/or tool_calls")
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if built:
        message["tool_calls"] = built
    return message


def completion_from_answer(
    request: Mapping[str, Any],
    *,
    answer: Any = None,
    content: str | None = None,
    tool_calls: Any = None,
) -> dict[str, Any]:
    """The chat completion a typed answer stands for, for `request` (the normalized model request): `answer` a
    whole chat completion (an object with `choices`, checked and kept) or an assistant message (`role`,
    `content`, `tool_calls`), or else `content` and/or `tool_calls`, built into a completion of the request's
    model. ModelAnswerRefused, one line, for anything else."""
    seed = canonical.digest_json(dict(request))
    if answer is not None and (content is not None or tool_calls is not None):
        raise ModelAnswerRefused("give the answer either as a whole (a completion or message) or as content/tool_calls")
    if answer is None:
        message = _message({"role": "assistant", "content": content, "tool_calls": tool_calls}, seed, "answer")
    elif isinstance(answer, dict) and "choices" in answer:
        choices = answer.get("choices")
        if not isinstance(choices, list) or not choices:
            raise ModelAnswerRefused("choices: a non-empty list of choices")
        checked = []
        for i, choice in enumerate(choices):
            if not isinstance(choice, dict):
                raise ModelAnswerRefused(f"choices[{i}]: an object with a message")
            msg = _message(choice.get("message"), seed, f"choices[{i}].message")
            reason = choice.get("finish_reason") or ("tool_calls" if msg.get("tool_calls") else "stop")
            checked.append({**choice, "index": i, "message": msg, "finish_reason": reason})
        if answer.get("object", "chat.completion") != "chat.completion":
            raise ModelAnswerRefused(f"object: a chat.completion, not {answer.get('object')!r}")
        out = {
            "id": "chatcmpl-" + seed.removeprefix("sha256:")[:24],
            "object": "chat.completion",
            "created": 0,
            "model": request.get("model"),
            **answer,
            "choices": checked,
        }
        return out
    elif isinstance(answer, dict):
        message = _message(answer, seed, "answer")
    else:
        raise ModelAnswerRefused("answer: a JSON object (a chat completion, or an assistant message)")
    return {
        "id": "chatcmpl-" + seed.removeprefix("sha256:")[:24],
        "object": "chat.completion",
        "created": 0,
        "model": request.get("model"),
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


def _shared_prefix(a: Any, b: Any) -> int:
    if not isinstance(a, list) or not isinstance(b, list):
        return 0
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def nearest_model_fixture(
    request: Mapping[str, Any], fixtures: list[dict[str, Any]], bodies: FixtureBodies | None = None
) -> tuple[dict[str, Any], int]:
    """The model fixture (of `fixtures`, a scenario version's fixtures.json) nearest `request`: the longest shared
    prefix of messages, then the same model, then the fewest top-level fields that differ, then its id. Only
    answers that are completions count. (fixture, shared messages), the fixture's body resolved (`response.body`:
    a body held by digest read through `bodies`, fixtures_review.scenarios); ModelAnswerRefused when there is none,
    or when the nearest one's body was removed under retention (source material expired: never copied as empty)."""
    bodies = bodies or FixtureBodies()
    best: tuple[tuple[Any, ...], dict[str, Any], int] | None = None
    for item in fixtures:
        response = item.get("response") or {}
        if item.get("tool") != MODEL_TOOL or response.get("outcome") != "ok":
            continue
        held = bodies.body(item)
        if held.expired:
            # Expired: it ranks as what it was (a recorded answer); chosen, it is refused below, never copied empty.
            fixture = {**item, "response": {**response, "body": None}, "_expired": held}
        else:
            fixture = {**item, "response": {**response, "body": held.value}}
            if not isinstance(held.value, dict) or not held.value.get("choices"):
                continue
        other = fixture.get("request") or {}
        shared = _shared_prefix(request.get("messages"), other.get("messages"))
        differing = sum(1 for k in set(request) | set(other) if request.get(k) != other.get(k))
        rank = (-shared, other.get("model") != request.get("model"), differing, str(fixture.get("id")))
        if best is None or rank < best[0]:
            best = (rank, fixture, shared)
    if best is None:
        raise ModelAnswerRefused(
            f"copy similar: the scenario version holds no recorded {MODEL_TOOL} answer to copy (type the answer)"
        )
    expired = best[1].get("_expired")
    if expired is not None:
        raise ModelAnswerRefused(
            f"copy similar: the nearest model fixture: "
            f"{source_expired_sentence(str(best[1].get('id')), expired.digest, expired.expiry)} (type the answer)"
        )
    return best[1], best[2]


# --- staging -------------------------------------------------------------------------------------------------------


def stopped_model_call(replay_run: Any, missing: Mapping[str, Any]) -> dict[str, Any]:
    """The `model.chat` tool.call body a replay's `fixture.missing` record names (its exact normalized request);
    ModelAnswerRefused when the record is not a model request with one."""
    from runs.models import Event

    if missing.get("tool") != MODEL_TOOL:
        raise ModelAnswerRefused(
            f"{replay_run.run_id} stopped on {missing.get('tool')}, not on a model request ({MODEL_TOOL})"
        )
    event = Event.objects.filter(run=replay_run, event_id=missing.get("id") or "").first()
    if event is None or event.kind not in ("fixture.missing", "fixture.ambiguous"):
        raise ModelAnswerRefused(f"{replay_run.run_id} has no fixture.missing event {missing.get('id')!r}")
    call_id = event.body.get("call_id")
    call = Event.objects.filter(run=replay_run, event_id=call_id, kind="tool.call").first() if call_id else None
    if call is None or not isinstance(call.body.get("request"), dict):
        raise ModelAnswerRefused(
            f"{missing.get('id')} names no {MODEL_TOOL} call holding the request, so there is nothing to key an "
            f"answer by: {event.body.get('reason', '')}".rstrip(": ")
        )
    return {**call.body, "missing": event.body, "missing_id": event.event_id}


def model_answer_stage(
    *,
    replay_run: Any,
    missing: Mapping[str, Any],
    user: Any,
    token: Any = None,
    answer: Any = None,
    content: str | None = None,
    tool_calls: Any = None,
    copy_similar: bool = False,
) -> ModelAnswerStaged:
    """Stage a proposed answer to the model request a replay stopped on (`missing`: one of its `fixture.missing`
    records) for review: keyed by the exact normalized request of its `model.chat` tool.call, answered with the
    typed answer (`answer`, or `content` / `tool_calls`: `completion_from_answer`) or, `copy_similar`, with the
    nearest model answer of the replay's scenario version (`nearest_model_fixture`). Synthetic, through intake
    (redaction, secret scan, masking) and `_stage` (the storage gate); the stager may not approve it.
    ModelAnswerForbidden when `user` lacks the role; ModelAnswerRefused (one line) for anything else; nothing is
    staged then."""
    # `user` None: the command line without --user (a shell on the server, as `capture_from_run`); any user given
    # (a door's signed-in person or token owner, the command's --user) needs the role.
    if user is not None and not (
        getattr(user, "is_authenticated", False) and (user.has_perm(CAPTURE_PERM) or user.has_perm(REVIEW_PERM))
    ):
        raise ModelAnswerForbidden("staging a model answer needs the operator or reviewer role")
    typed = answer is not None or content is not None or tool_calls is not None
    if typed == bool(copy_similar):
        raise ModelAnswerRefused(
            "say the answer: type it (a completion or message, or content and/or tool_calls) or copy similar, "
            "one of the two"
        )
    call = stopped_model_call(replay_run, missing)
    record = call["missing"]
    request = call["request"]
    scenario_ref = record.get("scenario") or {}
    scenario = ScenarioVersion.objects.filter(
        name=scenario_ref.get("name") or "", version=scenario_ref.get("version") or 0
    ).first()
    if scenario is None:
        raise ModelAnswerRefused(f"the replay's scenario version {scenario_ref!r} is not held")
    copied = None
    if copy_similar:
        like, shared = nearest_model_fixture(request, list(scenario.fixture_items), scenario_bodies(scenario))
        body = like["response"]["body"]
        copied = {"fixture": like.get("id"), "scenario": scenario.ref, "shared_messages": shared}
        note = (
            f"synthetic: the answer is copied from model fixture {like.get('id')} of {scenario.ref} (its request "
            f"shares the first {shared} message(s) with this one); it was never observed for this request "
            f"(staged from replay {replay_run.run_id})"
        )
        connection = f"copied:{like.get('id')}"
    else:
        body = completion_from_answer(request, answer=answer, content=content, tool_calls=tool_calls)
        note = (
            f"synthetic: a person typed this model answer for the request replay {replay_run.run_id} stopped on; "
            "no model produced it"
        )
        connection = "authored"
    capture = intake.tool_call_capture(
        scenario=scenario.name,
        tool=MODEL_TOOL,
        contract_revision=call.get("contract_revision"),
        connection=connection,
        captured_at=timezone.now().isoformat().replace("+00:00", "Z"),
        source_revision=None,
        effect_class="read",
        args=request,
        status=200,
        body=body,
        world_revision=record.get("world_revision") or 0,
    )
    try:
        red = intake.intake(capture, digest_key=capture_digest_key())
        recording = _stage(
            red,
            origin=StagedRecording.Origin.COPY_SIMILAR,
            actor=user,
            token=token,
            outcome="ok",
            synthetic=True,
            fidelity_note=note,
            copied_from={
                "door": "model-answer",
                "answer": "copied" if copied else "typed",
                "run": replay_run.run_id,
                "event": call["missing_id"],
                "call": call.get("id"),
                "fixture": copied["fixture"] if copied else None,
                "scenario": scenario.ref,
                "request_digest": call.get("request_digest"),
            },
        )
    except intake.CaptureError as exc:
        raise ModelAnswerRefused(f"the answer cannot be staged: {exc}") from None
    log.info("model answer: staged %s for %s/%s", recording.public_id, replay_run.run_id, call["missing_id"])
    return ModelAnswerStaged(
        result=StageResult(recording, promotion_blockers(recording)),
        replay_run=replay_run.run_id,
        missing_event=call["missing_id"],
        answer="copied" if copied else "typed",
        copied=copied,
    )
