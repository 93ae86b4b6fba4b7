"""A reviewer's actions on a staged recording: redact a value (`recording_redact`), synthesize a replacement
(`recording_synthesize`: where meaning changes, with a fidelity note), declare that a mutation's ambiguous answer
changed nothing in the world (`recording_declare_no_change`, with the reason), reject it (`recording_reject`), or
exclude its tool from the scenario with the limitation recorded (`recording_exclude_tool`, which mints a version
without it).

Each needs the reviewer role, changes a locked, still-staged recording at the revision the reviewer read, and is an
append-only `ReviewEvent` that never holds a value that was removed. Approving is in `approval`.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from n17q_engine.contracts import ContractError
from n17q_secrets import scanning

from . import intake
from .content import _locate, content_of, is_meaning_path
from .fixture_checks import AMBIGUOUS_OUTCOMES, _latest_base
from .minting import _lock_scenario, scenario_version_mint
from .models import ReviewEvent, StagedRecording
from .retention import recording_bodies_hold
from .review_rules import REVIEW_PERM, ReviewRefused, outcome_for
from .scenarios import ScenarioRefused
from .staging import _body_sizes, _event, _forget_blob, _key, _remove_blobs, _write_bodies


def _require_reviewer(user: Any, recording: StagedRecording) -> None:
    if not (getattr(user, "is_authenticated", False) and user.has_perm(REVIEW_PERM)):
        raise ReviewRefused("reviewing needs the reviewer role")
    if recording.state != StagedRecording.State.STAGED:
        raise ReviewRefused(f"{recording.public_id} is {recording.state}: it can no longer be changed")


def _change(recording: StagedRecording, revision: int | None, mutate: Any) -> StagedRecording:
    """Apply `mutate(content, locked)` to a locked, still-staged recording at the revision the reviewer read."""
    locked = StagedRecording.objects.select_for_update().get(pk=recording.pk)
    if locked.state != StagedRecording.State.STAGED:
        raise ReviewRefused(f"{locked.public_id} is {locked.state}: it can no longer be changed")
    if revision is not None and locked.revision != revision:
        raise ReviewRefused(
            f"{locked.public_id} changed since you opened it (revision {revision}, now {locked.revision}): "
            "reload it and look again"
        )
    content = json.loads(json.dumps(content_of(locked)))
    mutate(content, locked)
    old_blobs = dict(locked.body_blobs)
    locked.request, locked.response = content["request"], content["response"]
    locked.proposed_transition = content["proposed_transition"]
    locked.revision += 1
    written: list[str] = []
    try:
        locked.body_blobs = _write_bodies(locked, written)
        locked.save(
            update_fields=[
                "request",
                "response",
                "proposed_transition",
                "revision",
                "body_blobs",
                "synthetic",
                "fidelity_note",
                "outcome",
                "no_change_reason",
                "normalized_request",
                "request_digest",
                "key_note",
            ]
        )
        recording_bodies_hold(locked, _body_sizes(locked))  # a rewritten body is kept under the same class
    except Exception:
        _remove_blobs(written)
        raise
    for where, digest in old_blobs.items():
        if locked.body_blobs.get(where) != digest:
            transaction.on_commit(partial(_forget_blob, digest, locked))
    return locked


def recording_redact(
    *, recording: StagedRecording, path: str, user: Any, reason: str = "", revision: int | None = None
) -> StagedRecording:
    """Replace the value at `path` with `[redacted]`. An argument is part of the fixture key: synthesize it."""
    _require_reviewer(user, recording)
    path = path.strip()
    if intake.covers("request.args", path):
        raise ReviewRefused(
            f"{path}: an argument is part of the fixture key; redacting it changes meaning, so synthesize a "
            "replacement and say what fidelity is lost"
        )
    if intake.covers("response.status", path):
        raise ReviewRefused("response.status: a status cannot be redacted (synthesize another one instead)")

    def mutate(content: dict[str, Any], locked: StagedRecording) -> None:
        node, key = _locate(content, path)
        node[key] = intake.REDACTED

    with transaction.atomic():
        recording = _change(recording, revision, mutate)
        _event(recording, ReviewEvent.Action.REDACT, user, path=path, reason=reason.strip()[:2000])
    return recording


def recording_synthesize(
    *,
    recording: StagedRecording,
    path: str,
    value: Any,
    user: Any,
    fidelity_note: str = "",
    revision: int | None = None,
) -> StagedRecording:
    """Put a reviewer's replacement at `path`. Where meaning changes, a fidelity note is required."""
    _require_reviewer(user, recording)
    path, note = path.strip(), (fidelity_note or "").strip()
    meaning = is_meaning_path(path)
    if meaning and not note:
        raise ReviewRefused(
            f"{path}: a synthesized value here changes what a replay sees; say what fidelity is lost in the note"
        )
    if path == "response.status" and not (isinstance(value, int) and 100 <= value <= 599):
        raise ReviewRefused("response.status: a synthesized status is an HTTP status 100-599")
    try:
        from n17q_engine.contracts import check_json

        check_json(value, path)
    except ContractError as exc:
        raise ReviewRefused(str(exc)) from None
    hits = scanning.scan_text(json.dumps(value, ensure_ascii=False))
    if hits:
        raise ReviewRefused(f"{path}: the replacement itself looks like a secret ({hits[0][0]}); use a made-up value")

    def mutate(content: dict[str, Any], locked: StagedRecording) -> None:
        node, key = _locate(content, path)
        node[key] = value
        if path == "response.status":
            locked.outcome = outcome_for(value, content["response"].get("body"))
        if meaning:
            locked.synthetic = True
            locked.fidelity_note = "; ".join(p for p in (locked.fidelity_note, f"{path}: {note}") if p)
        if intake.covers("proposed_transition", path) and content["proposed_transition"]:
            locked.no_change_reason = ""  # a declared transition says the world changed: no longer "no change"
        if intake.covers("request.args", path):
            locked.normalized_request, locked.request_digest, locked.key_note = _key(
                locked.scenario_name, locked.tool, locked.contract_revision, content["request"]["args"]
            )

    with transaction.atomic():
        recording = _change(recording, revision, mutate)
        _event(
            recording,
            ReviewEvent.Action.SYNTHESIZE,
            user,
            path=path,
            fidelity_note=note[:4000],
            detail={"value": value, "meaning_changed": meaning},
        )
    return recording


