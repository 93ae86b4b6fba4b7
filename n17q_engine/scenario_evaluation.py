"""The scenario's deterministic end-state evaluator, and what a narrow scope cannot judge.

Seed 003, "The scenario definition grew richer": a scenario version may declare, beside its world, the instructions
that apply, the paths the agent may change (`file_scope`), the effects it may make (`allowed_effects`) and the ends it
may stop at (`acceptable_stop_states`). A replay carries that declaration in its scope note (`replay.scope` field
`declared`), so the judgement is a function of the replay's own events, whoever reads them:

- **file scope**: every file an artifact of the run carries (`artifact.created.files`: the changes the artifact
  ships, the only per-file record of a tree the event log holds) matches one of the declared path globs;
- **allowed effects**: every `effect.intent` names a destination (and effect class) the scenario allows;
- **stop state**: the run's last `run.state` is one of the acceptable ones. "A trustworthy system must distinguish
  unfinished from incorrectly finished" (seed 003, "The fixed run was allowed to stop"): the judgement says which
  of the two a run's end was, and a scenario may accept an honest stop (validation incomplete) while refusing a
  completion.

Each judgement is `passed`, `failed` or `not_evaluated`, with the reason in one sentence and the events it rests on.
A check the scenario does not declare, or that the run holds nothing for, is `not_evaluated`, never `passed`.

Seed 000, "Fixture coverage became consequence-aware": "A narrow replay could still be useful and could not make
claims about missing earlier policy, later world state, or final account." `scope_limits` says, per declared scope,
which of those dimensions a replay cannot support, with the lineage codes and end-state checks each one covers; the
lineage answer lists those codes under `unevaluated` (`scope_unevaluated`, the same mechanism as a run without
workspaces) and this evaluator marks its own checks `not_evaluated` with the same reason.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .path_globs import path_matches

FORMAT = "n17q.scenario-evaluation/1"
CHECKS = ("file_scope", "allowed_effects", "stop_state")
CHECK_TITLES = {
    "file_scope": "files changed within the scenario's file scope",
    "allowed_effects": "effects within the scenario's allowed effects",
    "stop_state": "the run ended in an acceptable stop state",
}
# The kinds the evaluator reads: a caller holding a run's events in a database asks for these alone.
EVALUATED_KINDS = ("replay.scope", "artifact.created", "effect.intent", "run.state")
# Run states that end a run without finishing its task (unfinished), as against `completed` (finished) and
# `failed` (the harness or the world broke).
UNFINISHED_STATES = ("paused", "incomplete_test_world", "stopped", "interrupted", "running")
EVENTS_CITED = 20  # events named per judgement; the rest are counted


# --- what a narrow scope cannot support ----------------------------------------------------------------------------


@dataclass(frozen=True)
class ScopeLimit:
    """One dimension a replay of this scope cannot make claims about (seed 000)."""

    dimension: str  # "earlier policy" | "later world state" | "final account"
    codes: tuple[str, ...]  # the lineage checks that read it
    checks: tuple[str, ...]  # the end-state checks that read it
    reason: str
    partial: bool  # the checks still judge the part the replay did reconstruct


_POLICY_CODES = ("LIN003", "LIN004", "LIN005", "LIN013")
_WORLD_CODES = ("LIN007", "LIN012")
_ACCOUNT_CODES = ("LIN008", "LIN015")


def scope_limits(scope: str | None, from_checkpoint: str | None = None) -> tuple[ScopeLimit, ...]:
    """What a replay of `scope` cannot support. `scenario` (and a reconstruction, which re-projects a whole run)
    supports all three; a replay that branched from a checkpoint is a segment whatever its scenario declares."""
    if scope == "adapter":
        why = "an adapter replay tests parsing one recorded exchange"
        return (
            ScopeLimit(
                "earlier policy",
                _POLICY_CODES,
                (),
                f"{why}: it decides no policy and holds none from before the exchange",
                False,
            ),
            ScopeLimit(
                "later world state",
                _WORLD_CODES,
                ("allowed_effects",),
                f"{why}: it simulates no world state after the exchange, so no effect it made or missed is judged",
                False,
            ),
            ScopeLimit(
                "final account",
                _ACCOUNT_CODES,
                ("file_scope", "stop_state"),
                f"{why}: it reaches no final account, no final tree and no final status",
                False,
            ),
        )
    if scope == "segment" or (scope == "scenario" and from_checkpoint not in (None, "", "start")):
        where = f"checkpoint {from_checkpoint}" if from_checkpoint not in (None, "", "start") else "a checkpoint"
        why = f"a segment replay starts at {where}"
        return (
            ScopeLimit(
                "earlier policy",
                _POLICY_CODES,
                (),
                f"{why}: the policy decisions and approvals before it are carried over as recorded, never decided "
                "again, so only those after it are judged",
                True,
            ),
            ScopeLimit(
                "final account",
                _ACCOUNT_CODES,
                (),
                f"{why}: its final account may rest on history before it that the segment did not reproduce, so "
                "the account is judged only against what the segment re-ran",
                True,
            ),
        )
    return ()


def scope_unevaluated(
    entries: Sequence[Mapping[str, Any]], scope_note: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """The lineage answer's `unevaluated` (DESIGN §10) with what the run's scope cannot support added: each code a
    limit covers gets the limit's reason and `scope` (the dimension); a partial limit (a segment) names the scope
    note among `events`, as a check judged on the rest of its inputs does. In code order."""
    if not scope_note:
        return [dict(e) for e in entries]
    limits = scope_limits(_str(scope_note.get("scope")), _from_checkpoint(scope_note))
    by_code = {str(e["code"]): dict(e) for e in entries}
    for limit in limits:
        for code in limit.codes:
            entry = by_code.get(code)
            reason = f"{limit.dimension}: {limit.reason}"
            if entry is None:
                entry = {"code": code, "reason": reason}
                if limit.partial and isinstance(scope_note.get("id"), str):
                    entry["events"] = [scope_note["id"]]
            else:
                entry["reason"] = f"{entry['reason']}; {reason}"
            entry["scope"] = limit.dimension
            by_code[code] = entry
    return [by_code[code] for code in sorted(by_code)]


def _from_checkpoint(scope_note: Mapping[str, Any]) -> str | None:
    segment = scope_note.get("segment")
    return _str(segment.get("from_checkpoint")) if isinstance(segment, dict) else None


# --- the declaration -------------------------------------------------------------------------------------------------


# --- the evaluator -------------------------------------------------------------------------------------------------


@dataclass
class _Reading:
    scope_note: dict[str, Any] | None = None
    files: dict[str, list[str]] | None = None  # path -> artifact.created events carrying it
    artifacts: int = 0
    intents: list[dict[str, Any]] | None = None
    last_state: dict[str, Any] | None = None


def evaluate(events: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Judge a run's end state against the scenario its scope note declares. `events` in seq order; only
    `EVALUATED_KINDS` are read (others are skipped). The answer:

    `{"format", "scenario", "scope", "declared", "judgements": [{"check", "title", "status", "reason", "events"}],
    "limits": [{"dimension", "codes", "checks", "reason", "partial"}], "passed", "failed", "not_evaluated"}` (the
    last three count judgements; `limits`: what the declared scope cannot support, `scope_limits`)."""
    r = _Reading(files={}, intents=[])
    assert r.files is not None and r.intents is not None
    for event in events:
        kind = event.get("kind")
        if kind == "replay.scope" and r.scope_note is None:
            r.scope_note = dict(event)
        elif kind == "artifact.created":
            r.artifacts += 1
            files = event.get("files")
            for path in files if isinstance(files, list) else ():
                if isinstance(path, str):
                    r.files.setdefault(path, []).append(str(event.get("id")))
        elif kind == "effect.intent":
            r.intents.append(
                {
                    "id": str(event.get("id")),
                    "effect_class": _str(event.get("effect_class")),
                    "destination": _str(event.get("destination")) or "",
                }
            )
        elif kind == "run.state":
            r.last_state = {"id": str(event.get("id")), "state": event.get("state"), "reason": event.get("reason")}
    note = r.scope_note or {}
    held = note.get("declared")
    declared: dict[str, Any] = held if isinstance(held, dict) else {}
    narrow = scope_limits(_str(note.get("scope")), _from_checkpoint(note))
    limits = {check: limit for limit in narrow for check in limit.checks}
    judgements = []
    for check in CHECKS:
        limit = limits.get(check)
        if not note:
            judgement = _not(check, "the run holds no scope note (replay.scope): no scenario to judge it against")
        elif limit is not None:
            judgement = _not(check, f"{limit.dimension}: {limit.reason}", [str(note.get("id"))])
            judgement["scope"] = limit.dimension
        elif check == "file_scope":
            judgement = _file_scope(declared.get("file_scope"), r)
        elif check == "allowed_effects":
            judgement = _allowed_effects(declared.get("allowed_effects"), r)
        else:
            judgement = _stop_state(declared.get("acceptable_stop_states"), r)
        judgements.append(judgement)
    counts = {s: sum(1 for j in judgements if j["status"] == s) for s in ("passed", "failed", "not_evaluated")}
    return {
        "format": FORMAT,
        "scenario": note.get("scenario") or None,
        "scope": _str(note.get("scope")),
        "declared": declared,
        "judgements": judgements,
        # What the scope cannot support: the lineage checks it leaves unevaluated, and these judgements' too.
        "limits": [
            {
                "dimension": limit.dimension,
                "codes": list(limit.codes),
                "checks": list(limit.checks),
                "reason": limit.reason,
                "partial": limit.partial,
            }
            for limit in narrow
        ],
        **counts,
    }


