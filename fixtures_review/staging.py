"""Storing a capture as a staged recording: the one write every way into staging ends in (`_stage`, and
`_stage_all` for a batch stored all or nothing), the fixture key a recording is filed under (`_key`), its bodies in
the blob store (written, held, forgotten), its review events and audit entries, and the server's key for captures'
original digests (`capture_digest_key`).

Nothing reaches the database or the blob store before `intake` has redacted and masked it: `_stage` takes an
`intake.Redacted` only. The ways in (captures, copies, a run's results) are in `captures`, `copying` and
`run_results`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.files.storage import storages
from django.db import transaction
from django.utils.crypto import salted_hmac

from console.blob_store import BlobStoreRefused, blob_put
from n17q_engine import canonical
from n17q_engine.agent.model import contract_for
from n17q_engine.contracts import Contract, ContractError
from n17q_engine.package import PackageError
from n17q_secrets import gate

from . import intake
from .models import ContractRevision, ReviewEvent, ScenarioVersion, StagedRecording
from .retention import capture_retention_class, recording_bodies_hold
from .scenarios import ScenarioRefused, loaded_scenario

# The review services log under the one name they had before the split (a log line's `logger` is unchanged).
log = logging.getLogger("fixtures_review.services")


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
    contract, note = _contract(cap["scenario"], cap["tool"], cap["contract_revision"])
    _effect_class_check(cap, contract)
    normalized, digest, key_note = _key_under(contract, note, cap["request"]["args"])
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


class EffectClassRefused(intake.CaptureError):
    """A capture whose effect class is not its tool contract's; one line (HTTP 400 from the API)."""


def _effect_class_check(cap: dict[str, Any], contract: Contract | None) -> None:
    """A capture's effect class is its contract's, never its own word: a live mutation labelled `read` would pass
    the record policy's live-mutation rule and be stored. The contract is the one the scenario's latest version
    pins at the capture's revision, else the revision declared to the console (ContractRevision); with neither
    there is no contract to disagree with (the recording cannot be promoted until there is one)."""
    tool, revision, said = cap["tool"], cap["contract_revision"], cap["effect_class"]
    if contract is not None:
        effect, where = contract.effect_class, f"the contract scenario {cap['scenario']} pins"
    else:
        declared = ContractRevision.objects.filter(tool=tool, revision=revision).values_list("contract", flat=True)
        found = declared.first()
        if not isinstance(found, dict) or "effect_class" not in found:
            return
        effect, where = found["effect_class"], "the contract declared to the console"
    if effect != said:
        raise EffectClassRefused(
            f"effect_class: {tool} revision {revision} is a {effect} ({where}), the capture says {said}: a "
            "capture's effect class is its contract's; nothing was stored"
        )


def _contract(scenario: str, tool: str, revision: int) -> tuple[Contract | None, str]:
    """The contract of `tool` at `revision` the scenario's latest version pins, or None and why there is none."""
    latest = ScenarioVersion.objects.filter(name=scenario).order_by("-version").first()
    if latest is None:
        return None, f"no version of scenario {scenario} is held yet: the digest is of the arguments as sent"
    try:
        contracts = loaded_scenario(latest).contracts
    except (ScenarioRefused, PackageError) as exc:
        return None, f"{latest.ref} cannot be loaded: {exc}"
    contract = contract_for(contracts, tool)  # model.chat: the built-in contract where none is pinned
    if contract is None:
        return None, f"{latest.ref} pins no contract for {tool}: the digest is of the arguments as sent"
    if contract.revision != revision:
        return (
            None,
            f"contract mismatch: {latest.ref} pins {tool} revision {contract.revision}, the capture was made "
            f"under revision {revision}",
        )
    return contract, ""


def _key(scenario: str, tool: str, revision: int, args: Any) -> tuple[dict | None, str, str]:
    """(normalized request, request digest, a note when it could not be normalized)."""
    return _key_under(*_contract(scenario, tool, revision), args)


def _key_under(contract: Contract | None, note: str, args: Any) -> tuple[dict | None, str, str]:
    as_sent = canonical.request_digest(args)
    if contract is None:
        return None, as_sent, note
    try:
        normalized, digest = contract.digest(args)
    except ContractError as exc:
        return None, as_sent, f"the arguments break {contract.tool} revision {contract.revision}: {exc}"
    return normalized, digest, ""


def _write_bodies(recording: StagedRecording, written: list[str]) -> dict[str, str]:
    """Each body's bytes in the blob store (content-addressed), for the raw download."""
    out = {}
    for where, part in (("request.body", recording.request), ("response.body", recording.response)):
        data = intake.body_bytes(part.get("body"))
        if not data:
            continue
        # The recording's bodies were masked by the intake's scan (fixtures_review.intake) before it was staged;
        # the gate runs again here on the bytes as stored (a body is small, and a decoding of it the intake did
        # not make, a container's member, is then scanned too).
        findings: list[dict[str, str]] = []
        try:
            gated = gate.gate_bytes(data, media_type=_media_type(part), where=where, findings=findings)
        except gate.NotStorable:
            continue  # a container the gate cannot rebuild masked: no raw download of it, the recording keeps its body
        try:
            stored = blob_put(gated)
        except BlobStoreRefused as exc:
            raise RuntimeError(str(exc)) from exc
        if stored.written:
            written.append(stored.name)
        out[where] = stored.digest
    return out


def _media_type(part: dict[str, Any]) -> str:
    headers = part.get("headers")
    if isinstance(headers, dict):
        for name, value in headers.items():
            if str(name).lower() == "content-type":
                return str(value[0] if isinstance(value, list) and value else value)
    return "application/octet-stream"


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