def recording_declare_no_change(
    *, recording: StagedRecording, reason: str, user: Any, revision: int | None = None
) -> StagedRecording:
    """Declare that a mutation answered `unknown`, `timeout` or `error` changed nothing in the world, and why (issue
    34; seed 000: "a static error was insufficient for ambiguous outcomes"). Without this or a declared transition
    such a recording is not promotable. The declaration is part of what the fixture stands for, so whoever makes it
    is one of its authors (four eyes: another reviewer approves)."""
    _require_reviewer(user, recording)
    reason = (reason or "").strip()
    if recording.effect_class != "mutation":
        raise ReviewRefused(f"{recording.tool} is a {recording.effect_class}: it changes no world state to declare")
    if recording.outcome not in AMBIGUOUS_OUTCOMES:
        raise ReviewRefused(
            f"no change is declared only for an ambiguous answer ({', '.join(AMBIGUOUS_OUTCOMES)}); this mutation "
            f"answered {recording.outcome}"
        )
    if recording.proposed_transition:
        raise ReviewRefused(
            "it declares a world transition: a recording cannot say both that the world changed and not"
        )
    if not reason:
        raise ReviewRefused("declaring no change needs its reason (how you know the world did not change)")

    def mutate(content: dict[str, Any], locked: StagedRecording) -> None:
        locked.no_change_reason = reason[:2000]

    with transaction.atomic():
        recording = _change(recording, revision, mutate)
        _event(recording, ReviewEvent.Action.NO_CHANGE, user, path="proposed_transition", reason=reason[:2000])
    return recording


def _claim_as_rejected(recording: StagedRecording, revision: int | None) -> None:
    """Close a staged recording as rejected, only if it is still staged (and at `revision`, when given): the
    conditional update is the claim; a recording decided or changed meanwhile is refused, never decided twice."""
    claimed = StagedRecording.objects.filter(
        pk=recording.pk, state=StagedRecording.State.STAGED, **({"revision": revision} if revision else {})
    ).update(state=StagedRecording.State.REJECTED, decided_at=timezone.now())
    if claimed != 1:
        raise ReviewRefused(f"{recording.public_id} was decided or changed meanwhile: reload it")
    recording.refresh_from_db()


def recording_reject(
    *, recording: StagedRecording, reason: str, user: Any, revision: int | None = None
) -> StagedRecording:
    _require_reviewer(user, recording)
    reason = (reason or "").strip()
    if not reason:
        raise ReviewRefused("rejecting needs a reason (what is wrong with this recording)")
    with transaction.atomic():
        _claim_as_rejected(recording, revision)
        _event(recording, ReviewEvent.Action.REJECT, user, reason=reason[:4000])
    return recording


def recording_exclude_tool(
    *, recording: StagedRecording, limitation: str, user: Any, revision: int | None = None
) -> StagedRecording:
    """The tool cannot be modelled credibly (seed 000: "the scenario excluded the tool and documented the
    limitation"): mint a scenario version without it, its limitation recorded as the exclusion's reason, and close
    the recording as rejected, naming that version. A replay that calls an excluded mutation stops precisely."""
    _require_reviewer(user, recording)
    limitation = (limitation or "").strip()
    if not limitation:
        raise ReviewRefused("excluding the tool needs its limitation: what about it cannot be modelled credibly")
    with transaction.atomic():
        _claim_as_rejected(recording, revision)
        _lock_scenario(recording.scenario_name)
        base = _latest_base(recording)
        try:
            version = scenario_version_mint(
                base=base,
                exclude_tools={recording.tool: limitation[:2000]},
                user=user,
                source="exclusion",
                _locked=True,
            )
        except ScenarioRefused as exc:
            raise ReviewRefused(str(exc)) from None
        StagedRecording.objects.filter(pk=recording.pk).update(scenario_version=version)
        recording.refresh_from_db()
        _event(
            recording,
            ReviewEvent.Action.REJECT,
            user,
            reason=f"{recording.tool} excluded from {version.ref}: {limitation[:2000]}",
            detail={"scenario": version.ref, "excluded_tool": recording.tool, "based_on": base.ref},
        )
    return recording
