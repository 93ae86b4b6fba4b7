"""The demo's recorded runs: the three seed stories (shared/seeds/) told as run bundles.

Each story becomes one or two runs in `n17q.run-bundle/1` that the console imports on `load_demo`. They are
generated, not checked in, so that they can never drift from the vocabulary: every event is built by one of
the small `_Recorder` helpers below (one per event kind), the digests come from `canonical`, and the whole is
byte-for-byte deterministic (no clock, no randomness, no dict order that is not ours).

- `003_…` `run-003-review-request`: a review request opened on workspace two's artifact with workspace one's
  green focused test, while the broad suite's last word was one failure and a timeout.
- `001_…` `run-001-recorded`: the original live run; a reviewer narrows the audience, approves, one email goes out.
- `001_…` `run-001-naive-replay`: the old way of replaying it; messages fed back, the historical approval reused,
  a second real email.
- `000_…` `run-000-recorded`: a live research run; docs found, request req-7781 not found.
- `000_…` `run-000-fail-open-replay`: the fixture replay that failed open; the missing status fixture was
  fetched live.

Decisions worth knowing when reading the bundles:

- Times. `at.logical` is scenario time, `at.wall` is when the event was written. A live recording writes each
  event a moment after it happens, so wall trails logical by a constant latency. A fixture world runs faster
  than its scenario clock (the broad suite's 900 s timeout takes under a second of wall time, announced by a
  `clock.advanced`). A replay keeps the recorded logical times and has its own, later, wall times.
- Tree digests in the fixture world name a workspace's tree: they hash the workspace id with the content.
  Workspace two is content-equal to workspace one (`derived_from.content_equal` says so) and still has its own
  tree digest, as the 003 story has it ("it received a new workspace identity ... and tree digest"). Content
  equality is recorded, never inferred from a matching digest.
- Mutations that cross the boundary of the agent's world (a review request, an email) are recorded as
  `effect.intent` / `effect.execution`, not as `tool.call` / `tool.result`; reads and local edits are tool calls.
  A policy decision and an approval name the intent they judge as their `subject`; they come before the intent
  event, which then names the approval it relies on, so `subject` is the one forward reference in a run.
- Recorded live runs label their results `historical`, like the example bundle; the fixture world's are `fixture`.
- The naive replay of 001 reuses the original run's event ids: the old harness copied them, which is exactly why
  the historical approval's evidence-set digest still matched and only its origin gives it away (LIN005).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from n17q_engine import vocabulary as v
from n17q_engine.canonical import canonical_json, digest_bytes, digest_json, evidence_set_digest, request_digest

STORY_003 = "003_1dab681921caa907"
STORY_001 = "001_c6aee59ec1eb4bb8"
STORY_000 = "000_fbd054b208c5f58c"

MODEL = {"name": "n17q-demo-agent", "version": "2026-06"}

JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


@dataclass(frozen=True)
class StoryBundle:
    story: str  # seed file name without .txt, e.g. "003_1dab681921caa907"
    title: str  # one human line for the run list
    manifest: dict  # {"format": "n17q.run-bundle/1", "run": {...}, "blobs": {digest: {media_type,size,role,retention}}}
    events: list[dict]  # in append order, seq strictly increasing
    blobs: dict[str, bytes]  # digest -> bytes (digest = canonical.digest_bytes(bytes))
    expected_codes: frozenset[str]  # the LIN codes this run must produce (documentation + test oracle)


def demo_bundles() -> list[StoryBundle]:
    """Every demo run, the centre of the demo first and every parent before its replays."""
    return [
        _review_request_run(),
        _email_run(naive_replay=False),
        _email_run(naive_replay=True),
        _research_run(fail_open=False),
        _research_run(fail_open=True),
    ]


def write_bundle(bundle: StoryBundle, directory: Path) -> Path:
    """Write `bundle` as a bundle directory (manifest.json, events.jsonl, blobs/sha256/<hex>) and return it.

    The directory must be new or empty: a stray blob from an earlier write would make the bundle invalid.
    """
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory} is not empty; a bundle is written into a new directory")
    blob_dir = directory / "blobs" / "sha256"
    blob_dir.mkdir(parents=True, exist_ok=True)
    manifest = json.dumps(bundle.manifest, indent=1, ensure_ascii=False) + "\n"
    (directory / "manifest.json").write_bytes(manifest.encode("utf-8"))
    lines = "".join(json.dumps(event, ensure_ascii=False) + "\n" for event in bundle.events)
    (directory / "events.jsonl").write_bytes(lines.encode("utf-8"))
    for digest, data in bundle.blobs.items():
        (blob_dir / digest.removeprefix("sha256:")).write_bytes(data)
    return directory


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
        after: float = 1.0,
    ) -> str:
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

    def budget(self, name: str, resource: str, amount: float, *, after: float = 0.0) -> str:
        return self._emit("budget.charged", name, after=after, resource=resource, amount=amount)

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


# --- 003: evidence from workspace one authorizing workspace two's artifact ------------------------------------

_PATCH = """\
--- a/src/adapter.py
+++ b/src/adapter.py
@@ -41,9 +41,12 @@ class LedgerAdapter:
-    def fetch_page(self, cursor=None):
-        response = self.client.list_entries(after=cursor)
-        return response["entries"], response.get("next")
+    def fetch_page(self, cursor: str | None = None) -> tuple[list[dict], str | None]:
+        # ledger-client 3.x pages with an opaque cursor object instead of a string.
+        page = self.client.entries.list(cursor=Cursor.parse(cursor) if cursor else None)
+        next_cursor = page.next_cursor.encode() if page.next_cursor else None
+        return [entry.to_dict() for entry in page.items], next_cursor
--- a/tests/test_adapter.py
+++ b/tests/test_adapter.py
@@ -12,6 +12,14 @@ def test_fetch_page_returns_entries(fake_ledger):
+def test_fetch_page_encodes_next_cursor(fake_ledger):
+    fake_ledger.add_page(["e1", "e2"], next_cursor="c-17")
+    entries, cursor = LedgerAdapter(fake_ledger).fetch_page()
+    assert [e["id"] for e in entries] == ["e1", "e2"]
+    assert cursor == "c-17"
"""

_NOTES_OVERLAY = """\
--- a/docs/NOTES.md
+++ b/docs/NOTES.md
@@ -1,2 +1,3 @@
 # Notes
