"""An event's facts in the product's own words, with what they need from related events.

Shared by the detail panel and every other place that shows an event to a person.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Subquery
from django.db.models.fields.json import KT

from .models import Event, Run


@dataclass
class Item:
    """One event as a pane shows it."""

    event: Event
    focused: bool = False
    related: dict[str, Any] = field(default_factory=dict)

    @property
    def body(self) -> dict[str, Any]:
        return self.event.body

    @property
    def raw(self) -> str:
        return json.dumps(self.event.body, indent=2, ensure_ascii=False, sort_keys=True)


def items_annotate(run: Run, items: list[Item]) -> None:
    """Attach what each item needs from other events (a receipt's completion behind an admission, say).

    Two queries for all items together, bounded by the number of items.
    """
    wanted: set[str] = set()
    for item in items:
        body = item.body
        for name in ("observation_id", "source", "call_id", "intent_id", "admission_id", "failure", "subject"):
            if isinstance(body.get(name), str):
                wanted.add(body[name])
        for name in ("supports", "admission_ids", "input_ids"):
            if isinstance(body.get(name), list):
                wanted.update(x for x in body[name] if isinstance(x, str))
    if not wanted:
        return
    wanted_ids = sorted(wanted)[:2000]
    by_id = {e.event_id: e for e in Event.objects.filter(run=run, event_id__in=wanted_ids).order_by()}
    # Admissions point at observations, which point at receipts: the receipts come in a second query
    # whose inner select always runs, so the page's query count does not depend on what the window
    # holds. (One query with an OR of the two made SQLite give up the (run, event_id) index.)
    behind_observations = (
        Event.objects.filter(run=run, kind="evidence.observed", event_id__in=wanted_ids)
        .order_by()
        .values(source=KT("body__source"))
    )
    by_id.update(
        {e.event_id: e for e in Event.objects.filter(run=run, event_id__in=Subquery(behind_observations)).order_by()}
    )
    for item in items:
        item.related = _related(item.body, by_id)


def _receipt_summary(receipt: Event | None) -> dict[str, Any] | None:
    if receipt is None or receipt.kind != "command.receipt":
        return None
    body = receipt.body
    results = body.get("results") or {}
    return {
        "id": receipt.event_id,
        "completion": body.get("completion"),
        "workspace": body.get("workspace_id"),
        "tree": body.get("post_tree") or body.get("pre_tree"),
        "failed": results.get("failed"),
        "passed": results.get("passed"),
        "suites": body.get("suites"),
    }


def _related(body: dict[str, Any], by_id: dict[str, Event]) -> dict[str, Any]:
    kind = body.get("kind")
    related: dict[str, Any] = {}
    if kind == "evidence.admitted":
        observation = by_id.get(body.get("observation_id") or "")
        source = by_id.get(observation.body.get("source") or "") if observation else None
        related["receipt"] = _receipt_summary(source)
        related["source_kind"] = source.kind if source else None
        related["source_id"] = source.event_id if source else None
    elif kind == "evidence.observed":
        related["receipt"] = _receipt_summary(by_id.get(body.get("source") or ""))
    elif kind == "account.claim":
        related["supports"] = [
            {"id": ref, "kind": by_id[ref].kind if ref in by_id else None, "receipt": _receipt_summary(by_id.get(ref))}
            for ref in body.get("supports") or []
        ]
    elif kind == "effect.intent":
        related["admissions"] = [
            {
                "id": ref,
                "workspace": by_id[ref].body.get("workspace_id") if ref in by_id else None,
                "purpose": by_id[ref].body.get("purpose") if ref in by_id else None,
            }
            for ref in body.get("admission_ids") or []
        ]
    elif kind == "policy.decision":
        related["inputs"] = [
            {"id": ref, "purpose": by_id[ref].body.get("purpose") if ref in by_id else None}
            for ref in body.get("input_ids") or []
        ]
    return related


# The facts each pane item shows: (label, field) pairs read straight from the event, in the product's
# own words; the few facts that combine fields or come from related events are added in `describe`.
_FACTS: dict[str, tuple[tuple[str, str], ...]] = {
    "attempt.started": (("reason", "reason"), ("parent attempt", "parent_attempt_id")),
    "attempt.ended": (("attempt", "attempt"), ("outcome", "outcome")),
    "run.state": (("state", "state"), ("reason", "reason")),
    "checkpoint": (("world revision", "world_revision"),),
    "workspace.created": (("workspace", "workspace_id"),),
    "workspace.changed": (("workspace", "workspace_id"), ("overlay revision", "overlay_revision")),
    "workspace.lifecycle": (("workspace", "workspace_id"), ("state", "state")),
    "artifact.created": (("artifact", "artifact_id"), ("workspace", "workspace_id")),
    "command.receipt": (("command", "command"), ("workspace", "workspace_id")),
    "evidence.observed": (("source", "source"), ("workspace", "workspace_id"), ("scope", "scope")),
    "evidence.admitted": (
        ("purpose", "purpose"),
        ("decision", "decision"),
        ("for artifact", "artifact_id"),
        ("workspace", "workspace_id"),
    ),
    "evidence.superseded": (("admission", "admission_id"), ("cause", "cause")),
    "waiver.granted": (("failure", "failure"), ("suite", "suite"), ("by", "actor_role"), ("rationale", "rationale")),
    "policy.decision": (("outcome", "outcome"), ("subject", "subject")),
    "approval.recorded": (("decision", "decision"), ("subject", "subject"), ("origin", "origin")),
    "human.input": (("by", "actor_role"), ("action", "action"), ("note", "note")),
    "effect.intent": (("artifact", "artifact_id"),),
    "effect.execution": (
        ("intent", "intent_id"),
        ("attempt", "attempt_no"),
        ("stage", "stage"),
        ("outcome", "outcome"),
        ("connection", "connection"),
    ),
    "world.transition": (("resource", "resource"),),
    "effect.outbox": (
        ("intent", "intent_id"),
        ("destination", "destination"),
        ("tool", "tool"),
        ("idempotency key", "idempotency_key"),
    ),
    "schedule.step": (
        ("race", "race"),
        ("step", "step"),
        ("delivery", "delivery"),
        ("effect identity", "effect_identity"),
        ("barrier", "barrier"),
        ("reason", "reason"),
    ),
    "world.observation": (("resource", "resource"), ("world revision", "world_revision")),
    "account.claim": (("claim", "claim_kind"), ("text", "text")),
    "model.proposal": (("proposal", "proposal"), ("accepted", "accepted"), ("context", "context_digest")),
    "tool.call": (
        ("tool", "tool"),
        ("contract revision", "contract_revision"),
        ("request", "request"),
        ("request digest", "request_digest"),
        ("proposal", "proposal_id"),
        ("workspace", "workspace_id"),
    ),
    "tool.result": (("call", "call_id"), ("origin", "origin"), ("outcome", "outcome")),
    "clock.advanced": (("from", "from"), ("to", "to"), ("cause", "cause")),
    "fixture.missing": (
        ("scenario", "scenario"),
        ("tool", "tool"),
        ("contract revision", "contract_revision"),
        ("request digest", "request_digest"),
        ("world revision", "world_revision"),
        ("checkpoint", "checkpoint_id"),
        ("reason", "reason"),
    ),
    "fixture.ambiguous": (
        ("scenario", "scenario"),
        ("tool", "tool"),
        ("reason", "reason"),
        ("candidates", "candidates"),
    ),
    "sandbox.violation": (("attempted", "attempted"), ("target", "target"), ("stopped", "stopped")),
    "replay.scope": (
        ("scenario", "scenario"),
        ("scope", "scope"),
        ("recorded between", "recorded_between"),
        ("synthetic fixtures", "synthetic"),
        ("uncovered", "uncovered"),
        ("isolation", "isolation"),
    ),
    # Seed 003: what an agent in a replay was told (its blob holds the task document and the prompt's words).
    "agent.context": (("format", "format"), ("context", "context_digest"), ("document and prompt", "blob")),
}
# Digests shown by field (the template shortens every digest behind a copy button).
_TREES = {"tree_digest": "tree", "post_tree": "tree", "evidence_set_digest": "evidence set"}


def describe(body: dict[str, Any], related: dict[str, Any]) -> list[tuple[str, str]]:
    """The facts a pane shows for one event, as (label, value) pairs, in the product's own words."""
    k = body.get("kind")
    out: list[tuple[str, str]] = []

    def add(label: str, value: Any) -> None:
        if value not in (None, "", [], {}):
            out.append((label, value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)))

    if k == "attempt.started":
        add("attempt", f"{body.get('attempt')} (#{body.get('number')})")
    for label, name in _FACTS.get(str(k), ()):
        add(label, body.get(name))
    for name, label in _TREES.items():
        if name in body:
            add(label, body.get(name))

    if k == "checkpoint":
        add("workspaces", ", ".join(f"{w} {t}" for w, t in (body.get("workspaces") or {}).items()))
        add("fixtures", _checkpoint_fixtures(body.get("fixtures")))
    elif k == "budget.charged":
        add(str(body.get("resource")), body.get("amount"))
    elif k == "workspace.created":
        derived = body.get("derived_from")
        if derived:
            equal = "content equal" if derived.get("content_equal") else "content differs"
            add("derived from", f"{derived.get('workspace_id')} by {derived.get('relation')} ({equal})")
        add("base", body.get("base_digest"))
        add("initial overlay", body.get("overlay_digest"))
        add("inherited edits", ", ".join(body.get("overlay_files") or []))
    elif k == "workspace.lifecycle":
        add("cleanup receipt", body.get("cleanup_receipt_id") or "none")
    elif k == "artifact.created":
        add("files", ", ".join(body.get("files") or []))
    elif k == "command.receipt":
        results = body.get("results") or {}
        add("completion", body.get("completion"))
        add(
            "results",
            f"{results.get('passed', '?')} passed, {results.get('failed', '?')} failed, "
            f"{results.get('skipped', 0)} skipped",
        )
        add("exit code", "none" if body.get("exit_code") is None else str(body.get("exit_code")))
    elif k == "evidence.admitted":
        receipt = related.get("receipt")
        if receipt:
            add(
                "receipt",
                f"{receipt['id']} in {receipt['workspace']}: {receipt['completion']}, {receipt['failed']} failed",
            )
        compat = body.get("compatibility")
        add("compatibility", f"{compat.get('rule')}: {compat.get('rationale')}" if compat else "none recorded")
    elif k == "policy.decision":
        add("required", ", ".join(body.get("required") or []) or "nothing")
        add("inputs", ", ".join(f"{i['id']} ({i['purpose']})" for i in related.get("inputs", [])) or "none")
        add("policy", body.get("policy_revision"))
    elif k == "approval.recorded":
        add("from run", f"{body.get('run')} ({body.get('environment')})")
    elif k == "effect.intent":
        add("effect", f"{body.get('effect_class')} to {body.get('destination')}")
        admissions = related.get("admissions", [])
        add("admissions", ", ".join(f"{a['id']} ({a['purpose']}, {a['workspace']})" for a in admissions) or "none")
        add("approval", body.get("approval_id") or "none")
        add("namespace", body.get("namespace"))
        add("idempotency key", body.get("idempotency_key"))
        add("historical intent", body.get("historical_intent"))
    elif k == "world.transition":
        before = body.get("revision_before")
        add("revision", f"{'new' if before is None else before} → {body.get('revision_after')}")
        add("change", body.get("change"))
        add("cause", body.get("cause"))
    elif k == "account.claim":
        if body.get("origin") == "extracted":
            span: list[Any] = body["span"] if isinstance(body.get("span"), list) and body["span"] else ["?"]
            add(
                "origin",
                f"extracted from the final answer {body.get('extracted_from')} (characters {span[0]} to {span[-1]}) by "
                f"rule “{body.get('rule')}”; the agent did not state it as a claim",
            )
            if body.get("polarity"):
                add("polarity", body.get("polarity"))
        add(
            "supports",
            ", ".join(
                s["id"] + (f" ({s['receipt']['completion']}, {s['receipt']['failed']} failed)" if s["receipt"] else "")
                for s in related.get("supports", [])
            )
            or "nothing",
        )
    elif k == "tool.result":
        add("fixture", body.get("fixture"))
        add("recording", recording_text(body.get("freshness")))
        add("negative scope", negative_text(body.get("negative")))
    return out


