"""Where a replay first departed from the run it replays, and what it stopped on (issue 36, point 5).

Pure functions over two event lists (each as its bundle holds it, in `seq` order): nothing is read or stored. The
pairing is the console's comparison (replays/comparison.py, its "Proposals" and "Tool transitions" layers): the
n-th decision of the replay is paired with the n-th decision of the recording, the n-th tool call with the n-th,
each by a signature, and the first divergence is the earliest unequal pair (by the
recording's position; a pair with nothing recorded comes after every recorded one). Two differences from the
console, both because this answers "did the agent do what the recorded run did?":

- the agent's own model calls (`model.chat` tool calls, which no recording has) are left out: they are how the
  agent decided, not a decision;
- a decision matches when the replay's proposal holds every field the recorded proposal holds, with the same value
  (free text aside), and the same acceptance: a recording often keeps only `type` and `tool` of a proposal, while an
  agent's proposal carries its arguments too (the console compares the whole proposal and shows both);
- a replay branched from a checkpoint is compared from that checkpoint on (the recording after the checkpoint, the
  replay after the checkpoint its scope note says it restored), as the console does.

The console's comparison reads the database (`Event` rows) and shows every layer; this module is the part a CI job
needs without a database. The console's comparison takes its tool-call pairing from here (`calls_with_outcomes`,
`call_signature`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

MODEL_TOOL = "model.chat"  # n17q_engine.agent.model.MODEL_TOOL (not imported: this module stays below the agent)
SUMMARY_CHARS = 400


# What a proposal reports rather than decides: its free text, why the model stopped, a trace's unrecorded marker,
# and (below) a converted proposal's list of calls, whose first call is the decision.
_REPORTED = frozenset({"text", "finish_reason", "stop_reason", "unrecorded", "calls"})


def proposal_terms(proposal: Mapping[str, Any]) -> dict[str, Any]:
    """The decision a proposal holds, in the engine's form `{"type", "tool", **arguments}`: what it reports left
    out, and a proposal converted from a trace (`calls: [{call, tool, arguments}]`, docs/formats/otlp.md) read as
    its first call's arguments, so a trace's proposal and a replayed agent's are compared on what was decided."""
    terms = {k: v for k, v in proposal.items() if k not in _REPORTED}
    calls = proposal.get("calls")
    first = calls[0] if isinstance(calls, list) and calls and isinstance(calls[0], dict) else None
    if first is not None:
        arguments = first.get("arguments")
        if isinstance(arguments, str):
            try:
                arguments = json.loads(arguments)
            except ValueError:
                arguments = None
        if isinstance(arguments, dict):
            terms.update({k: v for k, v in arguments.items() if k not in ("type", "tool")})
    return terms


def decision_matches(recorded: Mapping[str, Any], replay: Mapping[str, Any]) -> bool:
    """The replay's proposal holds every term of the recorded one (`proposal_terms`: free text and reporting
    aside) with the same value, and was accepted or not alike."""
    rec = proposal_terms(recorded.get("proposal") or {})
    rep = proposal_terms(replay.get("proposal") or {})
    same = all(k in rep and rep[k] == v for k, v in rec.items())
    return same and recorded.get("accepted") == replay.get("accepted")


def call_signature(call: Mapping[str, Any]) -> Any:
    """What makes two tool calls the same: tool, contract revision, normalized request digest and result outcome."""
    return (call.get("tool"), call.get("contract_revision"), call.get("request_digest"), call.get("result_outcome"))


def same_call(recorded: Mapping[str, Any], replayed: Mapping[str, Any]) -> bool:
    """Whether a replayed tool call is the recorded one (`call_signature`), where a recorded contract revision of 0
    ("no contract recorded": a run converted from a trace that names none, docs/formats/otlp.md) matches the
    revision the scenario pinned for the replay: the trace could not say which revision its call was under."""
    if recorded.get("contract_revision") == 0:
        replayed = {**replayed, "contract_revision": 0}
    return bool(call_signature(recorded) == call_signature(replayed))