+- ask ops whether the ledger keeps cursors for 24 h or 7 days (local reminder, not for review)
"""

_FOCUSED_OUTPUT = """\
$ pytest -q tests/test_adapter.py
..............                                                           [100%]
14 passed in 1.92s
"""

_BROAD_OUTPUT = """\
$ pytest -q tests
[setup] starting ledger fixture service ... ok
[setup] loading 3 fixture accounts ... ok
tests/unit ................................................................ 148 passed
tests/contract .......................................................... 64 passed
tests/integration/test_review_flow.py::test_adapter_roundtrip_preserves_cursor FAILED
    AssertionError: expected next cursor 'c-17' after a round trip, got None
tests/integration/test_settlement.py ...
[harness] time budget of 900 s exceeded; sent SIGTERM to pytest (pid 4121)
[harness] no exit status observed; child 4133 (ledger fixture service) still listed, state unknown
"""


def _review_request_run() -> StoryBundle:
    run_id = "run-003-review-request"
    policy = "review-policy@7"
    env_rev = "sandbox-py3.12@4"
    scenario = {"name": "coding-review-request", "version": 1}
    focused, broad = "validation:focused", "validation:broad"
    code_files = ["src/adapter.py", "tests/test_adapter.py"]
    overlay_files = ["docs/NOTES.md"]

    r = _Recorder(
        "003",
        task="task-ledger-migration",
        logical="2026-05-04T09:00:00Z",
        wall="2026-07-14T13:05:00Z",
        wall_ratio=0.02,
        wall_overhead=0.04,
    )
    base = digest_json({"repository": "fixture://acme/ledger-adapter", "commit": "9c41e07"})
    overlay = digest_bytes(_NOTES_OVERLAY.encode("utf-8"))
    patch = _PATCH.encode("utf-8")
    patch_digest = digest_bytes(patch)

    def tree(workspace: str) -> str:
        return digest_json({"workspace": workspace, "base": base, "overlay": overlay, "patch": patch_digest})

    t1, t2 = tree("ws-1"), tree("ws-2")
    intent_id = r.eid("intent-review-request")

    # Attempt a1: read, patch, focused suite green, broad suite fails once and times out.
    r.attempt_started("a1-start", "a1", number=1, reason="task: migrate LedgerAdapter to ledger-client 3.x")
    r.workspace_created(
        "ws-1-created",
        "ws-1",
        base_digest=base,
        overlay_digest=overlay,
        environment_revision=env_rev,
        derived_from=None,
        overlay_files=overlay_files,
    )
    p = r.proposal(
        "a1-read-adapter",
        {"type": "tool_call", "tool": "repo.read_file", "path": "src/adapter.py"},
        visible=[r.eid("ws-1-created")],
        after=3,
    )
    c = r.tool_call(
        "a1-call-read-adapter", "repo.read_file", 1, {"path": "src/adapter.py"}, proposal=p, workspace="ws-1"
    )
    r.tool_result(
        "a1-res-read-adapter",
        c,
        origin="fixture",
        outcome="ok",
        blob=r.json_blob(
            {"path": "src/adapter.py", "lines": 118, "excerpt": "def fetch_page(self, cursor=None):"},
            role="tool-output",
        ),
    )
    p = r.proposal(
        "a1-read-migration",
        {"type": "tool_call", "tool": "repo.read_file", "path": "docs/MIGRATION.md"},
        visible=[r.eid("a1-res-read-adapter")],
        after=4,
    )
    c = r.tool_call(
        "a1-call-read-migration", "repo.read_file", 1, {"path": "docs/MIGRATION.md"}, proposal=p, workspace="ws-1"
    )
    r.tool_result(
        "a1-res-read-migration",
        c,
        origin="fixture",
        outcome="ok",
        blob=r.json_blob(
            {
                "path": "docs/MIGRATION.md",
                "lines": 40,
                "excerpt": "ledger-client 2.x: cursors are plain strings (outdated: 3.x uses Cursor objects)",
            },
            role="tool-output",
        ),
    )
    patch_request = {"patch_digest": patch_digest, "paths": code_files}
    p = r.proposal(
        "a1-apply-patch",
        {"type": "tool_call", "tool": "repo.apply_patch", "paths": code_files},
        visible=[r.eid("a1-res-read-adapter"), r.eid("a1-res-read-migration")],
        after=25,
    )
    c = r.tool_call("a1-call-apply-patch", "repo.apply_patch", 1, patch_request, proposal=p, workspace="ws-1")
    r.tool_result(
        "a1-res-apply-patch",
        c,
        origin="fixture",
        outcome="ok",
        blob=r.json_blob({"applied": True, "files": code_files, "hunks": 2}, role="tool-output"),
    )
    r.workspace_changed("ws-1-patched", "ws-1", overlay_revision=2, tree_digest=t1, cause=c)
    r.budget("a1-tokens", "tokens", 18400)

    p = r.proposal(
        "a1-run-focused",
        {"type": "tool_call", "tool": "shell.run", "argv": ["pytest", "-q", "tests/test_adapter.py"]},
        visible=[r.eid("ws-1-patched")],
        after=6,
    )
    c = r.tool_call(
        "a1-call-focused",
        "shell.run",
        1,
        {"argv": ["pytest", "-q", "tests/test_adapter.py"], "timeout_s": 300},
        proposal=p,
        workspace="ws-1",
    )
    focused_receipt = r.command_receipt(
        "focused-receipt",
        c,
        "ws-1",
        command="pytest -q tests/test_adapter.py",
        suites=["adapter"],
        pre_tree=t1,
        post_tree=t1,
        environment_revision=env_rev,
        completion="completed",
        exit_code=0,
        results={"passed": 14, "failed": 0, "skipped": 0},
        output=_FOCUSED_OUTPUT,
        after=2,
    )
    focused_obs = r.observed("focused-observed", focused_receipt, workspace="ws-1", tree_digest=t1, scope=[focused])
    r.checkpoint("a1-checkpoint", world_revision=0, workspaces={"ws-1": t1})

    p = r.proposal(
        "a1-run-broad",
        {"type": "tool_call", "tool": "shell.run", "argv": ["pytest", "-q", "tests"]},
        visible=[focused_receipt],
        after=5,
    )
    c = r.tool_call(
        "a1-call-broad",
        "shell.run",
        1,
        {"argv": ["pytest", "-q", "tests"], "timeout_s": 900},
        proposal=p,
        workspace="ws-1",
    )
    r.clock_advanced("a1-clock-timeout", 900, cause=c)
    broad_receipt = r.command_receipt(
        "broad-receipt",
        c,
        "ws-1",
        command="pytest -q tests",
        suites=["unit", "contract", "integration"],
        pre_tree=t1,
        # Termination unknown: nobody knows the tree the surviving process left behind (DESIGN §10).
        post_tree=None,
        environment_revision=env_rev,
        completion="termination_unknown",
        exit_code=None,
        results={
            "passed": 212,
            "failed": 1,
            "skipped": 0,
            "failing_suites": ["integration"],
            "failing_tests": ["tests/integration/test_review_flow.py::test_adapter_roundtrip_preserves_cursor"],
        },
        output=_BROAD_OUTPUT,
        after=0.2,
    )
    r.budget("a1-compute", "compute_s", 912)
    broad_obs = r.observed("broad-observed", broad_receipt, workspace="ws-1", tree_digest=t1, scope=[broad])
    # What the orchestrator of the story did with the timed-out run: kept it as diagnostics, never as validation.
    r.admitted(
        "broad-admitted-diagnosis",
        broad_obs,
        purpose="diagnosis",
        artifact=None,
        workspace="ws-1",
        tree_digest=t1,
        policy_revision=policy,
        rationale="partial output of a timed-out run: kept for diagnosis, not a validation result",
    )
    r.workspace_lifecycle("ws-1-uncertain", "ws-1", state="uncertain", cause=broad_receipt)
    r.attempt_ended("a1-end", outcome="timeout: broad suite exceeded its budget, termination unknown")

    # Attempt a2: a fresh workspace from the checkpoint, the patch reapplied, the request opened.
    r.attempt_started("a2-start", "a2", number=2, reason="recovery after timeout", parent="a1", after=2)
    r.workspace_created(
        "ws-2-created",
        "ws-2",
        base_digest=base,
        overlay_digest=overlay,
        environment_revision=env_rev,
        derived_from={"workspace_id": "ws-1", "relation": "reconstruct", "content_equal": True},
        overlay_files=overlay_files,
    )
    p = r.proposal(
        "a2-apply-patch",
        {"type": "tool_call", "tool": "repo.apply_patch", "paths": code_files},
        visible=[r.eid("a1-checkpoint"), r.eid("ws-2-created")],
        after=4,
    )
    c = r.tool_call("a2-call-apply-patch", "repo.apply_patch", 1, patch_request, proposal=p, workspace="ws-2")
    r.tool_result(
        "a2-res-apply-patch",
        c,
        origin="fixture",
        outcome="ok",
        blob=r.json_blob({"applied": True, "files": code_files, "hunks": 2}, role="tool-output"),
    )
    r.workspace_changed("ws-2-patched", "ws-2", overlay_revision=2, tree_digest=t2, cause=c)
    r.artifact_created(
        "artifact-created",
        "art-2",
        data=patch,
        media_type="text/x-diff",
        role="branch-artifact",
        workspace="ws-2",
        tree_digest=t2,
        files=code_files,
    )
    r.budget("a2-artifacts", "artifacts", 1)
    # The broken edge: attempt a1's focused result admitted for workspace two's artifact, with no compatibility rule.
    focused_adm = r.admitted(
        "focused-admitted",
        focused_obs,
        purpose=focused,
        artifact="art-2",
        workspace="ws-1",
        tree_digest=t1,
        policy_revision=policy,
        rationale="carried forward from attempt a1: focused suite green on the same patch",
    )

    p = r.proposal(
        "a2-open-request",
        {
            "type": "tool_call",
            "tool": "review.create_request",
            "title": "Migrate LedgerAdapter to ledger-client 3.x",
            "artifact": "art-2",
        },
        visible=[r.eid("artifact-created"), focused_adm],
        after=8,
    )
    decision = r.policy(
        "policy-allow",
        policy_revision=policy,
        subject=intent_id,
        inputs=[focused_adm],
        required=[focused, broad],
        outcome="allow",
        reasons=["validation:focused admitted (14 passed)", "validation:broad: no failing receipt found for art-2"],
    )
    r.human_input(
        "reviewer-views",
        actor_role="reviewer",
        visible=["art-2", focused_adm, decision],
        action="approve",
        note="Patch reads well and the checks are green.",
        after=40,
    )
    approval = r.approval(
        "approval",
        subject=intent_id,
        admission_ids=[focused_adm],
        decision="approved",
        actor_role="reviewer",
        origin="human",
        run=run_id,
        environment="fixture",
        after=0.5,
    )
    intent = r.intent(
        "intent-review-request",
        effect_class="mutation",
        destination="review-service:repo/main",
        artifact="art-2",
        admission_ids=[focused_adm],
        approval=approval,
        idempotency_key="review-request:art-2:main",
        namespace="replay:coding-review-request-w1",
    )
    assert intent == intent_id
    execution = r.execution("execution", intent, connection="fixture:review-service")
    r.world_transition(
        "review-request-opened",
        "review-service:repo/main/requests/1",
        before=None,
        after_revision=1,
        change={
            "op": "create",
            "title": "Migrate LedgerAdapter to ledger-client 3.x",
            "artifact_digest": patch_digest,
            "target": "main",
        },
        cause=execution,
    )
    r.budget("a2-tokens", "tokens", 6100)
    r.claim(
        "claim",
        "The patch passes all tests and the review request is ready.",
        kind="validation",
        supports=[focused_receipt],
        scope=[focused, broad],
        artifact="art-2",
        after=5,
    )
    r.run_state("run-completed", "completed", reason="review request opened")
    r.attempt_ended("a2-end", outcome="completed")

    run = _run(
        run_id,
        task=("task-ledger-migration", "r3"),
        environment="fixture",
        mode="recorded",
        scenario=scenario,
        policy_revision=policy,
        created_at="2026-07-14T13:05:00Z",
    )
    return r.bundle(
        story=STORY_003,
        title="Review request opened on workspace two's artifact with workspace one's green test",
        run=run,
        # LIN001: workspace one's focused admission authorizes workspace two's artifact.
        # LIN013: validation:broad is required and nothing was admitted for it.
        # LIN003: the latest broad receipt on the artifact's lineage failed and nobody waived it.
        # LIN008: "passes all tests" rests on the focused receipt alone; the broad receipt contradicts it.
        expected={"LIN001", "LIN003", "LIN008", "LIN013"},
    )


# --- 001: the duplicate email on replay ----------------------------------------------------------------------

_MESSAGE = """\
From: Acme Operations <ops@acme.example>
To: beta-customers@lists.acme.example
Subject: Scheduled maintenance on 14 June, 02:00-03:00 UTC

