"""Fixture review: staging captures, reviewer actions, promotion, minting scenario versions (DESIGN §7).

Every write of the review workflow is here, as keyword-only functions named `<entity>_<action>` that own
their transaction. Views, the API and the `capture` command parse their input, call one of these, render.

The rules:
- Nothing reaches the database or the blob store before `intake` has redacted and masked it.
- A reviewer's action is an append-only `ReviewEvent` (actor, time, path, reason), and never holds a value
  that was removed. A refused approval is an event too, with its reason.
- Approving needs the reviewer role; whoever captured a recording, or owns the token that did, cannot
  approve it; an unresolved finding blocks it; so does a failing contract test.
- Approving claims the recording with a conditional UPDATE (`state = staged AND revision = <the one the
  reviewer read>`): of two reviewers approving at once exactly one changes a row, and only that one mints.
- Minting serializes per scenario on the scenario's first version row (SELECT … FOR UPDATE), reads the
  latest version after the lock, and builds on it; the unique (name, version) constraint is the last guard.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import Any

from django.core.files.base import ContentFile
from django.core.files.storage import storages
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone
from django.utils.crypto import salted_hmac

from n17q_engine import canonical
from n17q_engine.contracts import ContractError
from n17q_engine.fixtures import Fixture, FixtureError
from n17q_engine.package import PackageError, build_scenario, load_scenario
from n17q_secrets import scanning

from . import connections, intake
from .models import FixtureVersion, RequestObservation, ReviewEvent, ScenarioVersion, StagedRecording
from .retention import capture_retention_class, recording_bodies_hold
from .scenarios import ScenarioRefused, scenario_package

log = logging.getLogger(__name__)

REVIEW_PERM = "fixtures_review.review_capture"
CAPTURE_PERM = "fixtures_review.capture_recording"
# Where a change alters what a replay sees or how it is keyed: a synthesized value there needs a fidelity note.
MEANING_ROOTS = ("request.args", "response.body", "response.status", "proposed_transition")
EDITABLE_ROOTS = ("request", "response", "proposed_transition")


class ReviewRefused(ValueError):
    """A review action the rules do not allow; the message says why in one sentence a reviewer can act on."""


# --- outcomes ----------------------------------------------------------------------------------------------------

_STATUS_OUTCOMES = {401: "denied", 403: "denied", 404: "not_found", 410: "deleted", 408: "timeout", 504: "timeout"}


def outcome_for(status: int, body: Any) -> str:
    """The fixture outcome an HTTP response stands for. `empty`: a 2xx with nothing in it."""
    if status in _STATUS_OUTCOMES:
        return _STATUS_OUTCOMES[status]
    if 200 <= status < 300:
        if body in (None, "", [], {}) or (isinstance(body, dict) and body.get("items") == [] and len(body) <= 2):
            return "empty"
        return "ok"
    return "error"


# --- intake ------------------------------------------------------------------------------------------------------


@dataclass
class StageResult:
    recording: StagedRecording
    blockers: list[str]

    def to_json(self) -> dict[str, Any]:
        """The `capture --json` shape of DESIGN §8 (more keys may follow; these stay)."""
        rec = self.recording
        return {
            "staged": rec.public_id,
            "redactions": [{"path": r["path"], "rule": r["rule"]} for r in rec.redactions],
            "findings": [{"rule": f["rule"], "path": f["path"], "preview": f["preview"]} for f in rec.findings],
            "promotable": not self.blockers,
            "blockers": self.blockers,
            "scenario": rec.scenario_name,
            "tool": rec.tool,
            "request_digest": rec.request_digest,
        }


def capture_digest_key() -> bytes:
    """The server's key for captures' original digests: derived from SECRET_KEY for this one purpose (a new
    SECRET_KEY gives new digests; a digest is provenance shown to reviewers, never a lookup across keys)."""
    return salted_hmac("n17q.capture-original-digest", "key", algorithm="sha256").digest()


def capture_original_digest(raw: bytes | str | dict) -> str:
    """The keyed digest `capture_stage` keeps for a capture as it arrives."""
    return intake.original_digest(raw, capture_digest_key())


def capture_receive(*, raw: bytes | str | dict, user: Any = None, token: Any = None) -> StageResult | FailedCapture:
    """What the capture doors (the `capture` command, `POST /api/v1/captures/`, the demo) call: a capture that failed
    after a live read (`capture_failure`) keeps only its safe request observation and answers that no fixture
    resulted (`FailedCapture`); any other is staged (`capture_stage`)."""
    data = intake.parse_capture(raw)
    if data.get("capture_failure") is not None:
        actor = user if getattr(user, "is_authenticated", False) else None
        return FailedCapture(connections.capture_failure_record(data, door="capture", actor=actor, token=token))
    return _capture_stage(data, raw, user=user, token=token)


def capture_stage(*, raw: bytes | str | dict, user: Any = None, token: Any = None) -> StageResult:
    """Check a capture against the record policy, then redact, scan and mask it and store it as a staged
    recording. `intake.CaptureError` if malformed or a failed capture (`capture_receive` takes those);
    `connections.CaptureRefused` (a CaptureError) if the policy refuses it, its safe request observation kept."""
    data = intake.parse_capture(raw)
    if data.get("capture_failure") is not None:
        raise intake.CaptureError("capture_failure: a failed capture stages nothing (receive it with capture_receive)")
    return _capture_stage(data, raw, user=user, token=token)


def _capture_stage(data: dict[str, Any], raw: bytes | str | dict, *, user: Any, token: Any) -> StageResult:
    actor = user if getattr(user, "is_authenticated", False) else None
    admitted = connections.capture_admit(data, door="capture", actor=actor, token=token)
    red = intake.scan_capture(intake.redact_capture(data, original_digest=capture_original_digest(raw)))
    cap = red.capture
    recording = _stage(
        red,
        origin=StagedRecording.Origin.CAPTURE,
        actor=actor,
        token=token,
        outcome=outcome_for(cap["response"]["status"], cap["response"].get("body")),
        admitted=admitted,
    )
    log.info(
        "staged recording %s for %s %s (%d redactions, %d findings)",
        recording.public_id,
        recording.scenario_name,
        recording.tool,
        len(recording.redactions),
        len(recording.findings),
    )
    return StageResult(recording, promotion_blockers(recording))


@dataclass
class FailedCapture:
    """A capture that failed after a live read: nothing staged, the safe request observation kept."""

    observation: RequestObservation

    def to_json(self) -> dict[str, Any]:
        """The `capture --json` keys (nothing staged: `staged` null, not promotable) and what was kept instead."""
        obs = self.observation
        return {
            "staged": None,
            "redactions": [],
            "findings": [],
            "promotable": False,
            "blockers": [obs.reason],
            "scenario": obs.scenario_name,
            "tool": obs.tool,
            "request_digest": obs.request_digest,
            "observation": obs.public_id,
            "fixture": None,
            "note": obs.reason,
        }


def _stage(
    red: intake.Redacted,
    *,
    origin: str,
    actor: Any,
    token: Any,
    outcome: str,
    synthetic: bool = False,
    fidelity_note: str = "",
    copied_from: dict | None = None,
    source: tuple[str, str] | None = None,
    admitted: Any = None,
) -> StagedRecording:
    cap = red.capture
    normalized, digest, key_note = _key(cap["scenario"], cap["tool"], cap["contract_revision"], cap["request"]["args"])
    excluded = sorted({u.pk for u in (actor, getattr(token, "user", None)) if u is not None})
    findings = [{"id": f"f{i + 1}", **f} for i, f in enumerate(red.findings)]
    retention = capture_retention_class(cap)
    written: list[str] = []
    try:
        with transaction.atomic():
            recording = StagedRecording(
                retention_class=retention,
                origin=origin,
                scenario_name=cap["scenario"],
                tool=cap["tool"],
                contract_revision=cap["contract_revision"],
                connection=cap["connection"],
                captured_at=datetime.fromisoformat(cap["captured_at"].replace("Z", "+00:00")),
                source_revision=cap.get("source_revision") or "",
                effect_class=cap["effect_class"],
                world_revision=cap["world_revision"],
                request=cap["request"],
                response=cap["response"],
                proposed_transition=cap.get("proposed_transition"),
                outcome=outcome,
                encodings=red.encodings,
                request_digest=digest,
                normalized_request=normalized,
                key_note=key_note,
                original_digest=red.original_digest,
                redactions=red.redactions,
                findings=findings,
                synthetic=synthetic,
                fidelity_note=fidelity_note,
                copied_from=copied_from,
                source_run=source[0] if source else "",
                source_event=source[1] if source else "",
                source_class=admitted.source_class if admitted is not None else "",
                account_scope=admitted.account_scope if admitted is not None else "",
                result_class=admitted.result_class if admitted is not None else "",
                captured_by=actor,
                token=token,
                excluded_approvers=excluded,
            )
            recording.body_blobs = _write_bodies(recording, written)
            recording.save()
            recording_bodies_hold(recording, _body_sizes(recording))
            _event(
                recording,
                ReviewEvent.Action.STAGED,
                actor,
                detail={
                    "origin": origin,
                    "redactions": len(red.redactions),
                    "findings": len(findings),
                    "original_digest": red.original_digest,
                    "token": getattr(token, "prefix", None),
                },
            )
    except Exception:
        _remove_blobs(written)
        raise
    return recording


def _key(scenario: str, tool: str, revision: int, args: Any) -> tuple[dict | None, str, str]:
    """(normalized request, request digest, a note when it could not be normalized)."""
    latest = ScenarioVersion.objects.filter(name=scenario).order_by("-version").first()
    as_sent = canonical.request_digest(args)
    if latest is None:
        return None, as_sent, f"no version of scenario {scenario} is held yet: the digest is of the arguments as sent"
    try:
        contracts = load_scenario(scenario_package(latest)).contracts
    except (ScenarioRefused, PackageError) as exc:
        return None, as_sent, f"{latest.ref} cannot be loaded: {exc}"
    if tool not in contracts:
        return None, as_sent, f"{latest.ref} pins no contract for {tool}: the digest is of the arguments as sent"
    contract = contracts.get(tool)
    if contract.revision != revision:
        return (
            None,
            as_sent,
            f"contract mismatch: {latest.ref} pins {tool} revision {contract.revision}, the capture was made "
            f"under revision {revision}",
        )
    try:
        normalized, digest = contract.digest(args)
    except ContractError as exc:
        return None, as_sent, f"the arguments break {tool} revision {revision}: {exc}"
    return normalized, digest, ""


def _write_bodies(recording: StagedRecording, written: list[str]) -> dict[str, str]:
    """Each body's bytes in the blob store (content-addressed), for the raw download."""
    out = {}
    store = storages["blobs"]
    for where, part in (("request.body", recording.request), ("response.body", recording.response)):
        data = intake.body_bytes(part.get("body"))
        if not data:
            continue
        digest = canonical.digest_bytes(data)
        name = _blob_name(digest)
        if not store.exists(name):
            saved = store.save(name, ContentFile(data, name=name))
            if saved != name:
                store.delete(saved)
                raise RuntimeError(f"the blob store refused {name}")
            written.append(name)
        out[where] = digest
    return out


