"""Building valid run-bundle events in tests, so each test says only what its case is about.

Every event an `EventLog` emits passes the importer's own `validate_event`, so a test can never pass on
an event the console would refuse. Digests of trees, blobs and contexts are derived from short labels
(`tree("t1")`) so that equal labels mean equal content.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from n17q_engine.bundle import validate_event
from n17q_engine.canonical import digest_json, evidence_set_digest

WALL = "2026-07-01T09:00:00Z"


def tree(label: str) -> str:
    return digest_json({"tree": label})


def run_object(*, run_id: str = "run-1", environment: str = "fixture", mode: str = "rerun", **extra: Any) -> dict:
    run = {
        "id": run_id,
        "task": {"id": "task-1", "revision": "r1"},
        "environment": environment,
        "mode": mode,
        "scenario": {"name": "review-request", "version": 1},
        "model": {"name": "test-model", "version": "1"},
        "policy_revision": "policy@1",
        "created_at": WALL,
        "parent_run": None,
    }
    run.update(extra)
    return run


# The fields of each kind a test does not care about.
DEFAULTS: dict[str, dict[str, Any]] = {
    "attempt.started": {"number": 1, "reason": "task", "parent_attempt_id": None},
    "attempt.ended": {"outcome": "completed"},
    "workspace.created": {
        "base_digest": tree("base"),
        "overlay_digest": tree("overlay"),
        "environment_revision": "env@1",
        "derived_from": None,
    },
    "workspace.changed": {"overlay_revision": 1, "cause": None},
    "workspace.lifecycle": {"state": "active", "cause": None},
    "artifact.created": {
        "digest": tree("artifact"),
        "media_type": "text/x-diff",
        "size": 10,
        "role": "patch",
        "files": ["src/adapter.py"],
    },
    "model.proposal": {"context_digest": tree("ctx"), "proposal": {"type": "message"}, "accepted": True},
    "tool.call": {
        "tool": "shell.run",
        "contract_revision": 1,
        "request": {"cmd": "pytest"},
        "request_digest": tree("req"),
        "proposal_id": None,
        "workspace_id": None,
    },
    "tool.result": {"origin": "fixture", "outcome": "ok", "blob": None, "absent": {}},
    "command.receipt": {
        "call_id": None,
        "command": "pytest",
        "suites": ["focused"],
        "environment_revision": "env@1",
        "completion": "completed",
        "exit_code": 0,
        "results": {"passed": 3, "failed": 0, "skipped": 0},
        "output_blob": None,
    },
    "evidence.observed": {"workspace_id": None, "tree_digest": None, "scope": "validation"},
    "evidence.admitted": {
        "policy_revision": "policy@1",
        "decision": "admitted",
        "compatibility": None,
        "rationale": None,
    },
    "evidence.superseded": {"cause": None},
    "waiver.granted": {"actor_role": "reviewer", "rationale": "known flaky integration test"},
    "policy.decision": {
        "policy_revision": "policy@1",
        "input_ids": [],
        "required": [],
        "outcome": "allow",
        "reasons": [],
    },
    "approval.recorded": {"decision": "approved", "actor_role": "reviewer", "origin": "simulated"},
    "human.input": {"actor_role": "reviewer", "visible_ids": [], "action": "look", "note": None},
    "effect.intent": {
        "effect_class": "mutation",
        "destination": "review-requests",
        "approval_id": None,
        "namespace": "replay:w1",
        "historical_intent": None,
    },
    "effect.execution": {
        "attempt_no": 1,
        "stage": "completed",
        "outcome": "acknowledged",
        "connection": "sim:review-requests",
    },
    "run.state": {"state": "completed", "reason": None},
    "account.claim": {"text": "validated", "claim_kind": "validation"},
    "budget.charged": {"resource": "tokens", "amount": 10},
}


class EventLog:
    """An append-only list of valid events with the run they belong to."""

    def __init__(self, **run: Any) -> None:
        self.run = run_object(**run)
        self.events: list[dict] = []
        self._n = 0

    def emit(self, kind: str, *, id: str | None = None, attempt: str | None = "a1", **fields: Any) -> str:
        self._n += 1
        event_id = id or f"e{self._n:03d}-{kind.split('.')[-1]}"
        event = {
            "seq": self._n,
            "id": event_id,
            "kind": kind,
            "at": {"logical": WALL, "wall": WALL},
            "attempt": attempt,
        }
        event.update(DEFAULTS.get(kind, {}))
        event.update(fields)
        self.events.append(validate_event(event, line=self._n))
        return event_id

    # Shorthands for the events lineage cases are made of.

    def attempt(self, attempt: str = "a1", **fields: Any) -> str:
        return self.emit("attempt.started", attempt=attempt, **fields)

    def workspace(
        self,
        workspace: str,
        *,
        parent: str | None = None,
        relation: str = "reconstruct",
        content_equal: bool = False,
        **fields: Any,
    ) -> str:
        derived = (
            None if parent is None else {"workspace_id": parent, "relation": relation, "content_equal": content_equal}
        )
        return self.emit("workspace.created", workspace_id=workspace, derived_from=derived, **fields)

    def change(self, workspace: str, tree_label: str, **fields: Any) -> str:
        return self.emit("workspace.changed", workspace_id=workspace, tree_digest=tree(tree_label), **fields)

    def lifecycle(self, workspace: str, state: str, **fields: Any) -> str:
        return self.emit("workspace.lifecycle", workspace_id=workspace, state=state, **fields)

    def receipt(
        self,
        workspace: str,
        tree_label: str,
        *,
        suites: tuple[str, ...] = ("focused",),
        completion: str = "completed",
        failed: int = 0,
        exit_code: int | None = 0,
        **fields: Any,
    ) -> str:
        fields.setdefault("results", {"passed": 3, "failed": failed, "skipped": 0})
        return self.emit(
            "command.receipt",
            workspace_id=workspace,
            pre_tree=tree(tree_label),
            # An unfinished command may leave it null (DESIGN §10): `post_tree=None`.
            post_tree=fields.pop("post_tree", tree(tree_label)),
            suites=list(suites),
            completion=completion,
            exit_code=exit_code,
            **fields,
        )

    def observe(self, source: str, workspace: str | None = None, tree_label: str | None = None, **fields: Any) -> str:
        return self.emit(
            "evidence.observed",
            source=source,
            workspace_id=workspace,
            tree_digest=tree(tree_label) if tree_label else None,
            **fields,
        )

    def admit(
        self,
        observation: str,
        purpose: str,
        artifact: str | None,
        workspace: str | None,
        tree_label: str | None,
        **fields: Any,
    ) -> str:
        values = {
            "observation_id": observation,
            "purpose": purpose,
            "artifact_id": artifact,
            "workspace_id": workspace,
            "tree_digest": tree(tree_label) if tree_label else None,
        }
        return self.emit("evidence.admitted", **{**values, **fields})

    def validation(
        self,
        workspace: str,
        tree_label: str,
        purpose: str,
        artifact: str | None,
        *,
        admit_as: tuple[str, str] | None = None,
        receipt: dict | None = None,
        admission: dict | None = None,
    ) -> tuple[str, str, str]:
        """A receipt, its observation and its admission for `purpose`: (receipt, observation, admission).

        `admit_as` = (workspace, tree label) the admission claims, when it differs from where the receipt ran.
        """
        suite = purpose.split(":", 1)[-1]
        receipt_id = self.receipt(workspace, tree_label, suites=(suite,), **(receipt or {}))
        observation_id = self.observe(receipt_id, workspace, tree_label, scope=purpose)
        ws, label = admit_as or (workspace, tree_label)
        admission_id = self.admit(observation_id, purpose, artifact, ws, label, **(admission or {}))
        return receipt_id, observation_id, admission_id

    def artifact(self, artifact: str, workspace: str | None, tree_label: str | None, **fields: Any) -> str:
        return self.emit(
            "artifact.created",
            artifact_id=artifact,
            workspace_id=workspace,
            tree_digest=tree(tree_label) if tree_label else None,
            **fields,
        )

    def intent(self, artifact: str | None, admissions: list[str], *, key: str = "key-1", **fields: Any) -> str:
        return self.emit("effect.intent", artifact_id=artifact, admission_ids=admissions, idempotency_key=key, **fields)

    def decision(self, subject: str, inputs: list[str], required: list[str], **fields: Any) -> str:
        return self.emit("policy.decision", subject=subject, input_ids=inputs, required=required, **fields)

    def approval(self, subject: str, admissions: list[str], **fields: Any) -> str:
        fields.setdefault("run", self.run["id"])
        fields.setdefault("environment", self.run["environment"])
        return self.emit(
            "approval.recorded", subject=subject, evidence_set_digest=evidence_set_digest(admissions), **fields
        )

    def execution(self, intent: str, **fields: Any) -> str:
        return self.emit("effect.execution", intent_id=intent, **fields)

    def claim(self, supports: list[str], **fields: Any) -> str:
        return self.emit("account.claim", supports=supports, **fields)


def synthetic_events(n: int, *, run_id: str = "run-bench") -> Iterator[dict]:
    """About `n` valid events of a long, clean run: many workspaces, validations, intents and claims.

    Events are generated, not validated one by one, so a benchmark measures the checker alone.
    """
    seq = 0

    def event(kind: str, **fields: Any) -> dict:
        nonlocal seq
        seq += 1
        base = {"seq": seq, "id": f"e{seq}", "kind": kind, "at": {"logical": WALL, "wall": WALL}, "attempt": "a1"}
        base.update(DEFAULTS.get(kind, {}))
        base.update(fields)
        return base

    yield event("attempt.started")
    round_no = 0
    while seq < n:
        round_no += 1
        ws, art = f"ws{round_no}", f"art{round_no}"
        t = tree(f"t{round_no}")
        yield event(
            "workspace.created",
            workspace_id=ws,
            derived_from={"workspace_id": f"ws{round_no - 1}", "relation": "reconstruct", "content_equal": False}
            if round_no > 1
            else None,
        )
        yield event("workspace.changed", workspace_id=ws, tree_digest=t)
        admissions = []
        for purpose in ("validation:focused", "validation:broad"):
            call = event("tool.call", workspace_id=ws)
            yield call
            receipt = event(
                "command.receipt",
                call_id=call["id"],
                workspace_id=ws,
                pre_tree=t,
                post_tree=t,
                suites=[purpose.split(":")[1]],
            )
            yield receipt
            yield event("tool.result", call_id=call["id"])
            observation = event(
                "evidence.observed", source=receipt["id"], workspace_id=ws, tree_digest=t, scope=purpose
            )
            yield observation
            admission = event(
                "evidence.admitted",
                observation_id=observation["id"],
                purpose=purpose,
                artifact_id=art,
                workspace_id=ws,
                tree_digest=t,
            )
            yield admission
            admissions.append(admission["id"])
        for _ in range(4):
            yield event("model.proposal")
            yield event("budget.charged")
        yield event("artifact.created", artifact_id=art, workspace_id=ws, tree_digest=t)
        intent_id = f"e{seq + 2}"
        approval = event(
            "approval.recorded",
            subject=intent_id,
            evidence_set_digest=evidence_set_digest(admissions),
            run=run_id,
            environment="fixture",
        )
        yield approval
        yield event(
            "effect.intent",
            artifact_id=art,
            admission_ids=admissions,
            approval_id=approval["id"],
            idempotency_key=f"key-{round_no}",
        )
        yield event(
            "policy.decision",
            subject=intent_id,
            input_ids=admissions,
            required=["validation:focused", "validation:broad"],
        )
        yield event("effect.execution", intent_id=intent_id)
        yield event("account.claim", supports=admissions)
        yield event("workspace.lifecycle", workspace_id=ws, state="superseded")
