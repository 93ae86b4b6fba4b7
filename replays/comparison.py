"""The comparison report of a replay against its source run (DESIGN §6), layer by layer.

Layers: context inputs, proposals, policy decisions (with approvals), tool transitions, world changes,
budget, claims. Hard invariants are computed exactly on each run's events (no live effect, at most one
delivery, approval before send, bounded attempts, account matches world); text (proposal messages, claims)
is compared qualitatively: the same words or not, shown side by side, never scored. There is no single
replay score: a run can hold every invariant and still diverge, and the report keeps those apart.

Segments (issue 18): a replay that branched from a recorded checkpoint names it in its scope note
(`segment.from_checkpoint`, and `segment.restored.checkpoint`, the replay's own checkpoint event where the
branch began). The layers then compare only what follows the checkpoint in each run: the history before it is
the recording's by construction (the replay re-ran the recorded decisions to restore it), so those dimensions
are left unevaluated, and the report says how many events on each side it set aside. The hard invariants are
still computed on each whole run: they are facts about what happened, wherever it happened.

Budget (issue 19, seed 003 "Budgets exposed recovery cost"): beside the totals per resource, the report keeps
a ledger that says what the cost was made of: in the replay, what it re-charged from the recording and what its
own work cost (a counterfactual's extra validation), how much of each run went to recovery (attempts started to
recover from another), and the limit and recovery reserve the replay ran under, with the reason when spending
stopped it. Cost sits beside safety and completion; it never decides them.

Pairing: a replay re-derives its own event ids, so events are paired by position within a layer (the n-th
proposal of the source with the n-th of the replay). The first divergence is the earliest pair, by the
source's order, whose signatures differ; it links to both events. Each layer reads only its kinds through
the (run, kind, seq) index and at most LAYER_CAP events per run, and says so when it stops there.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Any

from n17q_engine.divergence import (
    MODEL_TOOL,
    call_signature,
    decision_matches,
    same_call,
    tool_calls_with_outcomes,
)
from n17q_engine.facts import effects_label, validation_label
from runs.facts import facts_of
from runs.models import Event, Finding, Run

LAYER_CAP = 5000
BOUNDED_EXECUTIONS = (
    3  # executions of one intent before "bounded attempts" no longer holds (a first send and two retries)
)


@dataclass
class Row:
    source: dict[str, Any] | None
    replay: dict[str, Any] | None
    same: bool
    source_text: str = ""
    replay_text: str = ""
    note: str = ""


@dataclass
class Layer:
    key: str
    title: str
    rows: list[Row] = field(default_factory=list)
    summary: str = ""
    truncated: bool = False
    first_divergence: Row | None = None
    extra: list[str] = field(default_factory=list)

    @property
    def diverged(self) -> int:
        return sum(1 for r in self.rows if not r.same)


@dataclass
class Invariant:
    key: str
    title: str
    source: str
    replay: str
    source_held: bool | None  # None: does not apply to that run
    replay_held: bool | None


@dataclass
class Comparison:
    source: Run
    replay_run: Run
    scope: dict[str, Any] | None
    layers: list[Layer]
    invariants: list[Invariant]
    first_divergence: tuple[Layer, Row] | None
    deliveries: dict[str, Any]
    historical_approvals: list[dict[str, Any]]
    # claims of the replay resting on an excluded tool's answer: neither supported nor contradicted here
    unevaluated_claims: list[dict[str, Any]] = field(default_factory=list)
    # a branch from a recorded checkpoint: what was compared and what was set aside (None: the whole run)
    segment: Segment | None = None
    # the budget ledger, one line per resource (issue 19); the budget stop's reason when spending ended the replay
    budget_ledger: list[BudgetLine] = field(default_factory=list)
    budget_stop: str = ""


@dataclass(frozen=True)
class BudgetLine:
    resource: str
    recorded: float  # the source run's total, across every attempt
    recorded_recovery: float  # of which in its recovery attempts
    replay: float  # the replay's total, across every attempt
    replayed: float  # of which re-charged from the recording (origin recorded)
    own: float  # of which the replay's own work (origin replay: its own turns, its reruns)
    replay_recovery: float  # of which in recovery attempts
    limit: float | None  # None: no limit declared or varied
    reserve: float | None

    @property
    def ordinary_allowance(self) -> float | None:
        return None if self.limit is None else max(0.0, self.limit - (self.reserve or 0))


def budget_ledger(
    source_charges: list[dict[str, Any]],
    source_recovery_attempts: set[str],
    replay_charges: list[dict[str, Any]],
    declared: dict[str, Any],
) -> list[BudgetLine]:
    """The ledger from each run's `budget.charged` events. A recording's charges carry no recovery flag, so its
    recovery is read from its attempts (one with a parent attempt recovers from it); the replay's charges say
    it themselves. `declared` is the replay's final `run.state` `budget` (limit and reserve per resource)."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for e in source_charges:
        row = totals[e["resource"]]
        row["recorded"] += e.get("amount") or 0
        if e.get("attempt") in source_recovery_attempts:
            row["recorded_recovery"] += e.get("amount") or 0
    for e in replay_charges:
        row = totals[e["resource"]]
        amount = e.get("amount") or 0
        row["replay"] += amount
        row["own" if e.get("origin") == "replay" else "replayed"] += amount
        if e.get("recovery"):
            row["replay_recovery"] += amount
    lines = []
    for resource in sorted(set(totals) | {r for r, d in declared.items() if isinstance(d, dict) and d.get("limit")}):
        row = totals[resource]
        held = declared.get(resource)
        limits: dict[str, Any] = held if isinstance(held, dict) else {}
        lines.append(
            BudgetLine(
                resource=resource,
                recorded=row["recorded"],
                recorded_recovery=row["recorded_recovery"],
                replay=row["replay"],
                replayed=row["replayed"],
                own=row["own"],
                replay_recovery=row["replay_recovery"],
                limit=limits.get("limit"),
                reserve=limits.get("recovery_reserve"),
            )
        )
    return lines