def _body_sizes(recording: StagedRecording) -> dict[str, int]:
    return {
        recording.body_blobs[where]: len(intake.body_bytes(part.get("body")))
        for where, part in (("request.body", recording.request), ("response.body", recording.response))
        if where in recording.body_blobs
    }


def _blob_name(digest: str) -> str:
    from runs.models import blob_storage_name

    return blob_storage_name(digest)


def _remove_blobs(names: Iterable[str]) -> None:
    store = storages["blobs"]
    for name in names:
        try:
            store.delete(name)
        except OSError:
            log.warning("could not remove blob %s", name)


def _forget_blob(digest: str, recording: StagedRecording) -> None:
    """Remove a body blob a recording no longer holds, unless a run or another recording holds it too."""
    from runs.models import Blob

    if Blob.objects.filter(digest=digest).exists():
        return
    for other in StagedRecording.objects.exclude(pk=recording.pk).only("body_blobs"):
        if digest in other.body_blobs.values():
            return
    _remove_blobs([_blob_name(digest)])


def _event(recording: StagedRecording, action: str, actor: Any, **fields: Any) -> ReviewEvent:
    event = ReviewEvent.objects.create(
        recording=recording, action=action, actor=actor, revision=recording.revision, **fields
    )
    _audit(actor, f"recording.{action}", recording.public_id, fields.get("detail"))
    return event


def _audit(actor: Any, action: str, target: str, detail: Any) -> None:
    from accounts.audit import audit_record

    audit_record(actor=actor, action=action, target=target, detail=detail if isinstance(detail, dict) else None)


# --- reading the content ---------------------------------------------------------------------------------------


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


# --- reviewer actions ------------------------------------------------------------------------------------------


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


# The review actions that write content a fixture version will hold: whoever did one is one of its authors.
AUTHORING_ACTIONS = (ReviewEvent.Action.SYNTHESIZE, ReviewEvent.Action.REDACT)


def content_authors(recording: StagedRecording) -> dict[int, str]:
    """{user pk: what they authored} for everyone who wrote any part of what the recording's fixture would contain:
    captured it (or copied it similar), owned the token that captured it, synthesized or redacted a value in it.
    Four eyes is a rule on content: none of them may approve it."""
    authors: dict[int, str] = {}
    for pk in recording.excluded_approvers or []:
        if recording.captured_by_id == pk:
            copied = {
                StagedRecording.Origin.COPY_SIMILAR.value: "copied this recording from a similar one",
                StagedRecording.Origin.COPY_RECORDED.value: "copied this recording from a run's recorded answer",
                StagedRecording.Origin.RUN_RESULT.value: "staged this recording from a run's recorded result",
                StagedRecording.Origin.CONTRACT_MIGRATION.value: "ran the contract migration that staged this",
            }
            authors[pk] = copied.get(str(recording.origin), "captured this recording")
        elif recording.migration and pk == recording.migration.get("declared_by"):
            authors[pk] = "declared the contract revision whose change this recording carries"
        else:
            authors[pk] = "own the token that captured it"
    events = ReviewEvent.objects.filter(recording=recording, action__in=AUTHORING_ACTIONS, actor__isnull=False)
    for actor_id, action, path in events.order_by("id").values_list("actor_id", "action", "path"):
        done = "synthesized" if action == ReviewEvent.Action.SYNTHESIZE else "redacted"
        authors.setdefault(actor_id, f"{done} {path} in it")
    return authors