def _checkpoint_fixtures(held: Any) -> str | None:
    """The fixture versions a checkpoint names (issue 39, seed 001: "Run checkpoints named exact fixture versions"):
    the scenario version and package digest, and each fixture that had answered by then with its digest."""
    if not isinstance(held, dict):
        return None
    named = held.get("scenario")
    scenario: dict[str, Any] = named if isinstance(named, dict) else {}
    answered = [a for a in held.get("answered") or [] if isinstance(a, dict)]
    head = f"scenario {scenario.get('name')}@{scenario.get('version')} (package {held.get('package_digest')})"
    count = held.get("count")
    listed = ", ".join(f"{a.get('id')} {a.get('digest')}" for a in answered[:FIXTURES_SHOWN])
    more = f" and {len(answered) - FIXTURES_SHOWN} more" if len(answered) > FIXTURES_SHOWN else ""
    of = f" of {count}" if isinstance(count, int) else ""
    if not answered:
        return f"{head}: none of its{of} fixtures answered a call yet"
    return f"{head}: {len(answered)}{of} fixtures answered so far: {listed}{more}"


FIXTURES_SHOWN = 20


def age_text(seconds: float) -> str:
    """An age for people: the largest two units (3 d 4 h, 12 min 5 s, 0.4 s)."""
    whole = int(abs(seconds))
    if whole < 60:
        return f"{abs(seconds):g} s"
    parts = []
    for unit, size in (("d", 86_400), ("h", 3_600), ("min", 60), ("s", 1)):
        if whole >= size:
            parts.append(f"{whole // size} {unit}")
            whole %= size
    return " ".join(parts[:2])