@dataclass(frozen=True)
class Segment:
    from_checkpoint: str
    replay_checkpoint: str | None  # None: the replay never got there (its history could not be restored)
    source_set_aside: int  # events of the source up to and including the checkpoint, not compared
    replay_set_aside: int  # events of the replay up to and including its branch checkpoint, not compared
    restored: dict[str, Any] | None
    differs: list[str]
    not_restored: str

    @property
    def note(self) -> str:
        if self.replay_checkpoint is None:
            return (
                f"This replay branched from checkpoint {self.from_checkpoint}, which it could not restore: "
                f"{self.not_restored or 'the history before it did not re-run'}. Nothing after the checkpoint "
                "exists to compare; the layers below are empty on the replay's side."
            )
        return (
            f"Compared from checkpoint {self.from_checkpoint} to the end. Before it, {self.source_set_aside} "
            f"recorded events and the replay's {self.replay_set_aside} events that re-ran them to restore the world "
            "are the recording's history by construction, so those dimensions are left unevaluated. The hard "
            "invariants below are computed on each whole run."
        )


def _events(run: Run, kinds: tuple[str, ...], after: int = 0) -> tuple[list[dict[str, Any]], bool]:
    rows = Event.objects.filter(run=run, kind__in=kinds)
    if after:
        rows = rows.filter(seq__gt=after)
    bodies = list(rows.order_by("seq").values_list("body", flat=True)[: LAYER_CAP + 1])
    return bodies[:LAYER_CAP], len(bodies) > LAYER_CAP


def _segment(source: Run, replay_run: Run, scope: dict[str, Any] | None) -> tuple[Segment | None, int, int]:
    """The branch a replay's scope note names, and the seq after which each run is compared (0: from the start)."""
    segment = (scope or {}).get("segment") or {}
    checkpoint = segment.get("from_checkpoint")
    if not isinstance(checkpoint, str) or checkpoint == "start":
        return None, 0, 0
    src_cut = Event.objects.filter(run=source, event_id=checkpoint).values_list("seq", flat=True).first() or 0
    restored = segment.get("restored") if isinstance(segment.get("restored"), dict) else None
    branch = str(restored.get("checkpoint")) if restored else None
    rep_cut = 0
    if branch is not None:
        rep_cut = Event.objects.filter(run=replay_run, event_id=branch).values_list("seq", flat=True).first() or 0
    else:  # never restored: everything the replay wrote was history
        rep_cut = Event.objects.filter(run=replay_run).order_by("-seq").values_list("seq", flat=True).first() or 0
    info = Segment(
        from_checkpoint=checkpoint,
        replay_checkpoint=branch,
        source_set_aside=Event.objects.filter(run=source, seq__lte=src_cut).count(),
        replay_set_aside=Event.objects.filter(run=replay_run, seq__lte=rep_cut).count(),
        restored=restored,
        differs=[str(d) for d in segment.get("differs") or []],
        not_restored=str(segment.get("not_restored") or ""),
    )
    return info, src_cut, rep_cut