def approval_refusal(recording: StagedRecording, user: Any) -> str | None:
    """Why `user` may not approve `recording` now (role, four eyes on its content, state, findings), or None."""
    if not (getattr(user, "is_authenticated", False) and user.has_perm(REVIEW_PERM)):
        return "approving needs the reviewer role"
    authored = content_authors(recording).get(user.pk)
    if authored:
        return f"four eyes: you {authored}, so another reviewer must approve it"
    if recording.state != StagedRecording.State.STAGED:
        return f"{recording.public_id} is already {recording.state}"
    open_findings = unresolved_findings(recording)
    if open_findings:
        listed = ", ".join(f"{f['rule']} at {f['path']}" for f in open_findings[:5])
        return f"{len(open_findings)} unresolved finding(s) block approval: {listed} (redact or synthesize each)"
    return None


def promotion_blockers(recording: StagedRecording) -> list[str]:
    """What stops this recording from being approved by any reviewer: findings, contract tests."""
    out = []
    open_findings = unresolved_findings(recording)
    if open_findings:
        out.append(f"{len(open_findings)} unresolved finding(s)")
    try:
        _fixture_for(recording, _latest_base(recording))
    except ReviewRefused as exc:
        out.append(str(exc))
    return out


def _latest_base(recording: StagedRecording) -> ScenarioVersion:
    base = ScenarioVersion.objects.filter(name=recording.scenario_name).order_by("-version").first()
    if base is None:
        raise ReviewRefused(
            f"scenario {recording.scenario_name} has no version yet: import its package (import_package) so its "
            "contracts can test this recording"
        )
    return base


def fixture_dict(recording: StagedRecording, normalized: Mapping[str, Any]) -> dict[str, Any]:
    """The fixture a recording becomes (without its id, which is derived from this content)."""
    response = recording.response
    body = response.get("body")
    absent = {}
    for path in _redacted_paths(body, ""):
        absent[path or "$"] = "redacted"
    transition = recording.proposed_transition
    condition = None
    if transition:
        before = transition.get("revision_before")
        resource = transition.get("resource")
        if isinstance(resource, str) and resource:
            condition = (
                [{"resource": resource, "absent": True}]
                if before is None
                else [{"resource": resource, "revision": before}]
            )
    out: dict[str, Any] = {
        "tool": recording.tool,
        "contract_revision": recording.contract_revision,
        "request": dict(normalized),
        "response": {"outcome": recording.outcome, "body": body, "absent": absent},
        "provenance": {
            "recorded_at": recording.captured_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "source_revision": recording.source_revision or None,
            "connection": recording.connection,
            "synthetic": recording.synthetic,
            "fidelity_note": recording.fidelity_note or None,
        },
    }
    migration = recording.migration
    if migration:
        # A fixture a contract migration staged keeps what a capture cannot carry: its own world condition, the
        # absences it recorded (beside any redaction made in review), its fault stage, and where it came from.
        condition = migration.get("condition") or None
        out["response"]["absent"] = {**(migration.get("absent") or {}), **absent}
        if migration.get("fault_stage"):
            out["fault_stage"] = migration["fault_stage"]
        out["provenance"]["migrated_from"] = migration["migrated_from"]
    if condition:
        out["condition"] = condition
    if transition:
        out["transition"] = transition
    return out


def _redacted_paths(value: Any, path: str) -> Iterable[str]:
    if value == intake.REDACTED:
        yield path
    elif isinstance(value, dict):
        for key, child in value.items():
            yield from _redacted_paths(child, f"{path}.{key}" if path else key)
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _redacted_paths(child, f"{path}[{i}]")


def _fixture_for(recording: StagedRecording, base: ScenarioVersion) -> dict[str, Any]:
    """The contract tests: the fixture built from the recording, checked against base's contract."""
    try:
        contracts = load_scenario(scenario_package(base)).contracts
    except (ScenarioRefused, PackageError) as exc:
        raise ReviewRefused(f"{base.ref} cannot be loaded: {exc}") from None
    if recording.tool not in contracts:
        raise ReviewRefused(f"contract test: {base.ref} pins no contract for {recording.tool}")
    contract = contracts.get(recording.tool)
    if contract.revision != recording.contract_revision:
        raise ReviewRefused(
            f"contract test: {base.ref} pins {recording.tool} revision {contract.revision}, the recording was made "
            f"under revision {recording.contract_revision} (migrate it or recapture)"
        )
    if contract.effect_class != recording.effect_class:
        raise ReviewRefused(
            f"contract test: {recording.tool} revision {contract.revision} is a {contract.effect_class}, the capture "
            f"says {recording.effect_class}"
        )
    try:
        normalized = contract.normalize(recording.request.get("args"))
    except ContractError as exc:
        raise ReviewRefused(f"contract test: the arguments break {recording.tool}: {exc}") from None
    fixture = fixture_dict(recording, normalized)
    fixture["id"] = fixture_id_for(fixture)
    try:
        Fixture.from_dict(fixture, contract)
    except FixtureError as exc:
        raise ReviewRefused(f"contract test: {exc}") from None
    missing = mutation_gaps(fixture, contract.effect_class)
    if missing:
        raise ReviewRefused(
            f"mutation test: fixture {fixture['id']} ({recording.tool}, a mutation answered {recording.outcome}) "
            f"declares no {' and no '.join(missing)}: a static success would let a replay pass while nothing changed "
            "in the world (synthesize them, or exclude the tool with its limitation)"
        )
    return fixture


# A mutation answered with one of these said it happened: the world must change and the provider must say so.
_MUTATION_SUCCESS = ("ok", "empty")


def mutation_gaps(fixture: Mapping[str, Any], effect_class: str) -> list[str]:
    """What a fixture for a mutating tool lacks to be promoted (seed 000, "Missing mutations were treated most
    strictly"; seed 001, "The simulated world started from a snapshot"): a success needs the world transition it
    made and the receipt it answered with (a non-empty response body: the provider's identity for the effect).
    A failure (denied, not_found, error, …) changed nothing and needs neither."""
    if effect_class != "mutation":
        return []
    response = fixture.get("response") or {}
    if response.get("outcome") not in _MUTATION_SUCCESS:
        return []
    missing = []
    if not fixture.get("transition"):
        missing.append("world transition")
    body = response.get("body")
    if not isinstance(body, dict | list) or not body:
        missing.append("expected receipt")
    return missing


def fixture_id_for(fixture: Mapping[str, Any]) -> str:
    content = {k: v for k, v in fixture.items() if k != "id"}
    return "fx-" + canonical.digest_json(content).removeprefix("sha256:")[:20]