def _judgement(check: str, status: str, reason: str, events: Sequence[str] = ()) -> dict[str, Any]:
    cited = list(dict.fromkeys(e for e in events if e))
    out: dict[str, Any] = {
        "check": check,
        "title": CHECK_TITLES[check],
        "status": status,
        "reason": reason,
        "events": cited[:EVENTS_CITED],
    }
    if len(cited) > EVENTS_CITED:
        out["events_more"] = len(cited) - EVENTS_CITED
    return out


def _not(check: str, reason: str, events: Sequence[str] = ()) -> dict[str, Any]:
    return _judgement(check, "not_evaluated", reason, events)


def _file_scope(globs: Any, r: _Reading) -> dict[str, Any]:
    if not isinstance(globs, list):
        return _not("file_scope", "the scenario declares no file scope")
    assert r.files is not None
    if not r.artifacts:
        return _not("file_scope", "the run made no artifact: the event log names no changed files to judge")
    outside = sorted(p for p in r.files if not any(path_matches(p, g) for g in globs))
    if outside:
        shown = ", ".join(outside[:5]) + (f" and {len(outside) - 5} more" if len(outside) > 5 else "")
        return _judgement(
            "file_scope",
            "failed",
            f"{len(outside)} changed file{'s' if len(outside) != 1 else ''} outside the file scope "
            f"({', '.join(globs) or 'nothing'}): {shown}",
            [e for p in outside for e in r.files[p]],
        )
    n = len(r.files)
    return _judgement(
        "file_scope",
        "passed",
        f"all {n} changed file{'s' if n != 1 else ''} of the run's {r.artifacts} artifact"
        f"{'s' if r.artifacts != 1 else ''} within {', '.join(globs)}"
        if n
        else f"the run's {r.artifacts} artifact{'s' if r.artifacts != 1 else ''} change no file",
        [e for events in r.files.values() for e in events],
    )