def _pair(
    layer: Layer, src: list[dict[str, Any]], rep: list[dict[str, Any]], sig: Any, text: Any = None, match: Any = None
) -> None:
    for i in range(max(len(src), len(rep))):
        s = src[i] if i < len(src) else None
        r = rep[i] if i < len(rep) else None
        same = (
            s is not None
            and r is not None
            and (match(s, r) if match is not None else sig(s, "source") == sig(r, "replay"))
        )
        row = Row(s, r, same)
        if text is not None:
            row.source_text = text(s) if s else ""
            row.replay_text = text(r) if r else ""
            if s and r and row.source_text and row.replay_text:
                row.note = "same words" if row.source_text == row.replay_text else "different words"
        layer.rows.append(row)
        if not same and layer.first_divergence is None:
            layer.first_divergence = row


def _proposal_sig(e: dict[str, Any], side: str) -> Any:
    p = dict(e.get("proposal") or {})
    p.pop("text", None)
    return (p, e.get("accepted"))


def _context_sig(e: dict[str, Any], side: str) -> Any:
    if side == "replay" and e.get("origin") == "recorded":
        return e.get("recorded_context_digest")
    return e.get("context_digest")


def comparison_build(replay_run: Run) -> Comparison:
    source = replay_run.parent
    assert source is not None
    layers: list[Layer] = []
    scope = (
        Event.objects.filter(run=replay_run, kind="replay.scope").order_by("seq").values_list("body", flat=True).first()
    )
    segment, src_cut, rep_cut = _segment(source, replay_run, scope)

    def layer(key: str, title: str, kinds: tuple[str, ...]) -> tuple[Layer, list[dict[str, Any]], list[dict[str, Any]]]:
        src, t1 = _events(source, kinds, src_cut)
        rep, t2 = _events(replay_run, kinds, rep_cut)
        item = Layer(key, title, truncated=t1 or t2)
        layers.append(item)
        return item, src, rep

    # context inputs
    ctx, src_p, rep_p = layer("context", "Context inputs", ("model.proposal",))
    recorded = sum(1 for e in rep_p if e.get("origin") == "recorded")
    traced = sum(1 for e in src_p if e.get("otlp") or e.get("inspect"))
    if traced:
        # A trace's context digest is of its own message form (GenAI parts, Inspect messages), a replayed agent's of
        # its request: two digests of two forms, never equal. Not evaluated, and said so, rather than "differs".
        ctx.summary = (
            f"not evaluated: {traced} of the {len(src_p)} recorded proposals come from an imported trace, whose "
            "context digests are of the trace's own message form; the model requests themselves were answered by "
            "the fixtures made from that trace, or stopped on (the tool transitions and the missing fixtures say "
            "which)"
        )
    else:
        _pair(ctx, src_p, rep_p, _context_sig)
        ctx.summary = (
            f"{len(src_p)} proposals recorded, {len(rep_p)} in the replay; {recorded} replayed from the recorded "
            "context (its digest kept as recorded_context_digest), the rest from the decider's own context"
        )

    # proposals
    prop = Layer("proposals", "Proposals", truncated=ctx.truncated)
    layers.append(prop)
    # One rule for "the same decision", the CI suite's (n17q_engine.divergence.decision_matches).
    _pair(
        prop, src_p, rep_p, _proposal_sig, text=lambda e: str((e.get("proposal") or {}).get("text") or ""),
        match=decision_matches,
    )  # fmt: skip
    prop.summary = f"{len(src_p)} recorded, {len(rep_p)} in the replay; {prop.diverged} differ"

    # policy decisions and approvals
    pol, src_d, rep_d = layer("policy", "Policy decisions", ("policy.decision",))
    _pair(
        pol, src_d, rep_d, lambda e, side: (e.get("policy_revision"), e.get("outcome"), tuple(e.get("required") or ()))
    )
    pol.summary = (
        f"recorded: {', '.join(e['outcome'] for e in src_d) or 'none'}; "
        f"replay: {', '.join(e['outcome'] for e in rep_d) or 'none'}"
    )
    approvals, _ = _events(replay_run, ("approval.recorded",), rep_cut)
    intents, _ = _events(replay_run, ("effect.intent",), rep_cut)
    used_ids = {i.get("approval_id") for i in intents}
    historical = []
    for a in approvals:
        if a.get("origin") != "historical":
            continue
        users = [i["id"] for i in intents if i.get("approval_id") == a["id"]]
        historical.append({"event": a, "used_by": users, "recorded_as": a.get("historical_event")})
    for a in approvals:
        pol.extra.append(
            f"approval {a['id']}: {a.get('decision')} by {a.get('actor_role')}, origin {a.get('origin')}"
            + (", used as authority" if a["id"] in used_ids else ", used as authority by nothing")
        )

    # tool transitions
    tools, src_c, rep_c = layer("tools", "Tool transitions", ("tool.call", "tool.result", "command.receipt"))

    # The engine's pairing core (n17q_engine/divergence.py), which a CI's replay suite uses without a database.
    # The agent's own model calls (`model.chat`) are compared as proposals above, as the CI suite does: a trace's
    # model calls are proposals, never calls, so counting them here would shift every later pair.
    src_calls, rep_calls = tool_calls_with_outcomes(src_c), tool_calls_with_outcomes(rep_c)
    _pair(tools, src_calls, rep_calls, lambda e, side: call_signature(e), match=same_call)
    models = sum(1 for e in rep_c if e.get("kind") == "tool.call" and e.get("tool") == MODEL_TOOL)
    tools.summary = f"{len(src_calls)} calls recorded, {len(rep_calls)} in the replay; {tools.diverged} differ" + (
        f" ({models} model call{'s' if models != 1 else ''} of the agent are compared as proposals)" if models else ""
    )

    # world changes
    world, src_w, rep_w = layer("world", "World changes", ("world.transition",))
    _pair(world, src_w, rep_w, lambda e, side: e.get("resource"))
    world.summary = f"{len(src_w)} transitions recorded, {len(rep_w)} in the replay's fixture world"

    # budget
    budget, src_b, rep_b = layer("budget", "Budget", ("budget.charged",))
    totals_s: Counter[str] = Counter()
    totals_r: Counter[str] = Counter()
    for e in src_b:
        totals_s[e["resource"]] += e.get("amount") or 0
    for e in rep_b:
        totals_r[e["resource"]] += e.get("amount") or 0
    for resource in sorted(set(totals_s) | set(totals_r)):
        s, r = totals_s.get(resource), totals_r.get(resource)
        row = Row(
            {"resource": resource, "amount": s} if s is not None else None,
            {"resource": resource, "amount": r} if r is not None else None,
            s == r,
        )
        budget.rows.append(row)
        if not row.same and budget.first_divergence is None:
            budget.first_divergence = row
    budget.summary = "totals per resource across every attempt" if budget.rows else "no budget charged in either run"
    attempts, _ = _events(source, ("attempt.started",))
    final_state, _ = _events(replay_run, ("run.state",), rep_cut)
    last_state = final_state[-1] if final_state else {}
    held = last_state.get("budget")
    declared: dict[str, Any] = held if isinstance(held, dict) else {}
    ledger = budget_ledger(
        src_b, {str(a.get("attempt")) for a in attempts if a.get("parent_attempt_id")}, rep_b, declared
    )
    for row in budget.rows:
        line = next((x for x in ledger if x.resource == (row.replay or row.source or {}).get("resource")), None)
        if line is not None and line.own:
            row.note = f"{line.own:g} of it the replay's own work"
    reason = str(last_state.get("reason") or "")
    budget_stop = reason if reason.startswith(("budget exhausted", "budget reserve")) else ""

    # claims
    claims, src_a, rep_a = layer("claims", "Claims (the final account)", ("account.claim",))
    _pair(claims, src_a, rep_a, lambda e, side: e.get("claim_kind"), text=lambda e: str(e.get("text") or ""))
    claims.summary = f"{len(src_a)} recorded, {len(rep_a)} in the replay; wording compared as text, never scored"
    unevaluated = [
        {"id": e["id"], "text": e.get("text") or "", "tools": list((e.get("unevaluated") or {}).get("tools") or [])}
        for e in rep_a
        if e.get("unevaluated")
    ]
    if unevaluated:
        claims.summary += f"; {len(unevaluated)} left unevaluated (they rest on an excluded tool)"

    src_inv = _invariants(source)
    rep_inv = _invariants(replay_run)
    invariants = [
        Invariant(k, title, src_inv[k][0], rep_inv[k][0], src_inv[k][1], rep_inv[k][1])
        for k, title in INVARIANT_TITLES.items()
    ]
    first = None
    best = None
    for item in layers:
        diverged = item.first_divergence
        if diverged is None or item.key == "budget":
            continue
        order = (diverged.source or {}).get("seq") or 10**12 + ((diverged.replay or {}).get("seq") or 0)
        if best is None or order < best:
            best, first = order, (item, diverged)
    return Comparison(
        source=source,
        replay_run=replay_run,
        scope=scope,
        layers=layers,
        invariants=invariants,
        first_divergence=first,
        deliveries={"source": src_inv["_deliveries"], "replay": rep_inv["_deliveries"]},
        historical_approvals=historical,
        unevaluated_claims=unevaluated,
        segment=segment,
        budget_ledger=ledger,
        budget_stop=budget_stop,
    )


