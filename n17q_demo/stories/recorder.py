"""Building a demo run's events: `_Recorder`, one small helper per event kind, each returning the new event's id,
with scenario and wall time moving as the run goes (no clock, no randomness), its blobs digested by `canonical`;
and `_run`, the manifest's run record. Every story module builds its runs with these, so no event can drift from
the vocabulary (`n17q_engine.vocabulary`): a required field left out fails when the demo is generated.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from n17q_engine import vocabulary as v
from n17q_engine.canonical import canonical_json, digest_bytes, digest_json, evidence_set_digest, request_digest

from .bundle import StoryBundle

MODEL = {"name": "n17q-demo-agent", "version": "2026-06"}

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


# --- building events ------------------------------------------------------------------------------------------


def _parse(value: str) -> datetime:
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def _iso(moment: datetime) -> str:
    text = moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")
    millis = moment.microsecond // 1000
    return f"{text}.{millis:03d}Z" if millis else f"{text}Z"


class _Recorder:
    """Appends one run's events and blobs; one method per event kind, each returning the new event's id.

    `after` is how far scenario time moves before the event (seconds). Wall time moves `after * wall_ratio +
    wall_overhead`: ratio 1 and no overhead for a live recording (wall keeps its constant lag behind logical), a
    small ratio for a fixture world or a replay, whose clocks are logical.
    """

    def __init__(
        self, tag: str, *, task: str, logical: str, wall: str, wall_ratio: float = 1.0, wall_overhead: float = 0.0
    ) -> None:
        self.tag = tag
        self.task = task
        self._logical_ms = round(_parse(logical).timestamp() * 1000)
        self._wall_ms = round(_parse(wall).timestamp() * 1000)
        self._wall_ratio = wall_ratio
        self._wall_overhead = wall_overhead
        self.attempt: str | None = None
        self.events: list[dict[str, Any]] = []
        self.blobs: dict[str, bytes] = {}
        self.blob_meta: dict[str, dict[str, Any]] = {}

    # time and identity

    def _seen(self, event_id: str) -> str:
        """What the model saw of an event: the bytes of a result or receipt (so a faithful replay shows the same
        context), otherwise the event or object itself."""
        for event in reversed(self.events):
            if event["id"] == event_id:
                return event.get("blob") or event.get("output_blob") or event_id
        return event_id

    def eid(self, name: str) -> str:
        return f"e-{self.tag}-{name}"

    @property
    def now(self) -> str:
        return _iso(datetime.fromtimestamp(self._logical_ms / 1000, UTC))

    def skip(self, after: float) -> None:
        """Let scenario and wall time pass without an event (an event the run did not record)."""
        self._advance(after)

    def _advance(self, after: float) -> None:
        self._logical_ms += round(after * 1000)
        self._wall_ms += round((after * self._wall_ratio + self._wall_overhead) * 1000)

    def _emit(self, kind: str, name: str, *, after: float = 1.0, attempt: Any = ..., **fields: Any) -> str:
        self._advance(after)
        event_id = self.eid(name)
        event = {
            "seq": len(self.events) + 1,
            "id": event_id,
            "kind": kind,
            "at": {
                "logical": _iso(datetime.fromtimestamp(self._logical_ms / 1000, UTC)),
                "wall": _iso(datetime.fromtimestamp(self._wall_ms / 1000, UTC)),
            },
            "attempt": self.attempt if attempt is ... else attempt,
            **fields,
        }
        missing = [key for key, spec in v.KINDS[kind].items() if spec.required and key not in event]
        if missing:  # a programming error in this module, caught when the demo is generated
            raise AssertionError(f"{event_id}: {kind} lacks {missing}")
        self.events.append(event)
        return event_id

    # blobs

    def blob(self, data: bytes, *, media_type: str, role: str, retention: str = "standard") -> str:
        digest = digest_bytes(data)
        self.blobs[digest] = data
        self.blob_meta[digest] = {"media_type": media_type, "size": len(data), "role": role, "retention": retention}
        return digest

    def json_blob(self, value: Any, *, role: str, retention: str = "standard") -> str:
        return self.blob(canonical_json(value), media_type=JSON, role=role, retention=retention)

    def text_blob(self, text: str, *, role: str) -> str:
        return self.blob(text.encode("utf-8"), media_type=TEXT, role=role)

    # attempts

    def attempt_started(
        self, name: str, attempt: str, *, number: int, reason: str, parent: str | None = None, after: float = 1.0
    ) -> str:
        self.attempt = attempt
        return self._emit("attempt.started", name, after=after, number=number, reason=reason, parent_attempt_id=parent)

    def attempt_ended(self, name: str, *, outcome: str, after: float = 1.0) -> str:
        return self._emit("attempt.ended", name, after=after, outcome=outcome)

    # workspaces and artifacts

    def workspace_created(
        self,
        name: str,
        workspace: str,
        *,
        base_digest: str,
        overlay_digest: str,
        environment_revision: str,
        derived_from: dict[str, Any] | None,
        overlay_files: list[str],
        inherited: list[dict[str, Any]] | None = None,
        after: float = 1.0,
    ) -> str:
        extra = {} if inherited is None else {"inherited": inherited}  # LIN016's declaration, when the story makes one
        return self._emit(
            "workspace.created",
            name,
            after=after,
            workspace_id=workspace,
            base_digest=base_digest,
            overlay_digest=overlay_digest,
            environment_revision=environment_revision,
            derived_from=derived_from,
            overlay_files=overlay_files,
            **extra,
        )

    def workspace_changed(
        self,
        name: str,
        workspace: str,
        *,
        overlay_revision: int,
        tree_digest: str,
        cause: str | None,
        after: float = 1.0,
    ) -> str:
        return self._emit(
            "workspace.changed",
            name,
            after=after,
            workspace_id=workspace,
            overlay_revision=overlay_revision,
            tree_digest=tree_digest,
            cause=cause,
        )

    def workspace_lifecycle(
        self,
        name: str,
        workspace: str,
        *,
        state: str,
        cause: str | None,
        cleanup_receipt_id: str | None = None,
        after: float = 1.0,
    ) -> str:
        return self._emit(
            "workspace.lifecycle",
            name,
            after=after,
            workspace_id=workspace,
            state=state,
            cause=cause,
            cleanup_receipt_id=cleanup_receipt_id,
        )

    def artifact_created(
        self,
        name: str,
        artifact: str,
        *,
        data: bytes,
        media_type: str,
        role: str,
        workspace: str | None,
        tree_digest: str | None,
        files: list[str],
        after: float = 1.0,
    ) -> str:
        digest = self.blob(data, media_type=media_type, role=role)
        return self._emit(
            "artifact.created",
            name,
            after=after,
            artifact_id=artifact,
            digest=digest,
            media_type=media_type,
            size=len(data),
            role=role,
            workspace_id=workspace,
            tree_digest=tree_digest,
            files=files,
        )

    # the model and its tools

    def proposal(
        self, name: str, proposal: dict[str, Any], *, visible: list[str], accepted: bool = True, after: float = 1.0
    ) -> str:
        context = digest_json({"task": self.task, "attempt": self.attempt, "visible": [self._seen(i) for i in visible]})
        return self._emit(
            "model.proposal", name, after=after, context_digest=context, proposal=proposal, accepted=accepted
        )

    def tool_call(
        self,
        name: str,
        tool: str,
        rev: int,
        request: dict[str, Any],
        *,
        proposal: str | None,
        workspace: str | None = None,
        after: float = 1.0,
    ) -> str:
        return self._emit(
            "tool.call",
            name,
            after=after,
            tool=tool,
            contract_revision=rev,
            request=request,
            request_digest=request_digest(request),
            proposal_id=proposal,
            workspace_id=workspace,
        )

    def tool_result(
        self,
        name: str,
        call: str,
        *,
        origin: str,
        outcome: str,
        blob: str | None,
        absent: dict[str, str] | None = None,
        after: float = 1.0,
    ) -> str:
        return self._emit(
            "tool.result",
            name,
            after=after,
            call_id=call,
            origin=origin,
            outcome=outcome,
            blob=blob,
            absent=absent or {},
        )

    def command_receipt(
        self,
        name: str,
        call: str | None,
        workspace: str,
        *,
        command: str,
        suites: list[str],
        pre_tree: str,
        post_tree: str | None,
        environment_revision: str,
        completion: str,
        exit_code: int | None,
        results: dict[str, Any],
        output: str,
        after: float = 1.0,
    ) -> str:
        output_blob = self.text_blob(output, role="command-output")
        return self._emit(
            "command.receipt",
            name,
            after=after,
            call_id=call,
            workspace_id=workspace,
            command=command,
            suites=suites,
            pre_tree=pre_tree,
            post_tree=post_tree,
            environment_revision=environment_revision,
            completion=completion,
            exit_code=exit_code,
            results=results,
            output_blob=output_blob,
        )

    # evidence

    def observed(
        self,
        name: str,
        source: str,
        *,
        workspace: str | None,
        tree_digest: str | None,
        scope: list[str],
        after: float = 0.1,
    ) -> str:
        return self._emit(
            "evidence.observed",
            name,
            after=after,
            source=source,
            workspace_id=workspace,
            tree_digest=tree_digest,
            scope=scope,
        )

    def admitted(
        self,
        name: str,
        observation: str,
        *,
        purpose: str,
        artifact: str | None,
        workspace: str | None,
        tree_digest: str | None,
        policy_revision: str,
        decision: str = "admitted",
        compatibility: dict[str, str] | None = None,
        rationale: str | None = None,
        after: float = 0.1,
    ) -> str:
        return self._emit(
            "evidence.admitted",
            name,
            after=after,
            observation_id=observation,
            purpose=purpose,
            artifact_id=artifact,
            workspace_id=workspace,
            tree_digest=tree_digest,
            policy_revision=policy_revision,
            decision=decision,
            compatibility=compatibility,
            rationale=rationale,
        )

    # policy, people, effects

    def policy(
        self,
        name: str,
        *,
        policy_revision: str,
        subject: str,
        inputs: list[str],
        required: list[str],
        outcome: str,
        reasons: list[str],
        after: float = 0.2,
    ) -> str:
        return self._emit(
            "policy.decision",
            name,
            after=after,
            policy_revision=policy_revision,
            subject=subject,
            input_ids=inputs,
            required=required,
            outcome=outcome,
            reasons=reasons,
        )

    def approval(
        self,
        name: str,
        *,
        subject: str,
        admission_ids: list[str],
        decision: str,
        actor_role: str,
        origin: str,
        run: str,
        environment: str,
        after: float = 1.0,
    ) -> str:
        return self._emit(
            "approval.recorded",
            name,
            after=after,
            subject=subject,
            evidence_set_digest=evidence_set_digest(admission_ids),
            decision=decision,
            actor_role=actor_role,
            origin=origin,
            run=run,
            environment=environment,
        )

    def human_input(
        self, name: str, *, actor_role: str, visible: list[str], action: str, note: str | None, after: float = 1.0
    ) -> str:
        return self._emit(
            "human.input", name, after=after, actor_role=actor_role, visible_ids=visible, action=action, note=note
        )

    def intent(
        self,
        name: str,
        *,
        effect_class: str,
        destination: str,
        artifact: str | None,
        admission_ids: list[str],
        approval: str | None,
        idempotency_key: str,
        namespace: str,
        historical_intent: str | None = None,
        after: float = 0.2,
    ) -> str:
        return self._emit(
            "effect.intent",
            name,
            after=after,
            effect_class=effect_class,
            destination=destination,
            artifact_id=artifact,
            admission_ids=admission_ids,
            approval_id=approval,
            idempotency_key=idempotency_key,
            namespace=namespace,
            historical_intent=historical_intent,
        )

    def execution(
        self,
        name: str,
        intent: str,
        *,
        connection: str,
        outcome: str = "acknowledged",
        stage: str = "completed",
        attempt_no: int = 1,
        after: float = 1.0,
    ) -> str:
        return self._emit(
            "effect.execution",
            name,
            after=after,
            intent_id=intent,
            attempt_no=attempt_no,
            stage=stage,
            outcome=outcome,
            connection=connection,
        )

    # the world and its clock

    def world_transition(
        self,
        name: str,
        resource: str,
        *,
        before: int | None,
        after_revision: int,
        change: Any,
        cause: str | None,
        after: float = 0.1,
    ) -> str:
        return self._emit(
            "world.transition",
            name,
            after=after,
            resource=resource,
            revision_before=before,
            revision_after=after_revision,
            change=change,
            cause=cause,
        )

    def clock_advanced(self, name: str, seconds: float, *, cause: str | None) -> str:
        start = self.now
        self._advance(seconds)
        # The event itself takes no further time: it marks the moment the clock arrived.
        return self._emit("clock.advanced", name, after=0, **{"from": start, "to": self.now, "cause": cause})

    def checkpoint(self, name: str, *, world_revision: int, workspaces: dict[str, str], after: float = 0.1) -> str:
        clock = _iso(datetime.fromtimestamp((self._logical_ms + round(after * 1000)) / 1000, UTC))
        return self._emit(
            "checkpoint", name, after=after, world_revision=world_revision, workspaces=workspaces, clock=clock
        )

    def replay_scope(
        self,
        name: str,
        *,
        scenario: dict[str, Any],
        scope: str,
        recorded_between: list[str],
        synthetic: list[str],
        uncovered: list[Any],
        isolation: str,
        after: float = 0.0,
    ) -> str:
        return self._emit(
            "replay.scope",
            name,
            after=after,
            attempt=None,
            scenario=scenario,
            scope=scope,
            recorded_between=recorded_between,
            synthetic=synthetic,
            uncovered=uncovered,
            isolation=isolation,
        )

    # the account

    def claim(
        self,
        name: str,
        text: str,
        *,
        kind: str,
        supports: list[str],
        scope: list[str] | None = None,
        artifact: str | None = None,
        after: float = 1.0,
    ) -> str:
        fields: dict[str, Any] = {"text": text, "claim_kind": kind, "supports": supports}
        if scope is not None:
            fields["scope"] = scope
        if artifact is not None:
            fields["artifact_id"] = artifact
        return self._emit("account.claim", name, after=after, **fields)

    def run_state(self, name: str, state: str, *, reason: str | None, after: float = 0.5) -> str:
        return self._emit("run.state", name, after=after, state=state, reason=reason)

    def budget(self, name: str, resource: str, amount: float, *, after: float = 0.0, **split: Any) -> str:
        """A charge; for tokens, `split` may say how many were in and out (`input_tokens`, `output_tokens`) and of
        which model (`model`), as an OTLP or Inspect import's charges do (issue 38: the run's tokens and cost)."""
        return self._emit("budget.charged", name, after=after, resource=resource, amount=amount, **split)

    # the bundle

    def bundle(self, *, story: str, title: str, run: dict[str, Any], expected: set[str]) -> StoryBundle:
        manifest = {
            "format": v.BUNDLE_FORMAT,
            # The run's name in the console (DESIGN §10), the same line load_demo prints.
            "run": {**run, "title": title},
            "blobs": {digest: self.blob_meta[digest] for digest in sorted(self.blob_meta)},
        }
        blobs = {digest: self.blobs[digest] for digest in sorted(self.blobs)}
        return StoryBundle(
            story=story,
            title=title,
            manifest=manifest,
            events=self.events,
            blobs=blobs,
            expected_codes=frozenset(expected),
        )


def _run(
    run_id: str,
    *,
    task: tuple[str, str],
    environment: str,
    mode: str,
    scenario: dict[str, Any] | None,
    policy_revision: str,
    created_at: str,
    parent_run: str | None = None,
    isolation: str | None = None,
) -> dict[str, Any]:
    run: dict[str, Any] = {
        "id": run_id,
        "task": {"id": task[0], "revision": task[1]},
        "environment": environment,
        "mode": mode,
        "scenario": scenario,
        "model": dict(MODEL),
        "policy_revision": policy_revision,
        "created_at": created_at,
        "parent_run": parent_run,
    }
    if isolation is not None:
        run["isolation"] = isolation
    return run
