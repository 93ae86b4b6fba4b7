"""Performing a step: the table from each `Action` to its handler, and the steps that are not calls or effects.

`_Steps.perform` hands an action to its handler (`_HANDLERS`, which covers every action a decider can yield:
tests/engine/test_hostile_text.py holds it to that). The handlers here are the steps that are neither a tool
call (calls.py) nor an effect (effects.py): attempts, workspaces, proposals (the decider's own turns are charged),
artifacts (never built from expired or absent bytes), evidence observed and admitted, supersessions and waivers,
human input (a counterfactual's varied choice), account claims (one resting on an excluded tool's answer is
unevaluated), recorded charges, checkpoints (the world revision, workspaces' trees and clock a branch can start
from), waits and stops.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, NoReturn

from .. import canonical
from ..agent.bridge import tool_catalogue
from ..agent.model import MODEL_TOOL
from ..deciders import (
    Action,
    Activate,
    Admit,
    CallTool,
    Charge,
    Checkpoint,
    Claim,
    CreateArtifact,
    CreateWorkspace,
    Decide,
    EndAttempt,
    Execute,
    HumanInput,
    Observe,
    Propose,
    RecordedApproval,
    StartAttempt,
    Stop,
    Supersede,
    Wait,
    Waive,
)
from ..world import WorldError
from .effects import _Effects
from .output import ReplayError, _expired_text
from .state import _Stopped

JSON_MEDIA = "application/json"

# A progress line every this many steps performed, in both loops (`loop._Engine.run`, `branching._restore`); what
# writes it, and why it counts steps: `loop.PROGRESS`.
PROGRESS_EVERY = 64


class _Steps(_Effects):
    """The steps that are neither tool calls nor effects, and `perform`: an action through its handler."""

    def perform(self, a: Action) -> None:
        handler = _HANDLERS.get(type(a))
        if handler is None:
            raise ReplayError(f"the engine cannot perform {type(a).__name__}")
        handler(self, a)
        if self.stopped:
            raise _Stopped()

    # ------------------------------------------------------------------ steps

    def _start_attempt(self, a: StartAttempt) -> None:
        self.attempt = a.attempt
        if a.parent is not None:
            self.recovery_attempts.add(a.attempt)
        self.open_attempts.append(a.attempt)
        self.objects.add(a.attempt)
        self.seen_since_proposal = []
        self.emit("attempt.started", ref=a.ref, number=a.number, reason=a.reason, parent_attempt_id=a.parent)

    def _end_attempt(self, a: EndAttempt) -> None:
        if self.attempt in self.open_attempts:
            self.open_attempts.remove(self.attempt)
        self.emit("attempt.ended", ref=a.ref, outcome=a.outcome, recorded_outcome=True)

    def _create_workspace(self, a: CreateWorkspace) -> None:
        snap = self.sc.workspaces.get(a.workspace)
        if snap is None:
            self._missing_world(f"workspace snapshot {a.workspace} is not in the scenario", a.workspace)
        try:
            t = self.world.apply(
                {
                    "resource": f"workspace:{a.workspace}",
                    "revision_before": None,
                    "revision_after": snap["overlay_revision"],
                    "change": {
                        "op": "create",
                        "state": {
                            "tree_digest": snap["tree_digest"],
                            "environment_revision": snap["environment_revision"],
                        },
                    },
                },
                None,
            )
        except WorldError as exc:
            self.stop("failed", f"workspace {a.workspace} could not be created: {exc}")
        fields: dict[str, Any] = {
            "workspace_id": a.workspace,
            "base_digest": snap["base_digest"],
            "overlay_digest": snap["overlay_digest"],
            "environment_revision": snap["environment_revision"],
            "derived_from": snap.get("derived_from"),
        }
        if "overlay_files" in snap:
            fields["overlay_files"] = snap["overlay_files"]
        self.objects.add(a.workspace)
        self.emit("workspace.created", ref=a.ref, **fields, world_revision=t["revision_after"])

    def _propose(self, a: Propose) -> None:
        context = canonical.digest_json(
            {
                "task": self._task_id,
                "attempt": self.attempt,
                "seen": self.seen_since_proposal,
            }
        )
        self.seen_since_proposal = []
        fields: dict[str, Any] = {"context_digest": context, "proposal": a.proposal, "accepted": a.accepted}
        fields["origin"] = "recorded" if a.ref is not None else f"scripted:{self.decider.name}"
        if a.recorded_context:
            fields["recorded_context_digest"] = a.recorded_context
        catalogue = self._tool_catalogue(a.ref)
        if catalogue is not None:
            fields["tools_blob"] = catalogue
        proposal = self.emit("model.proposal", ref=a.ref, **fields)
        if a.ref is None:  # the decider's own turn: the recording's turns are charged by its own budget events
            self._spend("turns", 1, origin="replay", cause=proposal, what=f"the decider's own proposal {proposal}")

    def _tool_catalogue(self, ref: str | None) -> str | None:
        """The blob of the tools offered at this proposal (seed 001: "The export omitted the offered tool catalogue"):
        the decider's own turn was offered the scenario's tools (the list the agent's MCP server serves), stored once
        as content and named by every such proposal; a recorded proposal keeps the catalogue its recording held, when
        the package carries its bytes, and names none otherwise (the original offer is not the scenario's)."""
        if ref is not None:
            recorded = (self.source.by_id.get(ref) or {}).get("tools_blob")
            data = self.package.source_blobs.get(recorded) if isinstance(recorded, str) else None
            return self.log.blob(data, JSON_MEDIA, "model-tools") if data is not None else None
        if self.catalogue_blob is None:
            tools = tool_catalogue(self.sc.contracts, list(self.sc.workspaces), MODEL_TOOL)
            offered = [
                {
                    "type": "function",
                    "function": {"name": t["name"], "description": t["description"], "parameters": t["input_schema"]},
                }
                for t in tools
            ]
            self.catalogue_blob = self.log.blob(canonical.canonical_json(offered), JSON_MEDIA, "model-tools")
        return self.catalogue_blob

    # artifacts and evidence

    def _create_artifact(self, a: CreateArtifact) -> None:
        tree = None
        if a.workspace is not None:
            held = self.world.get(f"workspace:{a.workspace}")
            if held is None:
                self._missing_world(
                    f"artifact {a.artifact} is built in workspace {a.workspace}, which does not exist", a.workspace
                )
            tree = held[1].get("tree_digest")
        data = self.package.source_blobs.get(a.blob)
        if data is None and a.blob in self.package.expired_blobs:
            # Expired material stops the replay precisely, like a missing fixture: never a stand-in for the bytes.
            self._missing_world(
                f"the bytes of artifact {a.artifact} ({a.blob}) {_expired_text(self.package.expired_blobs[a.blob])}",
                a.blob,
            )
        if data is None:
            self._missing_world(f"the bytes of artifact {a.artifact} ({a.blob}) are not in the package", a.blob)
        self.log.blob(data, a.media_type, a.role)
        self.objects.add(a.artifact)
        fields = {
            "artifact_id": a.artifact,
            "digest": a.blob,
            "media_type": a.media_type,
            "size": len(data),
            "role": a.role,
            "workspace_id": a.workspace,
            "tree_digest": tree,
            "files": a.files,
        }
        self.artifacts[a.artifact] = dict(fields)
        self.emit("artifact.created", ref=a.ref, **fields)

    def _observe(self, a: Observe) -> None:
        source_id = self.resolve(a.source)
        source = self.log.by_id.get(source_id or "")
        if source is None:
            self.stop("stopped", f"the replayed step observes {a.source}, which this replay never produced")
        workspace = source.get("workspace_id")
        tree = source.get("post_tree") if source["kind"] == "command.receipt" else None
        if source["kind"] == "tool.result":
            call = self.log.by_id.get(source.get("call_id") or "") or {}
            workspace = call.get("workspace_id")
            if workspace is not None:
                held = self.world.get(f"workspace:{workspace}")
                tree = held[1].get("tree_digest") if held else None
        observed = self.emit(
            "evidence.observed", ref=a.ref, source=source_id, workspace_id=workspace, tree_digest=tree, scope=a.scope
        )
        if source["id"] in self.unevaluated:
            self.unevaluated[observed] = self.unevaluated[source["id"]]

    def _admit(self, a: Admit) -> None:
        observation = self.log.by_id.get(self.resolve(a.observation) or "")
        if observation is None or observation["kind"] != "evidence.observed":
            self.stop("stopped", f"the replayed admission uses {a.observation}, which this replay never observed")
        fields = {
            "observation_id": observation["id"],
            "purpose": a.purpose,
            "artifact_id": a.artifact,
            "workspace_id": observation["workspace_id"],
            "tree_digest": observation["tree_digest"],
            "policy_revision": self.policy.revision,
            "decision": a.decision,
            "compatibility": a.compatibility,
            "rationale": a.rationale,
        }
        event_id = self.emit("evidence.admitted", ref=a.ref, **fields)
        self.admissions[event_id] = {"id": event_id, **fields}
        if observation["id"] in self.unevaluated:
            self.unevaluated[event_id] = self.unevaluated[observation["id"]]

    def _supersede(self, a: Supersede) -> None:
        self.emit("evidence.superseded", ref=a.ref, admission_id=self.resolve(a.admission), cause=self.resolve(a.cause))

    def _waive(self, a: Waive) -> None:
        self.emit(
            "waiver.granted",
            ref=a.ref,
            failure=self.resolve(a.failure),
            suite=a.suite,
            actor_role=a.actor_role,
            rationale=a.rationale,
            origin="recorded",
        )

    def _human(self, a: HumanInput) -> None:
        visible = [self.map.get(v, v) for v in a.visible if v in self.map or v in self.objects]
        unmapped = [v for v in a.visible if v not in self.map and v not in self.objects]
        fields: dict[str, Any] = {"action": a.action, "note": a.note, "origin": "recorded"}
        choice = self.human_choice
        if choice is not None and a.ref == choice["input"]:
            # The one variable of this counterfactual: the human chose otherwise. The note was the recorded
            # human's words about the recorded choice, so it is not carried over.
            fields = {
                "action": choice["choice"],
                "note": None,
                "origin": "varied",
                "recorded_action": a.action,
                "decides": f"the {a.actor_role}'s approval {choice['approval']}: {choice['decision']}",
            }
        self.emit(
            "human.input",
            ref=a.ref,
            actor_role=a.actor_role,
            visible_ids=visible,
            unmapped_visible=unmapped,
            **fields,
        )

    # account and the rest

    def _claim(self, a: Claim) -> None:
        supports = [self.map[s] for s in a.supports if s in self.map] + [s for s in a.supports if s in self.log.by_id]
        unmapped = [s for s in a.supports if s not in self.map and s not in self.log.by_id]
        fields: dict[str, Any] = {"text": a.text, "claim_kind": a.kind, "supports": supports}
        if a.scope is not None:
            fields["scope"] = a.scope
        if a.artifact is not None and a.artifact in self.objects:
            fields["artifact_id"] = a.artifact  # replay artifacts keep their recorded ids; one never built is not named
        fields["origin"] = "recorded" if a.ref is not None else f"scripted:{self.decider.name}"
        if unmapped:
            fields["unsupported_in_replay"] = unmapped
        excluded = sorted({self.unevaluated[s] for s in supports if s in self.unevaluated})
        if excluded:
            # A claim resting on an excluded tool's answer is neither supported nor contradicted by this replay.
            fields["unevaluated"] = {
                "tools": excluded,
                "supports": [s for s in supports if s in self.unevaluated],
                "reason": "rests on the answer of an excluded tool, which this scenario version does not evaluate",
            }
        self.emit("account.claim", ref=a.ref, **fields)

    def _charge(self, a: Charge) -> None:
        self._spend(a.resource, a.amount, origin="recorded", ref=a.ref, what=f"the recorded charge {a.ref}")

    def _checkpoint(self, ref: str | None) -> None:
        workspaces = {}
        for resource in self.world.resources():
            if resource.startswith("workspace:"):
                held = self.world.get(resource)
                if held and isinstance(held[1], dict):
                    workspaces[resource[len("workspace:") :]] = held[1].get("tree_digest")
        self.checkpoint_id = self.emit(
            "checkpoint",
            ref=ref,
            world_revision=self.world.revision,
            workspaces=workspaces,
            clock=self.now,
            fixtures=self.fixtures_in_force(),
        )

    def _checkpoint_action(self, a: Checkpoint) -> None:
        self._checkpoint(a.ref)

    def _wait(self, a: Wait) -> None:
        self.advance_to(self.clock.now + timedelta(seconds=a.seconds), None, a.reason)

    def _stop(self, a: Stop) -> NoReturn:
        self.stop(a.state, a.reason)


_HANDLERS: dict[type, Any] = {
    StartAttempt: _Steps._start_attempt,
    EndAttempt: _Steps._end_attempt,
    CreateWorkspace: _Steps._create_workspace,
    Propose: _Steps._propose,
    CallTool: _Steps._call,
    CreateArtifact: _Steps._create_artifact,
    Observe: _Steps._observe,
    Admit: _Steps._admit,
    Supersede: _Steps._supersede,
    Waive: _Steps._waive,
    HumanInput: _Steps._human,
    RecordedApproval: _Steps._recorded_approval,
    Decide: _Steps._decide,
    Activate: _Steps._activate,
    Execute: _Steps._execute,
    Claim: _Steps._claim,
    Charge: _Steps._charge,
    Checkpoint: _Steps._checkpoint_action,
    Wait: _Steps._wait,
    Stop: _Steps._stop,
}