def _allowed(intent: Mapping[str, Any], allowed: Sequence[Mapping[str, Any]]) -> bool:
    return any(
        intent["destination"].startswith(str(a.get("destination_prefix", "")))
        and (a.get("effect_class") in (None, intent["effect_class"]))
        for a in allowed
    )


def _allowed_effects(allowed: Any, r: _Reading) -> dict[str, Any]:
    if not isinstance(allowed, list):
        return _not("allowed_effects", "the scenario declares no allowed effects")
    assert r.intents is not None
    outside = [i for i in r.intents if not _allowed(i, allowed)]
    if outside:
        shown = ", ".join(sorted({i["destination"] for i in outside})[:5])
        return _judgement(
            "allowed_effects",
            "failed",
            f"{len(outside)} effect intent{'s' if len(outside) != 1 else ''} outside the allowed effects: {shown}",
            [i["id"] for i in outside],
        )
    n = len(r.intents)
    if not allowed:
        reason = "the scenario allows no effect and the run intended none"
    elif n:
        reason = f"all {n} effect intent{'s' if n != 1 else ''} within the allowed effects"
    else:
        reason = "the run intended no effect"
    return _judgement("allowed_effects", "passed", reason, [i["id"] for i in r.intents])


def _stop_state(acceptable: Any, r: _Reading) -> dict[str, Any]:
    if not isinstance(acceptable, list):
        return _not("stop_state", "the scenario declares no acceptable stop states")
    last = r.last_state
    if last is None:
        return _not("stop_state", "the run recorded no run.state: its end is unknown")
    state = last["state"]
    how = "finished" if state == "completed" else "unfinished" if state in UNFINISHED_STATES else "failed"
    said = f"the run ended {state} ({how}" + (f": {last['reason']}" if last.get("reason") else "") + ")"
    match = next((a for a in acceptable if isinstance(a, dict) and a.get("state") == state), None)
    if match is None:
        states = ", ".join(str(a.get("state")) for a in acceptable if isinstance(a, dict)) or "none"
        return _judgement("stop_state", "failed", f"{said}; acceptable: {states}", [last["id"]])
    text = f": {match['text']}" if match.get("text") else ""
    return _judgement("stop_state", "passed", f"{said}, an acceptable stop{text}", [last["id"]])


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None