def _answer(fixture: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a replay sees of a fixture's answer, with the format's defaults filled in: a fixture written without
    `absent` answers exactly as one with `absent: {}` (the seed packages omit it; a promoted recording writes it)."""
    response = fixture.get("response") or {}
    return (response.get("outcome"), response.get("body"), response.get("absent") or {}, fixture.get("transition"))


def promoted_key_conflict(recording: StagedRecording) -> str | None:
    """When the latest version of the recording's scenario already answers its fixture key (same tool, contract
    revision, request digest and world condition) with another response: what holds the key, in one sentence.
    Approving would replace that answer in the new version, so it is never done silently."""
    base = ScenarioVersion.objects.filter(name=recording.scenario_name).order_by("-version").first()
    if base is None:
        return None
    try:
        mine = _fixture_for(recording, base)
    except ReviewRefused:
        return None  # the contract tests speak for themselves
    key = (mine.get("tool"), mine.get("contract_revision"), _digest_of(mine), mine.get("condition") or None)
    for f in base.fixture_items:
        if (f.get("tool"), f.get("contract_revision"), _digest_of(f), f.get("condition") or None) != key:
            continue
        if _answer(f) == _answer(mine):
            return None  # the same answer again: approving changes nothing a replay sees
        held = StagedRecording.objects.filter(
            state=StagedRecording.State.PROMOTED, fixture_version__fixture_id=f.get("id")
        ).first()
        source = f" (approved from {held.public_id})" if held else ""
        outcome = (f.get("response") or {}).get("outcome")
        return (
            f"{base.ref} already answers this request with fixture {f.get('id')}{source}, outcome {outcome}; "
            f"approving this one mints a version where its body ({recording.outcome}) replaces that answer"
        )
    return None


def recording_approve(
    *, recording: StagedRecording, user: Any, revision: int | None = None, note: str = ""
) -> StagedRecording:
    """Run the contract tests, mint the fixture version and a scenario version pinning it. Exactly once.

    A second body for a key the latest version already answers needs `note` (why it replaces the first): refused
    without one, before anything is written (a form left incomplete is not a decision for the history)."""
    note = (note or "").strip()
    refusal = approval_refusal(recording, user)
    if refusal is None:
        conflict = promoted_key_conflict(recording)
        if conflict and not note:
            raise ReviewRefused(f"{conflict}. Say why in a note to approve it anyway")
        try:
            return _approve(recording, user, revision, note=note, conflict=conflict)
        except ReviewRefused as exc:
            refusal = str(exc)
    # The refusal is a fact about the attempt, not about the recording's content: it goes to the audit log (who
    # tried, why it was refused), and the recording's review history keeps only decisions (issue 16). The page
    # shows the same reason beside a disabled Approve button, so a person only gets here with a stale page.
    _audit(
        user if getattr(user, "is_authenticated", False) else None,
        "recording.approve_refused",
        recording.public_id,
        {"reason": refusal, "revision": revision},
    )
    raise ReviewRefused(refusal)


def _approve(
    recording: StagedRecording, user: Any, revision: int | None, *, note: str = "", conflict: str | None = None
) -> StagedRecording:
    with transaction.atomic():
        # The claim: only the approver whose UPDATE changes the row goes on (the other blocks on the row lock
        # until this transaction ends, and then finds it promoted).
        claim = StagedRecording.objects.filter(pk=recording.pk, state=StagedRecording.State.STAGED)
        if revision is not None:
            claim = claim.filter(revision=revision)
        if claim.update(state=StagedRecording.State.PROMOTED, decided_at=timezone.now()) != 1:
            raise ReviewRefused(f"{recording.public_id} was approved, rejected or changed meanwhile: reload it")
        recording.refresh_from_db()
        # Again under the row lock: a change made between the check and the claim (by this approver too) counts.
        authored = content_authors(recording).get(user.pk)
        if authored:
            raise ReviewRefused(f"four eyes: you {authored}, so another reviewer must approve it")
        _lock_scenario(recording.scenario_name)
        base = _latest_base(recording)
        fixture = _fixture_for(recording, base)
        version = FixtureVersion.objects.filter(digest=canonical.digest_json(fixture)).first()
        if version is None:
            version = FixtureVersion.objects.create(
                fixture_id=fixture["id"],
                digest=canonical.digest_json(fixture),
                scenario_name=recording.scenario_name,
                tool=recording.tool,
                contract_revision=recording.contract_revision,
                request_digest=canonical.request_digest(fixture["request"]),
                fixture=fixture,
                approved_by=user,
            )
        scenario = scenario_version_mint(base=base, add_fixtures=[fixture], user=user, source="promotion", _locked=True)
        StagedRecording.objects.filter(pk=recording.pk).update(fixture_version=version, scenario_version=scenario)
        recording.refresh_from_db()
        detail = {
            "fixture": version.fixture_id,
            "fixture_digest": version.digest,
            "scenario": scenario.ref,
            "based_on": base.ref,
        }
        if conflict:
            detail["replaces"] = conflict
        _event(recording, ReviewEvent.Action.APPROVE, user, reason=note, detail=detail)
    log.info("approved %s: fixture %s in %s", recording.public_id, version.fixture_id, scenario.ref)
    return recording


def _lock_scenario(name: str) -> None:
    """Serialize mints of one scenario: lock its first version's row (a row every minter of it must pass)."""
    first = ScenarioVersion.objects.filter(name=name).order_by("version").values_list("pk", flat=True).first()
    if first is not None:
        list(ScenarioVersion.objects.select_for_update().filter(pk=first).values_list("pk", flat=True))


# --- minting scenario versions ---------------------------------------------------------------------------------


def scenario_version_mint(
    *,
    base: ScenarioVersion,
    add_fixtures: Iterable[Any] = (),
    exclude_tools: dict[str, str] | None = None,
    user: Any,
    source: str,
    _locked: bool = False,
) -> ScenarioVersion:
    """A new immutable ScenarioVersion `base.name@(latest+1)`: base's package plus fixtures / minus tools.

    `add_fixtures` are fixture dicts (with or without an id: a missing id is derived from the content) or
    FixtureVersion rows. A fixture with the key and world condition of one base holds replaces it (a re-recording
    supersedes, it does not make lookups ambiguous). `exclude_tools` {tool: reason} drops the tool's fixtures
    and records the reason in the package's excluded tools. The whole package is checked as any import is (every
    fixture against its contract); a failure is ScenarioRefused and nothing is stored. Race-safe: concurrent
    callers get one version number each.
    """
    try:
        package = scenario_package(base)
    except ScenarioRefused:
        raise
    files = {name: json.loads(data) for name, data in package.files.items()}
    fixtures: list[dict[str, Any]] = list(files["fixtures.json"])
    meta = files["scenario.json"]
    for tool, reason in (exclude_tools or {}).items():
        if not isinstance(reason, str) or not reason.strip():
            raise ScenarioRefused(f"excluding {tool}: say why (the reason is recorded in the scenario version)")
        fixtures = [f for f in fixtures if f.get("tool") != tool]
        excluded = [e for e in meta.get("excluded_tools", []) if e.get("tool") != tool]
        excluded.append({"tool": tool, "reason": reason.strip()})
        meta["excluded_tools"] = sorted(excluded, key=lambda e: e["tool"])
    for item in add_fixtures:
        fixture = dict(item.fixture if isinstance(item, FixtureVersion) else item)
        fixture.setdefault("id", fixture_id_for(fixture))
        key = (fixture.get("tool"), fixture.get("contract_revision"), _digest_of(fixture))
        fixtures = [
            f
            for f in fixtures
            if f.get("id") != fixture["id"]
            and not (
                (f.get("tool"), f.get("contract_revision"), _digest_of(f)) == key
                and (f.get("condition") or None) == (fixture.get("condition") or None)
            )
        ]
        fixtures.append(fixture)
    files["fixtures.json"] = fixtures
    return scenario_files_mint(base=base, files=files, user=user, source=source, _locked=_locked)