Hello,

The billing API will be read-only on 14 June between 02:00 and 03:00 UTC while we migrate its database.
Requests made in that window will be queued and applied afterwards. No action is needed on your side.

Acme Operations
"""


def _email_run(*, naive_replay: bool) -> StoryBundle:
    """The original live run, or (naive_replay) the old harness feeding its messages back in a sandbox.

    Both come from this one function because the naive replay *was* the original run played again: same
    proposals, same event ids, the recorded tool results fed back as `historical`. What differs is what the old
    harness changed without saying so: it skipped the reviewer's turn, copied the historical approval in as
    authority, and let the send reach the live provider.
    """
    original_id = "run-001-recorded"
    run_id = "run-001-naive-replay" if naive_replay else original_id
    policy = "mail-policy@3"
    purpose = "review:audience"
    broad_list = "all-customers@lists.acme.example"
    narrow_list = "beta-customers@lists.acme.example"
    if naive_replay:
        r = _Recorder(
            "001",
            task="task-maintenance-notice",
            logical="2026-06-10T14:00:00Z",
            wall="2026-09-02T08:41:00Z",
            wall_ratio=0.01,
            wall_overhead=0.03,
        )
    else:
        r = _Recorder(
            "001", task="task-maintenance-notice", logical="2026-06-10T14:00:00Z", wall="2026-06-10T14:00:00.400Z"
        )
    intent_id = r.eid("intent-send")

    r.attempt_started(
        "a1-start",
        "a1",
        number=1,
        reason="replay of run-001-recorded: recorded messages fed back"
        if naive_replay
        else "task: announce the billing API maintenance window",
    )
    p = r.proposal("propose-draft", {"type": "tool_call", "tool": "email.draft_create"}, visible=[], after=4)
    create = {
        "to": broad_list,
        "template": "maintenance-notice",
        "subject": "Scheduled maintenance on 14 June",
        "window": "2026-06-14T01:00Z/2026-06-14T02:00Z",
    }
    c = r.tool_call("call-draft-create", "email.draft_create", 3, create, proposal=p)
    r.tool_result(
        "res-draft-create",
        c,
        origin="historical",
        outcome="ok",
        # The first draft's overly broad audience is a recipient list: kept 7 days ("sensitive"), so the demo's
        # load has removed its bytes and the run page shows the expiry with its deletion record (docs/retention.md).
        blob=r.json_blob(
            {"draft_id": "dr-5501", "revision": 1, "to": broad_list}, role="tool-output", retention="sensitive"
        ),
    )
    if not naive_replay:
        r.world_transition(
            "draft-created",
            "mail:draft/dr-5501",
            before=None,
            after_revision=1,
            change={"op": "create", "to": broad_list},
            cause=c,
        )
    else:
        r.skip(0.1)

    p = r.proposal(
        "propose-draft-fix",
        {"type": "tool_call", "tool": "email.draft_update"},
        visible=[r.eid("res-draft-create")],
        after=6,
    )
    update = {"draft_id": "dr-5501", "base_revision": 1, "set": {"window": "2026-06-14T02:00Z/2026-06-14T03:00Z"}}
    c = r.tool_call("call-draft-update", "email.draft_update", 3, update, proposal=p)
    r.tool_result(
        "res-draft-update",
        c,
        origin="historical",
        outcome="ok",
        blob=r.json_blob({"draft_id": "dr-5501", "revision": 2, "to": broad_list}, role="tool-output"),
    )
    if not naive_replay:
        r.world_transition(
            "draft-updated",
            "mail:draft/dr-5501",
            before=1,
            after_revision=2,
            change={"op": "update", "set": ["window"]},
            cause=c,
        )
    else:
        r.skip(0.1)

    r.proposal(
        "propose-send",
        {"type": "tool_call", "tool": "email.send", "draft_id": "dr-5501"},
        visible=[r.eid("res-draft-update")],
        after=3,
    )
    hold = r.policy(
        "policy-needs-approval",
        policy_revision=policy,
        subject=intent_id,
        inputs=[],
        required=[purpose],
        outcome="needs_approval",
        reasons=["a send to a mailing list needs a reviewer's approval"],
    )
    if naive_replay:
        # The old harness replayed automated events only: the reviewer's turn was not played back.
        r.skip(95)
    else:
        r.human_input(
            "reviewer-narrows",
            actor_role="reviewer",
            visible=[r.eid("res-draft-update"), hold],
            action="reject_audience",
            note=f"{broad_list} is far too broad for a billing notice; send it to {narrow_list} only.",
            after=95,
        )
    narrow = {"draft_id": "dr-5501", "base_revision": 2, "set": {"to": narrow_list}}
    # The narrowing was the reviewer's instruction, not a model proposal; the call names none.
    c = r.tool_call("call-draft-narrow", "email.draft_update", 3, narrow, proposal=None, after=2)
    r.tool_result(
        "res-draft-narrow",
        c,
        origin="historical",
        outcome="ok",
        blob=r.json_blob({"draft_id": "dr-5501", "revision": 3, "to": narrow_list}, role="tool-output"),
    )
    if not naive_replay:
        r.world_transition(
            "draft-narrowed",
            "mail:draft/dr-5501",
            before=2,
            after_revision=3,
            change={"op": "update", "set": ["to"]},
            cause=c,
        )
    else:
        r.skip(0.1)
    c = r.tool_call("call-draft-get", "email.draft_get", 3, {"draft_id": "dr-5501"}, proposal=None)
    read = r.tool_result(
        "res-draft-get",
        c,
        origin="historical",
        outcome="ok",
        blob=r.json_blob(
            {"draft_id": "dr-5501", "revision": 3, "to": narrow_list, "recipients": 412}, role="tool-output"
        ),
    )
    r.artifact_created(
        "message-rendered",
        "art-message",
        data=_MESSAGE.encode("utf-8"),
        media_type="message/rfc822",
        role="email-message",
        workspace=None,
        tree_digest=None,
        files=[],
    )
    obs = r.observed("audience-observed", read, workspace=None, tree_digest=None, scope=[purpose])
    adm = r.admitted(
        "audience-admitted",
        obs,
        purpose=purpose,
        artifact="art-message",
        workspace=None,
        tree_digest=None,
        policy_revision=policy,
        rationale="draft revision 3 addresses the 412 recipients the reviewer chose",
    )
    if naive_replay:
        approval = r.approval(
            "approval",
            subject=intent_id,
            admission_ids=[adm],
            decision="approved",
            actor_role="reviewer",
            origin="historical",
            run=original_id,
            environment="live",
            after=30,
        )
    else:
        approval = r.approval(
            "approval",
            subject=intent_id,
            admission_ids=[adm],
            decision="approved",
            actor_role="reviewer",
            origin="human",
            run=run_id,
            environment="live",
            after=30,
        )
    r.policy(
        "policy-allow",
        policy_revision=policy,
        subject=intent_id,
        inputs=[adm],
        required=[purpose],
        outcome="allow",
        reasons=["review:audience admitted", f"approved by a reviewer ({approval})"],
    )
    intent = r.intent(
        "intent-send",
        effect_class="mutation",
        destination=f"mailbox:{narrow_list}",
        artifact="art-message",
        admission_ids=[adm],
        approval=approval,
        idempotency_key="send:dr-5501:r3",
        namespace="live",
    )
    assert intent == intent_id
    execution = r.execution("execution", intent, connection="smtp-provider", after=1.5)
    if naive_replay:
        r.world_transition(
            "mailbox-delivered",
            f"mailbox:{narrow_list}",
            before=42,
            after_revision=43,
            change={
                "op": "deliver",
                "message_id": "<m-7730@acme.example>",
                "recipients": 412,
                "delivered_at": "2026-09-02T08:41:03Z",
                "duplicate_of": "<m-5501@acme.example>",
            },
            cause=execution,
        )
        r.claim(
            "claim-sent",
            f"Sent the maintenance notice once to {narrow_list} (412 recipients).",
            kind="effect",
            supports=[execution],
        )
        r.run_state("run-completed", "completed", reason="replay finished")
    else:
        r.world_transition(
            "mailbox-delivered",
            f"mailbox:{narrow_list}",
            before=41,
            after_revision=42,
            change={"op": "deliver", "message_id": "<m-5501@acme.example>", "recipients": 412},
            cause=execution,
        )
        r.claim(
            "claim-sent",
            f"Sent the maintenance notice once to {narrow_list} (412 recipients).",
            kind="effect",
            supports=[execution],
        )
        r.run_state("run-completed", "completed", reason="notice sent")
    r.attempt_ended("a1-end", outcome="completed")

    if naive_replay:
        run = _run(
            run_id,
            task=("task-maintenance-notice", "r1"),
            environment="sandbox",
            mode="rerun",
            scenario=None,
            policy_revision=policy,
            created_at="2026-09-02T08:41:00Z",
            parent_run=original_id,
            isolation="degraded",
        )
        return r.bundle(
            story=STORY_001,
            title="Naive replay re-sent the notice through the live provider on the historical approval",
            run=run,
            # LIN005: the approval is the original run's, live environment, used as authority here.
            # LIN007: a sandbox run's intent in namespace live, executed on the live smtp-provider connection.
            expected={"LIN005", "LIN007"},
        )
    run = _run(
        run_id,
        task=("task-maintenance-notice", "r1"),
        environment="live",
        mode="recorded",
        scenario=None,
        policy_revision=policy,
        created_at="2026-06-10T14:00:00Z",
    )
    return r.bundle(
        story=STORY_001,
        title="Maintenance notice sent once to the narrowed beta list after the reviewer's approval",
        run=run,
        expected=set(),
    )


# --- 000: the fixture that failed open -----------------------------------------------------------------------

_DOCS_HITS = {
    "hits": [
        {"title": "Rotating signing keys", "url": "https://docs.acme.example/keys/rotate", "revision": "2026-06-28"}
    ]
}


def _research_run(*, fail_open: bool) -> StoryBundle:
    original_id = "run-000-recorded"
    run_id = "run-000-fail-open-replay" if fail_open else original_id
    policy = "research-policy@1"
    scenario = {"name": "docs-research", "version": 1}
    if fail_open:
        r = _Recorder(
            "000r",
            task="task-key-rotation",
            logical="2026-07-01T09:00:00Z",
            wall="2026-09-15T11:30:00Z",
            wall_ratio=0.01,
            wall_overhead=0.02,
        )
        r.replay_scope(
            "replay-scope",
            scenario=scenario,
            scope="scenario",
            recorded_between=["2026-07-01T09:00:00Z", "2026-07-01T09:00:09Z"],
            synthetic=[],
            uncovered=[],
            isolation="degraded",
        )
    else:
        r = _Recorder("000", task="task-key-rotation", logical="2026-07-01T09:00:00Z", wall="2026-07-01T09:00:00.300Z")

    r.attempt_started(
        "a1-start",
        "a1",
        number=1,
        reason="rerun of run-000-recorded with its recorded decisions"
        if fail_open
        else "task: how are signing keys rotated, and is request req-7781 open?",
    )
    p = r.proposal("propose-search", {"type": "tool_call", "tool": "docs.search"}, visible=[])
    c = r.tool_call(
        "call-search",
        "docs.search",
        1,
        {"query": "rotate signing keys", "corpus": "public-docs", "limit": 5},
        proposal=p,
    )
    search = r.tool_result(
        "res-search",
        c,
        origin="fixture" if fail_open else "historical",
        outcome="ok",
        blob=r.json_blob(_DOCS_HITS, role="tool-output"),
    )
    p = r.proposal(
        "propose-status", {"type": "tool_call", "tool": "status.lookup", "request_id": "req-7781"}, visible=[search]
    )
    c = r.tool_call("call-status", "status.lookup", 2, {"request_id": "req-7781"}, proposal=p)
    if fail_open:
        # No fixture held this request; the adapter delegated it to its live client and got today's answer.
        status = r.tool_result(
            "res-status",
            c,
            origin="live",
            outcome="ok",
            blob=r.json_blob(
                {"request_id": "req-7781", "status": "open", "owner": "team-keys", "opened_at": "2026-08-20T10:12:00Z"},
                role="tool-output",
            ),
        )
        text = "The docs describe key rotation; request req-7781 is open and owned by team-keys."
    else:
        status = r.tool_result(
            "res-status",
            c,
            origin="historical",
            outcome="not_found",
            blob=r.json_blob(
                {"request_id": "req-7781", "status": "not_found", "consistency_window_s": 30}, role="tool-output"
            ),
            absent={"$.owner": "not_applicable"},
        )
        text = "The docs describe key rotation; request req-7781 does not exist yet."
    r.claim("claim", text, kind="other", supports=[search, status])
    r.run_state("run-completed", "completed", reason="answered")
    r.attempt_ended("a1-end", outcome="completed")

    if fail_open:
        run = _run(
            run_id,
            task=("task-key-rotation", "r1"),
            environment="fixture",
            mode="rerun",
            scenario=scenario,
            policy_revision=policy,
            created_at="2026-09-15T11:30:00Z",
            parent_run=original_id,
            isolation="degraded",
        )
        return r.bundle(
            story=STORY_000,
            title="Fixture replay that failed open: the status lookup went live and found req-7781",
            run=run,
            # LIN014: a live observation inside a fixture rerun.
            expected={"LIN014"},
        )
    run = _run(
        run_id,
        task=("task-key-rotation", "r1"),
        environment="live",
        mode="recorded",
        scenario=scenario,
        policy_revision=policy,
        created_at="2026-07-01T09:00:00Z",
    )
    return r.bundle(
        story=STORY_000,
        title="Key-rotation research: docs found, request req-7781 not found",
        run=run,
        expected=set(),
    )
