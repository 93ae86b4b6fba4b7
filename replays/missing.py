"""The missing-fixture page's reading (DESIGN §5, §7): what a replay stopped on, why, and what is close to it.

`missing_fixture_view(replay, index)` reads one `fixture.missing` / `fixture.ambiguous` record of a finished
replay: the call it stopped on (tool, contract revision, normalized request and its digest, world revision,
checkpoint), why the run needed it (the proposal that asked, and in the source run the recorded call with the
same request and what rested on its result), and the nearby recorded requests with a field-level diff: the
recorded call itself when the recording made it, then the scenario version's fixtures of the same tool (never
another tool's: its answer can be no candidate for this request). It also lists what the console already holds
for the same request digest: captures waiting in the review queue, pending candidates, and the scenario versions
whose fixtures answer it. Nothing here acts on the replay; the next steps (copy the recorded answer, copy similar,
exclude the tool, the reconstruction) are separate actions that each make something new.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from fixtures_review.scenarios import source_expired_sentence
from fixtures_review.selectors import RequestAnswers, request_answers
from n17q_engine.agent.model import contract_for
from runs.models import Event

from .launch import scenario_loaded
from .models import Replay

NEARBY = 6


@dataclass
class DiffRow:
    path: str
    missing: Any
    nearby: Any
    status: str  # same | different | only in the missing request | only in the recorded one


@dataclass
class Nearby:
    what: str  # "recorded call in the source run" | "fixture of the scenario version"
    label: str
    tool: str
    contract_revision: Any
    request_digest: str
    fixture_id: str | None
    synthetic: bool
    outcome: str
    rows: list[DiffRow]
    differing: int
    same_tool: bool
    conditions: list[str] = field(default_factory=list)
    body_expired: str = ""  # the fixture's body was removed under retention (seed 001): "Source material expired: …"


@dataclass
class MissingView:
    replay: Replay
    index: int
    record: dict[str, Any]
    call: dict[str, Any] | None
    proposal: dict[str, Any] | None
    checkpoint: dict[str, Any] | None
    recorded_call: dict[str, Any] | None
    recorded_result: dict[str, Any] | None
    rests_on_it: list[dict[str, Any]]
    nearby: list[Nearby]
    excluded_reason: str | None
    answers: RequestAnswers | None = None
    # The contract the request was checked against, as the pinned scenario version declares it (`Contract.to_dict`);
    # None when the version holds none for the tool (issue 36: the API answers it beside the request).
    contract: dict[str, Any] | None = None

    @property
    def body_expired(self) -> str:
        """For a replay that stopped on a fixture whose body the sweep removed (`fixture.missing` `body_expired`,
        seed 001): "Source material expired: …" naming the fixture, the class, the date and the deletion record."""
        expired = self.record.get("body_expired")
        if not isinstance(expired, dict):
            return ""
        return source_expired_sentence(str(expired.get("fixture")), str(expired.get("body_digest")), expired)

    @property
    def request(self) -> Any:
        """The request the replay stopped on: its `tool.call`'s (normalized by the contract, the lookup's key), or,
        for a call stopped before any lookup (no contract, a request that does not fit), the one the
        `fixture.missing` record carries (issue 36); None when the run recorded neither."""
        if self.call is not None:
            return self.call.get("request")
        return self.record.get("request")

    @property
    def request_json(self) -> str:
        """The request as JSON text, as a client would send it (the page shows and copies this, never a repr)."""
        return json.dumps(self.request, indent=2, ensure_ascii=False) if self.request is not None else ""

    @property
    def copyable_fixture(self) -> bool:
        """The scenario version holds a fixture of the same tool: "copy the nearest" has something to copy."""
        return any(n.fixture_id for n in self.nearby)

    @property
    def recorded_answer(self) -> bool:
        """The source run recorded a result a fixture can hold: "copy the recorded answer" can work."""
        result = self.recorded_result or {}
        return result.get("kind") == "tool.result" and result.get("outcome") not in (None, "unknown")


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k in sorted(value):
            out.update(_flatten(value[k], f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix or "(request)": value}


def request_diff(missing: dict[str, Any], other: dict[str, Any]) -> list[DiffRow]:
    a, b = _flatten(missing), _flatten(other)
    rows = []
    for path in sorted(set(a) | set(b)):
        if path in a and path in b:
            status = "same" if a[path] == b[path] else "different"
        elif path in a:
            status = "only in the missing request"
        else:
            status = "only in the recorded one"
        rows.append(DiffRow(path, a.get(path), b.get(path), status))
    return rows


def missing_fixture_view(replay: Replay, index: int) -> MissingView:
    record = replay.missing[index]
    run = replay.run
    assert run is not None
    refs = [r for r in (record.get("call_id"), record.get("checkpoint_id")) if r]
    held = {e.event_id: e.body for e in Event.objects.filter(run=run, event_id__in=refs)}
    call = held.get(record.get("call_id") or "")
    checkpoint = held.get(record.get("checkpoint_id") or "")
    proposal = None
    if call and call.get("proposal_id"):
        proposal = Event.objects.filter(run=run, event_id=call["proposal_id"]).values_list("body", flat=True).first()
    request = (call or {}).get("request") or record.get("request") or {}

    # The recording's own call with this request (seed 000: the status lookup that was answered live).
    source = replay.source_run
    recorded_call = recorded_result = None
    rests_on_it: list[dict[str, Any]] = []
    for body in (
        Event.objects.filter(run=source, kind="tool.call", body__tool=record.get("tool"))
        .order_by("seq")
        .values_list("body", flat=True)[:200]
    ):
        if body.get("request_digest") == record.get("request_digest"):
            recorded_call = body
            break
    if recorded_call is not None:
        recorded_result = (
            Event.objects.filter(
                run=source, kind__in=("tool.result", "command.receipt"), body__call_id=recorded_call["id"]
            )
            .values_list("body", flat=True)
            .first()
        )
        cited = {recorded_call["id"]} | ({recorded_result["id"]} if recorded_result else set())
        for body in (
            Event.objects.filter(run=source, kind__in=("account.claim", "evidence.observed", "policy.decision"))
            .order_by("seq")
            .values_list("body", flat=True)[:500]
        ):
            refs_of = set(body.get("supports") or []) | {body.get("source")} | set(body.get("input_ids") or [])
            if refs_of & cited:
                rests_on_it.append(body)

    nearby: list[Nearby] = []
    if recorded_call is not None:
        rows = request_diff(request, recorded_call.get("request") or {})
        nearby.append(
            Nearby(
                "recorded call in the source run",
                recorded_call["id"],
                recorded_call.get("tool", ""),
                recorded_call.get("contract_revision"),
                recorded_call.get("request_digest", ""),
                None,
                False,
                (recorded_result or {}).get("outcome", "no result recorded"),
                rows,
                sum(1 for r in rows if r.status != "same"),
                True,
                ["recorded live, never reviewed: not a fixture"],
            )
        )
    sc = scenario_loaded(replay.scenario_version) if replay.scenario_version else None
    excluded_reason = sc.excluded(record.get("tool", "")) if sc else None
    tool = record.get("tool")
    # The contract in force (the scenario's, or model.chat's built-in one where it pins none): the engine's one rule.
    in_force = contract_for(sc.contracts, tool) if sc is not None and tool else None
    contract = in_force.to_dict() if in_force is not None else None
    if sc is not None:
        candidates = []
        for f in sc.fixtures:
            if f.tool != record.get("tool"):
                continue  # another tool's answer is no candidate for this request
            rows = request_diff(request, dict(f.request))
            differing = sum(1 for r in rows if r.status != "same")
            same_tool = f.tool == record.get("tool")
            conditions = [f"{c.resource} at revision {c.expected()}" for c in f.condition]
            expired = f.response.expired
            gone = source_expired_sentence(f.id, f.response.body_digest or "", expired) if expired else ""
            candidates.append(
                (
                    (not same_tool, f.contract_revision != record.get("contract_revision"), differing, f.id),
                    Nearby(
                        "fixture of the scenario version",
                        f.id,
                        f.tool,
                        f.contract_revision,
                        f.request_digest,
                        f.id,
                        f.provenance.synthetic,
                        f.response.outcome,
                        rows,
                        differing,
                        same_tool,
                        conditions,
                        gone,
                    ),
                )
            )
        candidates.sort(key=lambda c: c[0])
        nearby.extend(n for _, n in candidates[: NEARBY - len(nearby)])
    return MissingView(
        replay=replay,
        index=index,
        record=record,
        call=call,
        proposal=proposal,
        checkpoint=checkpoint,
        recorded_call=recorded_call,
        recorded_result=recorded_result,
        rests_on_it=rests_on_it,
        nearby=nearby,
        excluded_reason=excluded_reason,
        contract=contract,
        answers=request_answers(
            scenario=(record.get("scenario") or {}).get("name") or "",
            tool=record.get("tool") or "",
            contract_revision=record.get("contract_revision") or 0,
            request_digest=record.get("request_digest") or "",
        )
        if record.get("request_digest")
        else None,
    )