def recording_text(freshness: Any) -> str | None:
    """A fixture result's recording as the detail panel says it (seed 000: "The interface showed recording age and
    source contract"): its age at the logical time served, the source revision and contract, and the freshness
    judgement, stale or not, in the rule's own terms."""
    if not isinstance(freshness, dict):
        return None
    age = freshness.get("age_s")
    if isinstance(age, int | float):
        when = f"{age_text(age)} {'before' if age >= 0 else 'after'} logical {freshness.get('evaluated_at')}"
    else:
        when = "age unknown"
    source = freshness.get("source_revision") or "not recorded"
    state = str(freshness.get("state", "not_evaluated")).replace("_", " ")
    limit = freshness.get("max_age_s")
    judged = f"{state} (max age {age_text(limit)})" if isinstance(limit, int | float) else state
    return (
        f"recorded {freshness.get('recorded_at')}, {when}; source revision {source}, contract revision "
        f"{freshness.get('contract_revision')}; {judged}"
    )


def negative_text(negative: Any) -> str | None:
    """The scope of a negative observation (seed 000 "Unknown fixture data stayed unknown"), or that it has none."""
    if not isinstance(negative, dict):
        return None
    outcome = negative.get("outcome")
    if not negative.get("declared"):
        return f"{outcome}: the fixture does not name its scope (not recorded)"
    if outcome == "empty":
        return f"empty for query {negative.get('query')!r} in corpus revision {negative.get('corpus_revision')}"
    held = negative.get("resource_revision")
    resource, window = negative.get("resource"), negative.get("consistency_window_s")
    state = "absent" if held is None else f"at revision {held}"
    return (
        f"not found: {resource} within a consistency window of {window} s; "
        f"world revision {negative.get('world_revision')}, {resource} {state}"
    )