def scenario_files_mint(
    *, base: ScenarioVersion, files: dict[str, Any], user: Any, source: str, _locked: bool = False
) -> ScenarioVersion:
    """Store `files` (a scenario package's files as JSON values, built from `base`) as `base.name@(latest+1)`,
    based on `base`. Checked whole as any import is; race-safe as `scenario_version_mint` says."""
    meta = files["scenario.json"]
    actor = user if getattr(user, "is_authenticated", False) else None
    for _attempt in range(5):
        with transaction.atomic():
            if not _locked:
                _lock_scenario(base.name)
            latest = ScenarioVersion.objects.filter(name=base.name).aggregate(n=Max("version"))["n"] or 0
            meta["version"] = latest + 1
            try:
                new_package = build_scenario(files)
            except PackageError as exc:
                raise ScenarioRefused(f"{base.name}@{latest + 1} would not load: {exc}") from None
            try:
                with transaction.atomic():
                    return ScenarioVersion.objects.create(
                        name=base.name,
                        version=latest + 1,
                        digest=new_package.digest,
                        manifest=new_package.manifest,
                        files={n: d.decode("utf-8") for n, d in sorted(new_package.files.items())},
                        source=source[:20],
                        imported_by=actor,
                        based_on=base,
                    )
            except IntegrityError:
                # Another minter took this number (or minted these exact bytes); take the next one.
                if ScenarioVersion.objects.filter(digest=new_package.digest).exists():
                    raise ScenarioRefused(
                        f"a scenario version with exactly this content is already held "
                        f"({ScenarioVersion.objects.get(digest=new_package.digest).ref})"
                    ) from None
                continue
    raise ScenarioRefused(f"could not mint a version of {base.name}: too many concurrent mints, try again")


def _digest_of(fixture: Mapping[str, Any]) -> str | None:
    request = fixture.get("request")
    return fixture.get("request_digest") or (canonical.request_digest(request) if request is not None else None)


def fixture_request_digest(fixture: Mapping[str, Any]) -> str | None:
    """The request digest a fixture (as a scenario package holds it) is keyed by."""
    return _digest_of(fixture)


# --- copy similar ------------------------------------------------------------------------------------------------


def recording_copy_similar(
    *, replay_run: Any, missing_event_id: str, like_fixture_id: str | None, user: Any
) -> StagedRecording:
    """'Copy similar' on a fixture.missing event of a replay's run: a staged candidate with its own identity,
    keyed by the missing call's normalized request (read from the run's tool.call that `call_id` names), whose
    response is copied from fixture `like_fixture_id` of the run's scenario version (or empty when None),
    marked synthetic. It never satisfies anything until a reviewer approves it (and it was not the same user)."""
    from runs.models import Event

    if not (getattr(user, "is_authenticated", False) and (user.has_perm(REVIEW_PERM) or user.has_perm(CAPTURE_PERM))):
        raise ReviewRefused("copying a fixture into staging needs the reviewer or operator role")
    missing = Event.objects.filter(run=replay_run, event_id=missing_event_id).first()
    if missing is None or missing.kind not in ("fixture.missing", "fixture.ambiguous"):
        raise ReviewRefused(f"{replay_run.run_id} has no fixture.missing event {missing_event_id!r}")
    body = missing.body
    call_id = body.get("call_id")
    call = Event.objects.filter(run=replay_run, event_id=call_id, kind="tool.call").first() if call_id else None
    if call is None:
        raise ReviewRefused(
            f"{missing_event_id} names no tool call (call_id), so there is no request to key a candidate by: "
            f"{body.get('reason', '')}".rstrip(": ")
        )
    scenario_ref = body.get("scenario") or {}
    scenario = ScenarioVersion.objects.filter(
        name=scenario_ref.get("name") or "", version=scenario_ref.get("version") or 0
    ).first()
    if scenario is None:
        raise ReviewRefused(f"the run's scenario version {scenario_ref!r} is not held")
    tool = call.body.get("tool")
    revision = call.body.get("contract_revision")
    contracts = load_scenario(scenario_package(scenario)).contracts
    effect_class = contracts.get(tool).effect_class if tool in contracts else "read"
    response_body: Any = None
    outcome = "empty"
    transition = None
    note = (
        "synthetic: no response was recorded for this request; the response is empty "
        f"(copy similar in {replay_run.run_id})"
    )
    like = None
    if like_fixture_id:
        like = next((f for f in scenario.fixture_items if f.get("id") == like_fixture_id), None)
        if like is None:
            raise ReviewRefused(f"{scenario.ref} holds no fixture {like_fixture_id!r}")
        if like.get("tool") != tool:
            raise ReviewRefused(
                f"fixture {like_fixture_id} answers {like.get('tool')}, not {tool}: another tool's answer is never a "
                "candidate"
            )
        response_body = like.get("response", {}).get("body")
        outcome = like.get("response", {}).get("outcome", "ok")
        transition = like.get("transition")
        note = (
            f"synthetic: the response is copied from fixture {like_fixture_id} of {scenario.ref}, recorded for "
            f"another request; it was never observed for this one (copy similar in {replay_run.run_id})"
        )
    else:
        recorded = _recorded_answer(replay_run, body)
        if recorded is not None:
            raise ReviewRefused(
                f"the source run recorded an answer to this request ({recorded[1].get('outcome')}, "
                f"{recorded[1]['id']}): copy the recorded answer instead of an empty one"
            )
    capture = intake.tool_call_capture(
        scenario=scenario.name,
        tool=tool,
        contract_revision=revision,
        connection=(like or {}).get("provenance", {}).get("connection") or "copy-similar",
        captured_at=timezone.now().isoformat().replace("+00:00", "Z"),
        source_revision=None,
        effect_class=effect_class,
        args=call.body.get("request") or {},
        status=200,
        body=response_body,
        proposed_transition=transition if effect_class == "mutation" else None,
        world_revision=body.get("world_revision") or 0,
    )
    try:
        red = intake.intake(capture, digest_key=capture_digest_key())
    except intake.CaptureError as exc:
        raise ReviewRefused(f"the candidate cannot be staged: {exc}") from None
    recording = _stage(
        red,
        origin=StagedRecording.Origin.COPY_SIMILAR,
        actor=user,
        token=None,
        outcome=outcome,
        synthetic=True,
        fidelity_note=note,
        copied_from={
            "run": replay_run.run_id,
            "event": missing_event_id,
            "call": call_id,
            "fixture": like_fixture_id,
            "scenario": scenario.ref,
            "request_digest": call.body.get("request_digest"),
        },
    )
    log.info("copy similar: staged %s from %s/%s", recording.public_id, replay_run.run_id, missing_event_id)
    return recording


