"""Approving a staged recording (DESIGN §7): four eyes on its content (`content_authors`: none of its authors may
approve it), why a reviewer may not approve it now (`approval_refusal`) or why none may (`promotion_blockers`), a
second body for a key the latest version already answers (`promoted_key_conflict`), and the approval itself
(`recording_approve`), which mints the fixture version and a scenario version pinning it. Exactly once: approving
claims the recording with a conditional UPDATE (`state = staged AND revision = <the one the reviewer read>`), so of
two reviewers approving at once exactly one changes a row, and only that one mints.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from n17q_engine import canonical
from runs.retention import hold_expiry

from .content import unresolved_findings
from .fixture_checks import _fixture_for, _latest_base, fixture_id_for
from .minting import _digest_of, _lock_scenario, scenario_version_mint
from .models import FixtureVersion, ReviewEvent, ScenarioVersion, StagedRecording
from .retention import FixtureBodyRefused, fixture_body_hold, fixture_body_put
from .review_rules import REVIEW_PERM, ReviewRefused
from .scenarios import fixture_body_digest
from .staging import _audit, _event, _remove_blobs

# The review services log under the one name they had before the split (a log line's `logger` is unchanged).
log = logging.getLogger("fixtures_review.services")


# The review actions that write content a fixture version will hold: whoever did one is one of its authors.
AUTHORING_ACTIONS = (ReviewEvent.Action.SYNTHESIZE, ReviewEvent.Action.REDACT, ReviewEvent.Action.NO_CHANGE)
_AUTHORED = {
    ReviewEvent.Action.SYNTHESIZE.value: "synthesized {path} in it",
    ReviewEvent.Action.REDACT.value: "redacted {path} in it",
    ReviewEvent.Action.NO_CHANGE.value: "declared that its answer changed nothing in the world",
}


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
            if (recording.copied_from or {}).get("answer") == "typed":
                authors[pk] = "typed the model answer of this recording"
        elif recording.migration and pk == recording.migration.get("declared_by"):
            authors[pk] = "declared the contract revision whose change this recording carries"
        else:
            authors[pk] = "own the token that captured it"
    events = ReviewEvent.objects.filter(recording=recording, action__in=AUTHORING_ACTIONS, actor__isnull=False)
    for actor_id, action, path in events.order_by("id").values_list("actor_id", "action", "path"):
        authors.setdefault(actor_id, _AUTHORED[str(action)].format(path=path))
    return authors


def _expired_bodies(recording: StagedRecording) -> str | None:
    """Its hold on a body ended under retention (docs/retention.md): a fixture minted from it would answer with
    nothing, so it is not promotable; said with the deletion records."""
    expired = sorted(recording.expired_bodies or {})
    if not expired:
        return None
    records = ", ".join(str(recording.expired_bodies[where]) for where in expired)
    return (
        f"its {', '.join(expired)} expired under retention (deletion record {records}): nothing is left to "
        "promote; capture the response again"
    )


def approval_refusal(recording: StagedRecording, user: Any) -> str | None:
    """Why `user` may not approve `recording` now (role, four eyes on its content, state, findings), or None."""
    if not (getattr(user, "is_authenticated", False) and user.has_perm(REVIEW_PERM)):
        return "approving needs the reviewer role"
    authored = content_authors(recording).get(user.pk)
    if authored:
        return f"four eyes: you {authored}, so another reviewer must approve it"
    if recording.state != StagedRecording.State.STAGED:
        return f"{recording.public_id} is already {recording.state}"
    expired = _expired_bodies(recording)
    if expired:
        return expired
    open_findings = unresolved_findings(recording)
    if open_findings:
        listed = ", ".join(f"{f['rule']} at {f['path']}" for f in open_findings[:5])
        return f"{len(open_findings)} unresolved finding(s) block approval: {listed} (redact or synthesize each)"
    return None


def promotion_blockers(recording: StagedRecording) -> list[str]:
    """What stops this recording from being approved by any reviewer: findings, contract tests."""
    out = []
    expired = _expired_bodies(recording)
    if expired:
        out.append(expired)
    open_findings = unresolved_findings(recording)
    if open_findings:
        out.append(f"{len(open_findings)} unresolved finding(s)")
    try:
        _fixture_for(recording, _latest_base(recording))
    except ReviewRefused as exc:
        out.append(str(exc))
    return out


def _answer(fixture: Mapping[str, Any]) -> tuple[Any, ...]:
    """What a replay sees of a fixture's answer, with the format's defaults filled in: a fixture written without
    `absent` answers exactly as one with `absent: {}` (the seed packages omit it; a promoted recording writes it).
    The body by its digest, whether the fixture holds it inline or by digest (`response.body_digest`): the same
    body either way, and a body whose bytes expired is compared by what it was, never read as an empty one."""
    response = fixture.get("response") or {}
    body = response.get("body_digest") or (
        fixture_body_digest(response["body"]) if response.get("body") is not None else None
    )
    return (response.get("outcome"), body, response.get("absent") or {}, fixture.get("transition"))


def fixture_by_digest(fixture: Mapping[str, Any]) -> dict[str, Any]:
    """The form a promoted fixture is stored in (seed 001): its reviewed body held by digest (`response.body_digest`,
    the sha256 of its canonical JSON, as the engine checks it) instead of inline, and its id derived from that form.
    A response without a body (null) has nothing to retain and stays as it is."""
    response = dict(fixture.get("response") or {})
    if response.get("body") is None:
        return dict(fixture)
    body = response.pop("body")
    out = {k: v for k, v in fixture.items() if k != "id"}
    out["response"] = {"outcome": response.pop("outcome"), "body_digest": fixture_body_digest(body), **response}
    out["id"] = fixture_id_for(out)
    return out


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
    written: list[str] = []
    try:
        return _approve_once(recording, user, revision, note=note, conflict=conflict, written=written)
    except BaseException:
        _remove_blobs(written)  # a body this attempt stored and nothing holds: not left in the store unheld
        raise


def _approve_once(
    recording: StagedRecording,
    user: Any,
    revision: int | None,
    *,
    note: str,
    conflict: str | None,
    written: list[str],
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
        reviewed = _fixture_for(recording, base)
        # The reviewed body goes to the blob store through the storage gate, and the fixture holds its digest: its
        # bytes follow the recording's retention class from `captured_at` (the fixture's own hold, below), while the
        # fixture version and every scenario version pinning it keep their digests whether the bytes are kept or not.
        fixture = fixture_by_digest(reviewed)
        body = (reviewed.get("response") or {}).get("body")
        stored: tuple[str, int, str | None] | None = None
        if (fixture.get("response") or {}).get("body_digest"):
            try:
                stored = fixture_body_put(body, where=f"fixture {fixture['id']} response.body")
            except FixtureBodyRefused as exc:
                raise ReviewRefused(str(exc)) from None
            written.extend([stored[2]] if stored[2] else [])
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
        if stored is not None:
            fixture_body_hold(
                digest=stored[0],
                size=stored[1],
                fixture_id=fixture["id"],
                retention_class=recording.retention_class,
                recorded_at=recording.captured_at,
                expires_at=hold_expiry(recording.retention_class, recording.captured_at),
                fixture_version=version,
                recording=recording,
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
        if recording.no_change_reason and not fixture.get("transition"):
            detail["no_change"] = recording.no_change_reason  # what the approver accepted for the ambiguous answer
        _event(recording, ReviewEvent.Action.APPROVE, user, reason=note, detail=detail)
    log.info("approved %s: fixture %s in %s", recording.public_id, version.fixture_id, scenario.ref)
    return recording