def calls_with_outcomes(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Each `tool.call` with `result_outcome`: its result's outcome, a receipt's completion, or "no result"."""
    events = list(events)
    results = {e.get("call_id"): e for e in events if e.get("kind") in ("tool.result", "command.receipt")}
    out = []
    for e in events:
        if e.get("kind") == "tool.call":
            res = results.get(e.get("id")) or {}
            out.append({**e, "result_outcome": res.get("outcome") or res.get("completion") or "no result"})
    return out


def tool_calls_with_outcomes(events: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """`calls_with_outcomes` without the agent's own model calls (`model.chat`): the tool calls two runs are
    compared on, here and on the console's comparison page (a trace's model calls are proposals, not calls)."""
    return [c for c in calls_with_outcomes(events) if c.get("tool") != MODEL_TOOL]


@dataclass(frozen=True)
class Divergence:
    layer: str  # "decision" | "tool call"
    index: int  # 1-based position in that layer (after the branch point)
    recorded: dict[str, Any] | None  # None: the recording has no such step
    replay: dict[str, Any] | None  # None: the replay never got there

    def describe(self) -> str:
        """One paragraph: which step, what the recording did, what the replay did."""
        return (
            f"first divergence at {self.layer} #{self.index}: recorded {self._side(self.recorded)}; "
            f"replay {self._side(self.replay)}"
        )

    def _side(self, event: Mapping[str, Any] | None) -> str:
        if event is None:
            return "nothing (no such step)"
        if self.layer == "decision":
            proposal = dict(event.get("proposal") or {})
            proposal.pop("text", None)
            accepted = "" if event.get("accepted") in (None, True) else " (not accepted)"
            return f"{event.get('id')} proposed {summary(proposal)}{accepted}"
        digest = str(event.get("request_digest") or "")
        return (
            f"{event.get('id')} called {event.get('tool')} (contract revision {event.get('contract_revision')}, "
            f"request {digest[:19]}{'…' if len(digest) > 19 else ''}) -> {event.get('result_outcome')}; "
            f"request {summary(event.get('request'))}"
        )


def summary(value: Any, limit: int = SUMMARY_CHARS) -> str:
    """A value as one bounded line of canonical-ish JSON."""
    try:
        text = json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        text = repr(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _after(events: Sequence[Mapping[str, Any]], event_id: str | None) -> list[Mapping[str, Any]]:
    if not event_id:
        return list(events)
    for i, e in enumerate(events):
        if e.get("id") == event_id:
            return list(events[i + 1 :])
    return []


def branch_cut(replay_events: Sequence[Mapping[str, Any]]) -> tuple[str | None, str | None]:
    """(the recording's checkpoint, the replay's restored checkpoint) from the replay's scope note; (None, None)
    for a replay from the start. A branch whose history was never restored compares nothing of the replay's."""
    scope = next((e for e in replay_events if e.get("kind") == "replay.scope"), None)
    segment = (scope or {}).get("segment") or {}
    checkpoint = segment.get("from_checkpoint")
    if not isinstance(checkpoint, str) or checkpoint == "start":
        return None, None
    restored = segment.get("restored") if isinstance(segment.get("restored"), dict) else None
    return checkpoint, (str(restored.get("checkpoint")) if restored else "\0never restored")


def first_divergence(
    recorded_events: Sequence[Mapping[str, Any]], replay_events: Sequence[Mapping[str, Any]]
) -> Divergence | None:
    """The first decision or tool call where the replay's events differ from the recorded run's, or None."""
    src_cut, rep_cut = branch_cut(replay_events)
    src = _after(recorded_events, src_cut)
    rep = _after(replay_events, rep_cut)
    layers = (
        ("decision", [e for e in src if e.get("kind") == "model.proposal"],
         [e for e in rep if e.get("kind") == "model.proposal"], decision_matches),
        ("tool call", tool_calls_with_outcomes(src), tool_calls_with_outcomes(rep), same_call),
    )  # fmt: skip
    best: tuple[int, Divergence] | None = None
    for layer, s_list, r_list, same in layers:
        for i in range(max(len(s_list), len(r_list))):
            s = s_list[i] if i < len(s_list) else None
            r = r_list[i] if i < len(r_list) else None
            if s is not None and r is not None and same(s, r):
                continue
            order = int(s.get("seq") or 0) if s is not None else 10**12 + int((r or {}).get("seq") or 0)
            if best is None or order < best[0]:
                best = (order, Divergence(layer, i + 1, dict(s) if s else None, dict(r) if r else None))
            break
    return best[1] if best else None


@dataclass(frozen=True)
class MissingFixture:
    tool: str
    request_digest: str
    request: Any  # the normalized request of the call that missed (its `tool.call`), None when not logged
    reason: str

    def describe(self) -> str:
        what = "model request" if self.tool == MODEL_TOOL else "request"
        return (
            f"missing fixture: {self.tool} {self.request_digest}"
            + (f" ({self.reason})" if self.reason else "")
            + f"; {what} {request_summary(self.tool, self.request)}"
        )


def request_summary(tool: str, request: Any) -> str:
    """A normalized request as one bounded line; for a model request, its model, tools and last message."""
    if tool == MODEL_TOOL and isinstance(request, dict):
        messages = request.get("messages") or []
        last = messages[-1] if messages and isinstance(messages[-1], dict) else {}
        tools = [((t.get("function") or {}).get("name")) for t in request.get("tools") or [] if isinstance(t, dict)]
        return summary(
            {
                "model": request.get("model"),
                "messages": len(messages),
                "tools": len(tools),
                "last_message": {
                    k: last.get(k) for k in ("role", "content", "tool_call_id", "tool_calls") if k in last
                },
            }
        )
    return summary(request)


def missing_fixtures(replay_events: Sequence[Mapping[str, Any]]) -> list[MissingFixture]:
    """Every `fixture.missing` / `fixture.ambiguous` of a replay, with the normalized request of its call."""
    calls = {e.get("id"): e for e in replay_events if e.get("kind") == "tool.call"}
    out = []
    for e in replay_events:
        if e.get("kind") not in ("fixture.missing", "fixture.ambiguous"):
            continue
        call = calls.get(e.get("call_id")) or {}
        reason = "ambiguous: more than one fixture matches" if e["kind"] == "fixture.ambiguous" else ""
        excluded = e.get("excluded")
        if isinstance(excluded, dict):
            reason = f"excluded: {excluded.get('reason')}"
        out.append(
            MissingFixture(
                str(e.get("tool") or call.get("tool") or ""),
                str(e.get("request_digest") or call.get("request_digest") or ""),
                call.get("request"),
                reason,
            )
        )
    return out
