"""Reviewed connections and the record policy's refusals (seed 000, "Record mode needed its own fail-closed edges").

Writes: proposing, approving (a reviewer other than the proposer, and only a complete policy) and retiring a
connection, each an audit entry; and, at intake, `capture_admit`, which asks `record_policy.admit` and, when it
refuses, keeps the safe request observation and an audit entry before raising. That record is written outside
any transaction of the caller's staging (the caller calls this before it stages anything), so a refused capture
leaves its trace even though nothing of it is staged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.db import transaction
from django.utils import timezone

from n17q_secrets.scanning import mask_json

from . import intake, record_policy
from .model_endpoints import EndpointRefused, ModelEndpoint
from .models import Connection, RequestObservation

REVIEW_PERM = "fixtures_review.review_capture"
_NAMED = ("scenario", "tool", "connection", *record_policy.POLICY_KEYS)
POLICY_FIELDS = (
    "reaches",
    "source_classes",
    "capabilities",
    "account_scopes",
    "capture_result_classes",
    "default_result_class",
)
# A model endpoint's reach (issue 33): what the relay may request and the one credential it may send. A change to
# any of them, like a change to a recording connection's policy, is no longer what a reviewer approved.
ENDPOINT_FIELDS = ("endpoint_scheme", "endpoint_host", "endpoint_port", "endpoint_path_prefix", "credential_name")
REVIEWED_FIELDS = ("kind", *POLICY_FIELDS, *ENDPOINT_FIELDS)


# What only approving, retiring or a change of identity writes; no door sets them.
_LIFECYCLE_FIELDS = (
    "state",
    "proposed_by_id",
    "approved_by_id",
    "approved_at",
    "approved_identity",
    "retired_by_id",
    "retired_at",
)


class ConnectionRefused(ValueError):
    """A connection action the rules do not allow; one sentence."""


class CaptureRefused(intake.CaptureError):
    """A capture the record policy refused: the reason, and the observation that keeps its trace."""

    def __init__(self, message: str, observation: RequestObservation) -> None:
        super().__init__(message)
        self.observation = observation


def _audit(actor: Any, action: str, target: str, detail: dict[str, Any]) -> None:
    from accounts.audit import audit_record

    audit_record(
        actor=actor if getattr(actor, "is_authenticated", False) else None, action=action, target=target, detail=detail
    )


def policy_of(connection: Connection | None) -> record_policy.ConnectionPolicy | None:
    if connection is None:
        return None
    since = connection.retired_at if connection.state == Connection.State.RETIRED else connection.proposed_at
    state = connection.state
    if _approved_as_something_else(connection):
        # What it says now was never approved.
        state, since = "changed since it was approved", None
    return record_policy.ConnectionPolicy(
        name=connection.name,
        state=state,
        reaches=connection.reaches,
        source_classes=tuple(connection.source_classes or ()),
        capabilities=tuple(connection.capabilities or ()),
        account_scopes=tuple(connection.account_scopes or ()),
        capture_result_classes=tuple(connection.capture_result_classes or ()),
        default_result_class=connection.default_result_class,
        since=since.isoformat(timespec="seconds") if since else "",
    )


def _policy_detail(connection: Connection) -> dict[str, Any]:
    if connection.kind == Connection.Kind.MODEL:
        return {name: getattr(connection, name) for name in ("kind", *ENDPOINT_FIELDS)}
    return {name: getattr(connection, name) for name in POLICY_FIELDS}


def model_endpoint_of(connection: Connection) -> ModelEndpoint:
    """What a model connection lets the relay reach (`replays.relay.ModelEndpoint`), unchecked."""
    return ModelEndpoint(
        scheme=connection.endpoint_scheme,
        host=connection.endpoint_host,
        port=connection.endpoint_port or 0,
        path_prefix=connection.endpoint_path_prefix,
        credential=connection.credential_name,
    )


def endpoint_gaps(connection: Connection) -> list[str]:
    """What keeps a model connection from being approved (or used): its endpoint or credential reference refused."""
    if connection.kind != Connection.Kind.MODEL:
        return []
    try:
        model_endpoint_of(connection).check()
    except EndpointRefused as exc:
        return [str(exc)]
    return []


def approved_model_connections() -> list[Connection]:
    """The model connections an operator may choose for a live relay: approved, and whose endpoint still checks."""
    held = Connection.objects.filter(kind=Connection.Kind.MODEL, state=Connection.State.APPROVED).order_by("name")
    return [c for c in held if not endpoint_gaps(c) and not _approved_as_something_else(c)]


def model_connection_resolve(name: str) -> ModelEndpoint:
    """The endpoint of the approved model connection `name`: ConnectionRefused, in one line, for any other name
    (unregistered, a recording connection, proposed, retired, or an endpoint that no longer checks)."""
    connection = Connection.objects.filter(name=name, kind=Connection.Kind.MODEL).first()
    if connection is None:
        # The name is not repeated: a value typed where a name belongs may be a credential.
        raise ConnectionRefused("no model connection is registered under that name (an admin registers one)")
    if connection.state != Connection.State.APPROVED:
        raise ConnectionRefused(
            f"model connection {name} is {connection.state}, not approved: the relay may not use it"
        )
    gaps = endpoint_gaps(connection)
    if gaps:
        raise ConnectionRefused(f"model connection {name}: {gaps[0]}")
    if _approved_as_something_else(connection):
        raise ConnectionRefused(
            f"model connection {name} was changed since it was approved: a reviewer approves it again"
        )
    return model_endpoint_of(connection)


def connection_propose(*, name: str, user: Any, description: str = "", **policy: Any) -> Connection:
    """Register a connection, proposed: record mode (or, kind `model`, the relay) may not use it until a reviewer
    approves it. A model endpoint whose reach or credential reference is refused is not even proposed."""
    unknown = sorted(set(policy) - set(REVIEWED_FIELDS))
    if unknown:
        raise ConnectionRefused(f"{unknown[0]}: not a field of a connection's policy")
    if policy.get("kind") == Connection.Kind.MODEL:
        gaps = endpoint_gaps(Connection(name=name, **policy))
        if gaps:
            raise ConnectionRefused(f"connection {name}: {gaps[0]}")
    with transaction.atomic():
        if Connection.objects.filter(name=name).exists():
            raise ConnectionRefused(f"connection {name} is registered already")
        connection = Connection.objects.create(name=name, description=description, proposed_by=_person(user), **policy)
        _audit(user, "connection.propose", name, _policy_detail(connection))
    return connection


def connection_change(*, connection: Connection, user: Any, created: bool = False) -> str:
    """Save a connection a door has filled in (the admin's form, a command), and audit it: the one way a connection
    changes. A new one is proposed by `user`. A change to what an approved connection is (`IDENTITY_FIELDS`: its
    name, its reach, its policy) is no longer what a reviewer approved: it goes back to proposed, and whoever changed
    it is its proposer (so another reviewer approves it). What changed is read from the stored row, never taken
    from the door's word. Returns the state it is in."""
    with transaction.atomic():
        stored = None if created else Connection.objects.select_for_update().filter(pk=connection.pk).first()
        changed = (
            sorted(f for f in Connection.IDENTITY_FIELDS if getattr(stored, f) != getattr(connection, f))
            if stored is not None
            else []
        )
        if created or stored is None:
            connection.state = Connection.State.PROPOSED
            connection.proposed_by = _person(user)
        elif stored.state != Connection.State.RETIRED and (changed or _approved_as_something_else(stored)):
            connection.state = Connection.State.PROPOSED
            connection.approved_by = None
            connection.approved_at = None
            connection.approved_identity = ""
            connection.proposed_by = _person(user)
        else:
            # The lifecycle is this module's, not the door's: a state the door holds (stale or set) is not saved.
            for field in _LIFECYCLE_FIELDS:
                setattr(connection, field, getattr(stored, field))
        connection.save()
        action = "connection.propose" if created or stored is None else "connection.change"
        detail = {**_policy_detail(connection), "name": connection.name, "state": connection.state}
        if stored is not None:
            # A rename is audited under the new name; the entry says what it was and what changed.
            detail.update(changed=changed, was={f: getattr(stored, f) for f in changed}, state_before=stored.state)
        _audit(user, action, connection.name, detail)
    return connection.state


def _approved_as_something_else(stored: Connection) -> bool:
    """Approved, but not as it stands: written past this service (a queryset update, a shell)."""
    return stored.state == Connection.State.APPROVED and stored.approved_identity != stored.identity_digest()


def connection_approve(*, connection: Connection, user: Any) -> Connection:
    """Approve a proposed connection: the reviewer role, another person than its proposer, a complete policy."""
    refusal = approval_refusal(connection, user)
    if refusal is not None:
        _audit(user, "connection.approve_refused", connection.name, {"reason": refusal})
        raise ConnectionRefused(refusal)
    with transaction.atomic():
        # The approval covers what the reviewer read: if the row says something else now (changed meanwhile), it is
        # not claimed. Its identity digest is kept, and admission checks the row still has it.
        seen = connection.identity_digest()
        stored = Connection.objects.select_for_update().filter(pk=connection.pk).first()
        if stored is None or stored.identity_digest() != seen:
            raise ConnectionRefused(f"connection {connection.name} was changed meanwhile: reload it")
        claimed = Connection.objects.filter(pk=connection.pk, state=Connection.State.PROPOSED).update(
            state=Connection.State.APPROVED, approved_by=user, approved_at=timezone.now(), approved_identity=seen
        )
        if claimed != 1:
            raise ConnectionRefused(f"connection {connection.name} was approved or retired meanwhile: reload it")
        connection.refresh_from_db()
        _audit(user, "connection.approve", connection.name, _policy_detail(connection))
    return connection


def approval_refusal(connection: Connection, user: Any) -> str | None:
    if not (getattr(user, "is_authenticated", False) and user.has_perm(REVIEW_PERM)):
        return "approving a connection needs the reviewer role"
    if connection.state != Connection.State.PROPOSED:
        return f"connection {connection.name} is {connection.state}, not proposed"
    if connection.proposed_by_id is not None and connection.proposed_by_id == user.pk:
        return f"four eyes: you proposed connection {connection.name}, so another reviewer must approve it"
    if connection.kind == Connection.Kind.MODEL:
        gaps = endpoint_gaps(connection)
        return f"connection {connection.name}: {gaps[0]}" if gaps else None
    gaps = record_policy.policy_gaps(policy_of(connection))  # type: ignore[arg-type]
    if gaps:
        return f"connection {connection.name}: its capture policy is incomplete ({'; '.join(gaps)})"
    return None


def connection_retire(*, connection: Connection, user: Any) -> Connection:
    """Retire a connection: record mode may no longer use it. Recordings staged through it stay as they are."""
    if not (getattr(user, "is_authenticated", False) and user.has_perm(REVIEW_PERM)):
        raise ConnectionRefused("retiring a connection needs the reviewer role")
    with transaction.atomic():
        changed = (
            Connection.objects.filter(pk=connection.pk)
            .exclude(state=Connection.State.RETIRED)
            .update(state=Connection.State.RETIRED, retired_by=user, retired_at=timezone.now())
        )
        if changed != 1:
            raise ConnectionRefused(f"connection {connection.name} is retired already")
        connection.refresh_from_db()
        _audit(user, "connection.retire", connection.name, {})
    return connection


def _person(user: Any) -> Any:
    return user if getattr(user, "is_authenticated", False) else None


# --- intake ------------------------------------------------------------------------------------------------------


def capture_admit(
    capture: Mapping[str, Any], *, door: str, actor: Any = None, token: Any = None
) -> record_policy.Admitted:
    """The record policy's verdict on a parsed capture. Refused: the safe request observation and an audit entry
    `capture.refused` are kept, then CaptureRefused (a CaptureError: one line, HTTP 400) is raised."""
    # The names a refusal repeats (in its reason, the observation, the audit log) are scanned first: a token pasted
    # into `account_scope` must not reach the log in the clear because the capture was refused before intake masked it.
    capture = {key: mask_json(value, key, []) if key in _NAMED else value for key, value in capture.items()}
    # A model endpoint (issue 33) is no connection record mode captures through: it is refused as unregistered.
    named = str(capture.get("connection") or "")
    connection = Connection.objects.filter(name=named, kind=Connection.Kind.RECORDING).first()
    try:
        return record_policy.admit(capture, policy_of(connection))
    except record_policy.RecordRefused as exc:
        reason = str(exc)
    observation = _observe(capture, RequestObservation.Kind.REFUSED, reason, door=door, actor=actor, token=token)
    raise CaptureRefused(f"refused by the record policy: {reason} (kept as {observation.public_id})", observation)


def capture_failure_record(
    capture: Mapping[str, Any], *, door: str, actor: Any = None, token: Any = None
) -> RequestObservation:
    """A capture that failed after a live read (`capture_failure`): admitted by the policy like any capture, then
    only its safe request observation is kept, with an audit entry `capture.failed`. No recording, no fixture."""
    capture_admit(capture, door=door, actor=actor, token=token)
    reason = f"the read happened but its response could not be kept: {capture['capture_failure']}; no fixture resulted"
    return _observe(capture, RequestObservation.Kind.CAPTURE_FAILED, reason, door=door, actor=actor, token=token)


def _observe(
    capture: Mapping[str, Any], kind: str, reason: str, *, door: str, actor: Any, token: Any
) -> RequestObservation:
    safe = intake.observe_request(dict(capture))
    observation = RequestObservation.objects.create(
        kind=kind,
        reason=reason,
        door=door[:20],
        scenario_name=str(capture.get("scenario") or "")[:100],
        tool=safe["tool"][:200],
        connection=str(capture.get("connection") or "")[:200],
        effect_class=str(capture.get("effect_class") or "")[:20],
        method=safe["method"],
        request_digest=safe["request_digest"],
        actor=_person(actor),
        token_prefix=str(getattr(token, "prefix", "") or ""),
    )
    action = "capture.refused" if kind == RequestObservation.Kind.REFUSED else "capture.failed"
    _audit(
        actor,
        action,
        observation.public_id,
        {
            "reason": reason,
            "door": door,
            "connection": observation.connection,
            "tool": observation.tool,
            "request_digest": observation.request_digest,
            "token": observation.token_prefix or None,
        },
    )
    return observation