# --- copy the recorded answer ------------------------------------------------------------------------------------

# The HTTP status a recorded outcome stands for (the inverse of `outcome_for`, for the outcomes a fixture holds).
_OUTCOME_STATUS = {
    "ok": 200,
    "empty": 200,
    "not_found": 404,
    "denied": 403,
    "deleted": 410,
    "timeout": 504,
    "error": 500,
}


def _recorded_answer(replay_run: Any, missing: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """(the source run's tool.call, its tool.result) for the request a replay's `fixture.missing` names, or None
    when the run that was replayed never made that request (or recorded no result for it)."""
    from runs.models import Event

    source = getattr(replay_run, "parent", None)
    if source is None:
        return None
    call = None
    for body in (
        Event.objects.filter(run=source, kind="tool.call", body__tool=missing.get("tool"))
        .order_by("seq")
        .values_list("body", flat=True)[:500]
    ):
        if body.get("request_digest") == missing.get("request_digest") and body.get("contract_revision") == missing.get(
            "contract_revision"
        ):
            call = body
            break
    if call is None:
        return None
    result = (
        Event.objects.filter(run=source, kind="tool.result", body__call_id=call["id"])
        .values_list("body", flat=True)
        .first()
    )
    return (call, result) if result is not None else None


def _recorded_body(run: Any, digest: str | None) -> Any:
    """A recorded result's body: its blob read from the blob store, JSON when it parses, else text."""
    from runs.models import RunBlob, blob_storage_name

    if not digest:
        return None
    held = RunBlob.objects.filter(run=run, blob__digest=digest).select_related("blob").first()
    if held is None:
        raise ReviewRefused(f"the recorded body {digest} is not held with run {run.run_id}")
    try:
        with storages["blobs"].open(blob_storage_name(digest), "rb") as fh:
            data = fh.read()
    except FileNotFoundError:
        raise ReviewRefused(f"the recorded body {digest} of run {run.run_id} is no longer held") from None
    try:
        return json.loads(data)
    except ValueError:
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            import base64

            return {"encoding": "base64", "data": base64.b64encode(data).decode("ascii")}


def recording_copy_recorded(*, replay_run: Any, missing_event_id: str, user: Any) -> StagedRecording:
    """'Copy the recorded answer' on a fixture.missing event of a replay's run: a staged candidate keyed by the
    missing request, whose outcome, status and body are those the source run recorded in its tool.result for the
    same request. It goes through the same intake (redaction, secret scan) and review as any capture; the copier
    may not approve it. Not synthetic: it was observed, though never reviewed."""
    from runs.models import Event

    if not (getattr(user, "is_authenticated", False) and (user.has_perm(REVIEW_PERM) or user.has_perm(CAPTURE_PERM))):
        raise ReviewRefused("copying a recorded answer into staging needs the reviewer or operator role")
    missing = Event.objects.filter(run=replay_run, event_id=missing_event_id).first()
    if missing is None or missing.kind not in ("fixture.missing", "fixture.ambiguous"):
        raise ReviewRefused(f"{replay_run.run_id} has no fixture.missing event {missing_event_id!r}")
    body = missing.body
    answer = _recorded_answer(replay_run, body)
    if answer is None:
        raise ReviewRefused("the run that was replayed never recorded an answer to this request: nothing to copy")
    call, result = answer
    outcome = result.get("outcome")
    if outcome not in _OUTCOME_STATUS:
        raise ReviewRefused(f"the recorded answer {result['id']} is {outcome}: not an observation a fixture can hold")
    scenario_ref = body.get("scenario") or {}
    scenario = ScenarioVersion.objects.filter(
        name=scenario_ref.get("name") or "", version=scenario_ref.get("version") or 0
    ).first()
    if scenario is None:
        raise ReviewRefused(f"the run's scenario version {scenario_ref!r} is not held")
    tool = str(call.get("tool") or "")
    contracts = load_scenario(scenario_package(scenario)).contracts
    effect_class = contracts.get(tool).effect_class if tool in contracts else "read"
    source = replay_run.parent
    wall = ((result.get("at") or {}).get("wall")) or timezone.now().isoformat().replace("+00:00", "Z")
    capture = intake.tool_call_capture(
        scenario=scenario.name,
        tool=tool,
        contract_revision=call.get("contract_revision"),
        connection=f"recorded:{source.run_id}",
        captured_at=wall,
        source_revision=None,
        effect_class=effect_class,
        args=call.get("request"),
        status=_OUTCOME_STATUS[outcome],
        body=_recorded_body(source, result.get("blob")),
        world_revision=body.get("world_revision") or 0,
    )
    try:
        red = intake.intake(capture, digest_key=capture_digest_key())
    except intake.CaptureError as exc:
        raise ReviewRefused(f"the recorded answer cannot be staged: {exc}") from None
    recording = _stage(
        red,
        origin=StagedRecording.Origin.COPY_RECORDED,
        actor=user,
        token=None,
        outcome=outcome,
        fidelity_note=(
            f"copied from the answer run {source.run_id} recorded in {result['id']} (origin "
            f"{result.get('origin')}, outcome {outcome}); observed then, never reviewed before"
        ),
        copied_from={
            "run": replay_run.run_id,
            "event": missing_event_id,
            "call": call["id"],
            "result": result["id"],
            "source_run": source.run_id,
            "fixture": None,
            "scenario": scenario.ref,
            "request_digest": call.get("request_digest"),
        },
    )
    log.info("copy recorded answer: staged %s from %s/%s", recording.public_id, source.run_id, result["id"])
    return recording


# --- captures from recordings: HAR files and VCR.py cassettes ------------------------------------------------------


@dataclass
class RecordingsResult:
    """What staging a recording file did: one StageResult per staged exchange, and the exchanges skipped."""

    kind: str  # "har" | "vcr"
    staged: list[tuple[Any, StageResult]]  # (recordings.Recording, its StageResult), in the file's order
    skipped: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        """The `capture --json` shape of DESIGN §8 for the first staged recording (its keys stay at the top), plus
        `format`, `recordings` (each staged exchange: the capture keys and `entry`, `method`, `url`, `rule`) and
        `skipped` (`entry`, `method`, `url`, `reason`)."""
        listed = [
            {**result.to_json(), "entry": rec.index, "method": rec.method, "url": rec.url, "rule": rec.rule}
            for rec, result in self.staged
        ]
        return {**listed[0], "format": self.kind, "recordings": listed, "skipped": self.skipped}


def recordings_stage(
    *,
    source: Any,
    fields: Mapping[str, Any],
    mapping: bytes | str | None = None,
    captured_at: str | None = None,
    user: Any = None,
    token: Any = None,
) -> RecordingsResult:
    """Stage every exchange of a HAR file or VCR cassette (`recordings.load`) as its own recording, each through
    the same intake as a native capture. All or nothing: an exchange that fails intake refuses the whole file,
    naming it, and nothing is stored. `recordings.RecordingError` / `intake.CaptureError` if refused."""
    from . import recordings

    rules = recordings.parse_mapping(mapping) if mapping is not None else None
    converted = recordings.convert(
        source, fields=fields, mapping=rules, captured_at=captured_at or recordings.now_instant()
    )
    if not converted.recordings:
        first = "; ".join(f"{s['method']} {s['url']}: {s['reason']}" for s in converted.skipped[:3])
        raise recordings.RecordingError(
            f"nothing to stage: all {len(converted.skipped)} exchanges of the {source.label} were skipped ({first})"
        )
    key = capture_digest_key()
    checked = []
    actor = user if getattr(user, "is_authenticated", False) else None
    for rec in converted.recordings:
        try:
            red = intake.intake(rec.capture, digest_key=key)
            # All or nothing: the first exchange the record policy refuses refuses the file (its trace is kept).
            admitted = connections.capture_admit(red.capture, door=converted.kind, actor=actor, token=token)
        except connections.CaptureRefused as exc:
            raise connections.CaptureRefused(
                f"entry {rec.index} ({rec.method} {rec.url}): {exc}", exc.observation
            ) from None
        except intake.CaptureError as exc:
            raise intake.CaptureError(f"entry {rec.index} ({rec.method} {rec.url}): {exc}") from None
        checked.append((rec, red, admitted))
    staged = _stage_all(
        [
            dict(
                red=red,
                origin=StagedRecording.Origin.CAPTURE,
                outcome=outcome_for(red.capture["response"]["status"], red.capture["response"].get("body")),
                admitted=admitted,
            )
            for _, red, admitted in checked
        ],
        actor=actor,
        token=token,
    )
    log.info("staged %d recordings from a %s (%d skipped)", len(staged), source.label, len(converted.skipped))
    return RecordingsResult(
        kind=converted.kind,
        staged=[(rec, StageResult(r, promotion_blockers(r))) for (rec, _, _), r in zip(checked, staged, strict=True)],
        skipped=converted.skipped,
    )


def _stage_all(items: list[dict[str, Any]], *, actor: Any, token: Any) -> list[StagedRecording]:
    """`_stage` each item in one transaction: all are stored or none (the blobs of a rolled-back batch are
    removed again, unless something else holds them)."""
    staged: list[StagedRecording] = []
    try:
        with transaction.atomic():
            for item in items:
                red = item.pop("red")
                staged.append(_stage(red, actor=actor, token=token, **item))
    except Exception:
        for recording in staged:
            for digest in recording.body_blobs.values():
                _forget_blob(digest, recording)
        raise
    return staged


# --- the trace as the recording: a run's tool results -------------------------------------------------------------

# Results whose answer came from the world; `fixture` and `derived` ones were answered by this console's own
# fixtures (or computed), and staging them would pass a fixture off as an observation.
RECORDED_ORIGINS = ("historical", "live")
MAX_RUN_RESULTS = 200  # results staged in one request; more: narrow it by tool or event
_WORLD_KINDS = ("checkpoint", "world.observation", "world.transition")


@dataclass
class RunRecordingsResult:
    run: str
    scenario: str
    staged: list[tuple[dict[str, Any], StageResult]]  # (the tool.result body, its StageResult)
    skipped: list[dict[str, Any]]  # {event, tool, reason}
    already: list[dict[str, Any]]  # {event, recording, state}: staged from this result before

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run,
            "scenario": self.scenario,
            "recordings": [
                {**result.to_json(), "event": body["id"], "call": body.get("call_id"), "outcome": body.get("outcome")}
                for body, result in self.staged
            ],
            "skipped": self.skipped,
            "already": self.already,
        }