INVARIANT_TITLES = {
    "no_live_effect": "No live effect",
    "one_delivery": "At most one delivery per intent",
    "approval_first": "Approval before send",
    "bounded_attempts": "Bounded attempts",
    "account_matches": "Account matches world",
}


def _invariants(run: Run) -> dict[str, Any]:
    """Exact checks on one run, read from its facts (runs/facts.py: the same facts every page reads). Each value:
    (what was counted, held or None when it does not apply)."""
    facts = facts_of(run)
    effects = facts["effects"]
    live = run.environment == "live"
    out: dict[str, Any] = {}

    bad = list(effects["left_containment"])
    out["no_live_effect"] = (
        ("a live recording: its effects were live" if live else f"{len(bad)} live intents or executions")
        + (f" ({', '.join(bad[:5])})" if bad and not live else ""),
        None if live else not bad,
    )

    count, worst = effects["deliveries"], effects["max_deliveries_per_intent"]
    kind = "live" if live else "simulated"
    text = f"{count} {kind} deliver{'y' if count == 1 else 'ies'}, at most {worst} per intent"
    if effects["max_acknowledged_per_intent"] > 1:
        text += f"; {effects['max_acknowledged_per_intent']} acknowledged executions of one intent (LIN012)"
    if effects["reused_keys"]:
        text += f"; an idempotency key names {len(effects['reused_keys']) + 1} intents (LIN012)"
    out["one_delivery"] = (text, bool(effects["at_most_one_delivery"]))
    out["_deliveries"] = {
        "count": count,
        "kind": kind,
        "events": list(effects["delivery_events"]),
        "resources": list(effects["delivered_resources"]),
    }

    late = list(effects["executed_without_prior_approval"])
    out["approval_first"] = (
        f"{effects['executions']} executions, {len(late)} without a prior approval of this run"
        + (f" ({', '.join(late[:5])})" if late else ""),
        not late,
    )

    most = effects["max_executions_per_intent"]
    out["bounded_attempts"] = (
        f"at most {most} execution{'s' if most != 1 else ''} per intent (bound {BOUNDED_EXECUTIONS})",
        most <= BOUNDED_EXECUTIONS,
    )

    claims = facts["outcome"]["claims"]
    effect_claims = claims.get("effect", 0)
    unevaluated = list(facts["outcome"]["unevaluated_claims"])
    # a claim resting on an excluded tool is left unevaluated: its findings count neither way
    # Claims, not findings: one claim can break several ways (each its own LIN008 finding), and it is one claim.
    unsupported = (
        Finding.objects.filter(run=run, code="LIN008")
        .exclude(from_ref__in=unevaluated)
        .values("from_ref")
        .distinct()
        .count()
    )
    matches = bool(effect_claims) == bool(count) and unsupported == 0
    out["account_matches"] = (
        f"{effect_claims} effect claim{'s' if effect_claims != 1 else ''}, "
        f"{count} deliver{'y' if count == 1 else 'ies'}, "
        f"{unsupported} unsupported claim{'' if unsupported == 1 else 's'} (LIN008)"
        + (f", {len(unevaluated)} not evaluated (excluded tools)" if unevaluated else ""),
        matches,
    )
    return out


@dataclass(frozen=True)
class Outcome:
    state: str
    validation: str  # "validation complete" | "validation incomplete: …" | "no validation recorded"
    effects: str


def run_outcome(run: Run) -> Outcome:
    """What a finished run amounts to, in two plain sentences: validation, and effects (read from its facts)."""
    facts = facts_of(run)
    return Outcome(run.final_state, validation_label(facts), effects_label(facts))
