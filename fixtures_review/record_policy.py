"""The record policy: which captures intake may stage, judged against reviewed connections (seed 000, "Record mode
needed its own fail-closed edges").

Plain functions over plain data, no Django, so the rules read in one place and test without a database; the
services (`fixtures_review.connections`) load the connection and record what was refused. A capture
(`n17q.capture/1`) names its `connection` (DESIGN §7) and may name, additively, its `source_class`,
`account_scope` and `result_class`; a key it leaves out is taken from the connection only when the connection
allows exactly one value for it (a result class: the connection's declared default), else it is ambiguous.

Refused, each with one sentence saying why (checked in this order, the first that applies is the reason):
an unknown connection; one that is proposed or retired rather than approved; one whose policy is incomplete (no
source class, capability, account scope or result class declared); a source class the connection does not
record, or none named where it records several; an account scope that is ambiguous (none named where several
are declared, a list of several, a wildcard) or not the connection's; a mutation recorded through a live
connection (record mode never captures a consequential mutation live); an effect class beyond the connection's
capabilities; a result class the capture policy excludes. And, on a live connection, a capture whose request carries
a replay-namespaced idempotency key or namespace (seed 001: a replay key never reaches a live connection; the check
is `n17q_engine.live_boundary`, docs/live-boundary.md), refused right after the connection is known to be approved.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from n17q_engine.live_boundary import ReplayKeyRefused, refuse_replay_keys

# The result classes a capture policy speaks of, least to most sensitive. `personal` and `confidential` are the
# sensitive ones: a connection keeps them only when its policy lists them.
RESULT_CLASSES = ("public", "internal", "confidential", "personal")
CAPABILITIES = ("read", "mutation")
POLICY_KEYS = ("source_class", "account_scope", "result_class")
_WILDCARDS = ("*", "?", "%")


@dataclass(frozen=True)
class ConnectionPolicy:
    """What the registry holds of one connection, as plain data."""

    name: str
    state: str  # proposed | approved | retired
    reaches: str  # live | sandbox
    source_classes: tuple[str, ...]
    capabilities: tuple[str, ...]
    account_scopes: tuple[str, ...]
    capture_result_classes: tuple[str, ...]
    default_result_class: str
    since: str = ""  # when it reached its state (for the sentence)


@dataclass(frozen=True)
class Admitted:
    """A capture the policy admits, with the values it resolved (stored on the staged recording)."""

    connection: str
    source_class: str
    account_scope: str
    result_class: str


class RecordRefused(ValueError):
    """A capture the record policy refuses; the message is the one-line reason."""


def policy_gaps(policy: ConnectionPolicy) -> list[str]:
    """What a connection's policy leaves undeclared or inconsistent; empty when it can be approved."""
    gaps = []
    if not policy.source_classes:
        gaps.append("no source class")
    if not policy.capabilities:
        gaps.append("no capability")
    unknown = sorted(set(policy.capabilities) - set(CAPABILITIES))
    if unknown:
        gaps.append(f"an unknown capability {unknown[0]!r} (read or mutation)")
    if not policy.account_scopes:
        gaps.append("no account scope")
    ambiguous = [s for s in policy.account_scopes if _is_ambiguous_scope(s)]
    if ambiguous:
        gaps.append(f"an account scope that is a pattern, not one account ({ambiguous[0]!r})")
    if not policy.capture_result_classes:
        gaps.append("no result class in its capture policy")
    unknown = sorted(set(policy.capture_result_classes) - set(RESULT_CLASSES))
    if unknown:
        gaps.append(f"an unknown result class {unknown[0]!r} ({', '.join(RESULT_CLASSES)})")
    if policy.default_result_class and policy.default_result_class not in RESULT_CLASSES:
        gaps.append(f"an unknown default result class {policy.default_result_class!r}")
    return gaps


def _is_ambiguous_scope(scope: str) -> bool:
    return not scope.strip() or any(w in scope for w in _WILDCARDS)


def _one(value: Any, declared: Sequence[str], what: str, connection: str) -> str:
    """The value a capture names for `what`, or the connection's only one; RecordRefused when ambiguous."""
    if value is None:
        if len(declared) == 1:
            return declared[0]
        raise RecordRefused(
            f"{what}: the capture names none and connection {connection} records {len(declared)} "
            f"({', '.join(declared)}): ambiguous, say which"
        )
    return str(value)


def admit(capture: Mapping[str, Any], policy: ConnectionPolicy | None) -> Admitted:
    """The policy's verdict on a parsed capture: Admitted, or RecordRefused with the reason."""
    name = str(capture.get("connection") or "")
    if policy is None:
        raise RecordRefused(
            f"connection {name}: not a reviewed connection (register it and have a reviewer approve it before "
            "recording through it)"
        )
    if policy.state != "approved":
        since = f" since {policy.since}" if policy.since else ""
        raise RecordRefused(f"connection {name}: {policy.state}{since}, not approved: record mode may not use it")
    gaps = policy_gaps(policy)
    if gaps:
        raise RecordRefused(f"connection {name}: its capture policy is incomplete ({'; '.join(gaps)})")
    if policy.reaches == "live":
        try:
            refuse_replay_keys(
                {
                    "request": capture.get("request"),
                    **{k: capture[k] for k in ("idempotency_key", "namespace") if k in capture},
                },
                connection=name,
                where="capture",
            )
        except ReplayKeyRefused as exc:
            raise RecordRefused(str(exc)) from None
    source_class = _one(capture.get("source_class"), policy.source_classes, "source_class", name)
    if source_class not in policy.source_classes:
        raise RecordRefused(
            f"source_class: {source_class!r} is not a source class approved for connection {name} "
            f"({', '.join(policy.source_classes)})"
        )
    scope = capture.get("account_scope")
    if isinstance(scope, list):
        if len(scope) != 1:
            raise RecordRefused(
                f"account_scope: {len(scope)} accounts named ({', '.join(map(str, scope)) or 'none'}): ambiguous, a "
                "capture is recorded under exactly one account"
            )
        scope = scope[0]
    if isinstance(scope, str) and _is_ambiguous_scope(scope):
        raise RecordRefused(f"account_scope: {scope!r} is a pattern, not one account: ambiguous")
    account_scope = _one(scope, policy.account_scopes, "account_scope", name)
    if account_scope not in policy.account_scopes:
        raise RecordRefused(
            f"account_scope: {account_scope!r} is not an account approved for connection {name} "
            f"({', '.join(policy.account_scopes)})"
        )
    effect = capture.get("effect_class")
    if effect == "mutation" and policy.reaches == "live":
        raise RecordRefused(
            f"effect_class: a mutation recorded live through {name}: record mode never captures a consequential "
            "mutation from the live world (record it on a sandbox connection, or author the fixture with its world "
            "transition)"
        )
    if effect not in policy.capabilities:
        raise RecordRefused(
            f"effect_class: connection {name} may record {', '.join(policy.capabilities)} only, not a {effect}"
        )
    result_class = capture.get("result_class")
    if result_class is None:
        if not policy.default_result_class:
            raise RecordRefused(
                f"result_class: the capture names none and connection {name} declares no default result class"
            )
        result_class = policy.default_result_class
    if result_class not in policy.capture_result_classes:
        raise RecordRefused(
            f"result_class: {result_class} results are excluded by the capture policy of connection {name} (it keeps "
            f"{', '.join(policy.capture_result_classes)})"
        )
    return Admitted(connection=name, source_class=source_class, account_scope=account_scope, result_class=result_class)