def run_recordings_stage(
    *,
    run: Any,
    user: Any = None,
    token: Any = None,
    scenario: str | None = None,
    effect_class: str | None = None,
    tool: str | None = None,
    events: Iterable[str] | None = None,
    connection: str | None = None,
) -> RunRecordingsResult:
    """Stage the tool results of an imported run as recordings, each with its provenance (run, result event,
    call), through the same intake and four-eyes review as a capture.

    Staged: each `tool.result` whose answer came from the world (origin historical or live) with an outcome a
    fixture can hold (ok, empty, not_found, denied, deleted, error, timeout: the failures are real answers a replay
    must be able to give). Skipped with the reason: results answered by a fixture, `unknown` outcomes, results
    without their call or with a body the run does not hold. A result staged before is reported in `already`,
    never staged twice. The scenario is the run's; a run without one needs `scenario`. The effect class is the
    scenario's contract's for the tool, else `effect_class`. All or nothing. `ReviewRefused` if refused.

    `connection` names the reviewed connection the run's tool calls went through: the results are captures of it,
    judged by the record policy like any other (a mutation result of a live connection is refused, with its trace
    kept: `connections.CaptureRefused`)."""
    from runs.models import Event, RunBlob
    from runs.retention import blob_expiries

    if user is not None and getattr(user, "is_authenticated", False) and not user.has_perm(CAPTURE_PERM):
        raise ReviewRefused("staging a run's results needs the operator or reviewer role")
    scenario = (scenario or "").strip() or None
    name = run.scenario_name or scenario
    if not name:
        raise ReviewRefused(
            f"scenario: run {run.run_id} names no scenario: say which scenario its results were recorded in "
            "(--scenario, or the scenario field)"
        )
    if run.scenario_name and scenario and scenario != run.scenario_name:
        raise ReviewRefused(
            f"scenario: run {run.run_id} was recorded in {run.scenario_name}, not {scenario}: its results are "
            f"staged into {run.scenario_name}"
        )
    if effect_class not in (None, "", *intake.EFFECT_CLASSES):
        raise ReviewRefused(f"effect_class: one of {', '.join(intake.EFFECT_CLASSES)}, got {effect_class!r}")
    connection = (connection or "").strip()
    if not connection:
        raise ReviewRefused(
            f"connection: say which reviewed connection the tool calls of run {run.run_id} went through (--connection, "
            "or the connection field): record mode stages only what came through an approved connection"
        )
    version = None
    if run.scenario_name == name and run.scenario_version is not None:
        version = ScenarioVersion.objects.filter(name=name, version=run.scenario_version).first()
    if version is None:
        version = ScenarioVersion.objects.filter(name=name).order_by("-version").first()
    contracts = None
    if version is not None:
        try:
            contracts = load_scenario(scenario_package(version)).contracts
        except (ScenarioRefused, PackageError):
            contracts = None
    wanted = set(events) if events is not None else None
    results = Event.objects.filter(run=run, kind="tool.result")
    if wanted is not None:
        results = results.filter(event_id__in=wanted)
    result_rows = list(results.order_by("seq").values_list("seq", "body")[: MAX_RUN_RESULTS * 10 + 1])
    if len(result_rows) > MAX_RUN_RESULTS * 10:
        raise ReviewRefused(
            f"run {run.run_id} holds more than {MAX_RUN_RESULTS * 10} tool results: stage them by tool or by event"
        )
    if wanted is not None:
        unknown = sorted(wanted - {body.get("id") for _, body in result_rows})
        if unknown:
            raise ReviewRefused(f"run {run.run_id} holds no tool.result {unknown[0]!r}")
    if not result_rows:
        raise ReviewRefused(f"run {run.run_id} holds no tool result to stage")
    call_ids = {body.get("call_id") for _, body in result_rows if isinstance(body.get("call_id"), str)}
    calls = {
        body.get("id"): body
        for body in Event.objects.filter(run=run, kind="tool.call", event_id__in=call_ids).values_list(
            "body", flat=True
        )
    }
    held = {
        r.source_event: r
        for r in StagedRecording.objects.filter(
            source_run=run.run_id, source_event__in=[body.get("id") for _, body in result_rows]
        )
    }
    skipped: list[dict[str, Any]] = []
    already: list[dict[str, Any]] = []
    chosen: list[tuple[int, dict[str, Any], dict[str, Any]]] = []
    # A body whose bytes the retention sweep removed cannot become a recording: skipped, saying so (docs/retention.md).
    expiries = blob_expiries(body["blob"] for _, body in result_rows if isinstance(body.get("blob"), str))
    for seq, body in result_rows:
        call = calls.get(body.get("call_id"))
        called = str((call or {}).get("tool") or "")
        if tool and called != tool:
            continue

        def skip(reason: str, body: dict[str, Any] = body, called: str = called) -> None:
            skipped.append({"event": body.get("id"), "tool": called or None, "reason": reason})

        if call is None:
            skip(f"it names no tool.call of the run (call_id {body.get('call_id')!r})")
        elif body.get("id") in held:
            prior = held[body["id"]]
            already.append({"event": body["id"], "recording": prior.public_id, "state": prior.state})
        elif body.get("origin") not in RECORDED_ORIGINS:
            skip(f"origin {body.get('origin')}: the answer came from a fixture or was derived, not from the world")
        elif body.get("outcome") not in _OUTCOME_STATUS:
            skip(f"outcome {body.get('outcome')}: not an observation a fixture can hold")
        elif not isinstance(call.get("request"), dict):
            skip("its call's request is not an object of arguments")
        elif not isinstance(call.get("contract_revision"), int) or isinstance(call.get("contract_revision"), bool):
            skip("its call names no contract revision")
        elif body.get("blob") in expiries:
            skip(f"its body {expiries[body['blob']].sentence}")
        else:
            chosen.append((seq, body, call))
    if tool and not (chosen or skipped or already):
        raise ReviewRefused(f"run {run.run_id} holds no result of tool {tool!r}")
    if len(chosen) > MAX_RUN_RESULTS:
        raise ReviewRefused(
            f"run {run.run_id} has {len(chosen)} results to stage, more than {MAX_RUN_RESULTS} at once: stage them "
            "by tool (--tool) or by event (--event)"
        )
    if not chosen:
        if already:
            return RunRecordingsResult(run.run_id, name, [], skipped, already)
        first = "; ".join(f"{s['event']}: {s['reason']}" for s in skipped[:3])
        raise ReviewRefused(f"run {run.run_id} has no tool result to stage ({first})")
    media = dict(RunBlob.objects.filter(run=run).values_list("blob__digest", "media_type")[:10_000])
    key = capture_digest_key()
    items = []
    for seq, body, call in chosen:
        called = str(call["tool"])
        if contracts is not None and called in contracts:
            effect = contracts.get(called).effect_class
        elif effect_class:
            effect = effect_class
        else:
            where = f"{version.ref} pins no contract for it" if version is not None else f"no version of {name} is held"
            raise ReviewRefused(
                f"effect_class: unknown for {called} ({where}): say whether it reads or mutates (--effect-class, "
                "or the effect_class field)"
            )
        outcome = body["outcome"]
        headers = {"Content-Type": media[body["blob"]]} if body.get("blob") in media else {}
        capture = intake.tool_call_capture(
            scenario=name,
            tool=called,
            contract_revision=call["contract_revision"],
            connection=connection,
            captured_at=_recorded_instant(body, run),
            source_revision=None,
            effect_class=effect,
            args=call["request"],
            status=_OUTCOME_STATUS[outcome],
            body=_recorded_body(run, body.get("blob")),
            response_headers=headers,
            world_revision=_world_revision_before(run, seq),
        )
        try:
            red = intake.intake(capture, digest_key=key)
            admitted = connections.capture_admit(red.capture, door="run-result", actor=user, token=token)
        except connections.CaptureRefused as exc:
            raise connections.CaptureRefused(f"{body['id']}: {exc}", exc.observation) from None
        except intake.CaptureError as exc:
            raise ReviewRefused(f"{body['id']} cannot be staged: {exc}") from None
        items.append(
            dict(
                red=red,
                admitted=admitted,
                origin=StagedRecording.Origin.RUN_RESULT,
                outcome=outcome,
                fidelity_note=(
                    f"staged from the result run {run.run_id} recorded in {body['id']} (origin {body.get('origin')}, "
                    f"outcome {outcome}); observed then, never reviewed before"
                ),
                copied_from={
                    "run": run.run_id,
                    "event": body["id"],
                    "call": call.get("id"),
                    "scenario": version.ref if version is not None else name,
                    "request_digest": call.get("request_digest"),
                    "result_origin": body.get("origin"),
                    "absent": body.get("absent") or {},
                },
                source=(run.run_id, body["id"]),
            )
        )
    actor = user if getattr(user, "is_authenticated", False) else None
    try:
        staged = _stage_all(items, actor=actor, token=token)
    except IntegrityError:
        raise ReviewRefused(
            f"results of run {run.run_id} were being staged by another request at the same moment: run it again to "
            "see them as already staged"
        ) from None
    log.info("staged %d recordings from the results of run %s", len(staged), run.run_id)
    return RunRecordingsResult(
        run=run.run_id,
        scenario=name,
        staged=[(body, StageResult(r, promotion_blockers(r))) for (_, body, _), r in zip(chosen, staged, strict=True)],
        skipped=skipped,
        already=already,
    )


def _recorded_instant(body: Mapping[str, Any], run: Any) -> str:
    """When the result was recorded: its wall time when it is an instant with a zone, else the run's creation."""
    wall = (body.get("at") or {}).get("wall")
    if isinstance(wall, str):
        try:
            moment = datetime.fromisoformat(wall.replace("Z", "+00:00"))
        except ValueError:
            moment = None
        if moment is not None and moment.tzinfo is not None:
            return wall
    return run.created_at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _world_revision_before(run: Any, seq: int) -> int:
    """The world revision the run had reached before event `seq`: its last checkpoint, observation or transition
    (0, the starting world, when none came before)."""
    from runs.models import Event

    last = (
        Event.objects.filter(run=run, kind__in=_WORLD_KINDS, seq__lt=seq)
        .order_by("-seq")
        .values_list("kind", "body")
        .first()
    )
    if last is None:
        return 0
    kind, body = last
    value = body.get("revision_after") if kind == "world.transition" else body.get("world_revision")
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**63 else 0
