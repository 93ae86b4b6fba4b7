import secrets
import tempfile
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from accounts.audit import audit_record
from accounts.cli import JsonCommand
from accounts.roles import ADMIN, ROLES
from fixtures_review.scenarios import scenario_import
from n17q_demo import seed_scenarios, stories
from n17q_engine.assessments import ASSESSMENT_KIND
from runs.assessments import assessment_record
from runs.importer import run_import_from_path
from runs.models import Run
from runs.retention import retention_sweep


class Command(JsonCommand):
    help = "Load the demo: one user per role and the recorded runs that tell the three seed stories."

    def run(self, **options: Any) -> dict[str, Any]:
        users = [self._user(role) for role in ROLES]
        runs = []
        with tempfile.TemporaryDirectory(prefix="n17q-demo-") as tmp:
            for story in stories.demo_bundles():
                run_id = story.manifest["run"]["id"]
                if not Run.objects.filter(run_id=run_id).exists():
                    folder = stories.write_bundle(story, Path(tmp) / run_id)
                    run_import_from_path(folder)
                runs.append({"id": run_id, "story": story.story, "title": story.title})
        scenarios = []
        for package in seed_scenarios.seed_packages():
            version, _created = scenario_import(package, source="demo")
            scenarios.append({"scenario": version.ref, "digest": version.digest})
        assessed = self._assessments()
        connections = self._connections()
        staged = self._staged()
        # What the retention sweep would remove at its next beat, removed now: the demo shows an expiry disclosure
        # (story 001's first draft, class "sensitive") from its first page view. Idempotent like the task.
        expired = retention_sweep(by="demo").removed
        refused = self._refused()
        # Loading the demo sets fresh passwords on the role accounts: worth a line in the audit log.
        audit_record(
            actor=None,
            action="demo.load",
            target="demo",
            detail={"passwords_reset_for": [u["username"] for u in users], "runs": [r["id"] for r in runs]},
        )
        return {
            "runs": runs,
            "users": users,
            "scenarios": scenarios,
            "staged": staged,
            "connections": connections,
            "refused": refused,
            "expired": expired,
            "assessed": assessed,
        }

    def _connections(self) -> list[dict[str, Any]]:
        """The demo's reviewed connections: proposed by the admin, approved by the reviewer (four eyes), once."""
        from fixtures_review.connections import connection_approve, connection_propose
        from fixtures_review.models import Connection
        from n17q_demo.captures import DEMO_CONNECTIONS

        users = get_user_model().objects
        out = []
        for spec in DEMO_CONNECTIONS:
            connection = Connection.objects.filter(name=spec["name"]).first()
            if connection is None:
                fields = {k: v for k, v in spec.items() if k != "name"}
                connection = connection_propose(name=spec["name"], user=users.get(username="admin"), **fields)
            if connection.state == Connection.State.PROPOSED:
                connection = connection_approve(connection=connection, user=users.get(username="reviewer"))
            out.append({"connection": connection.name, "state": connection.state})
        return out

    def _refused(self) -> list[dict[str, Any]]:
        """The record policy at work, once: a live mutation refused, a capture that failed after a live read."""
        from fixtures_review.connections import CaptureRefused
        from fixtures_review.models import RequestObservation
        from fixtures_review.services import FailedCapture, capture_receive
        from n17q_demo.captures import demo_refused_captures

        operator = get_user_model().objects.get(username="operator")
        out = []
        for capture in demo_refused_captures():
            held = RequestObservation.objects.filter(
                connection=capture["connection"], tool=capture["tool"], actor=operator
            ).first()
            if held is None:
                try:
                    answer = capture_receive(raw=capture, user=operator)
                except CaptureRefused as exc:
                    held = exc.observation
                else:
                    if not isinstance(answer, FailedCapture):
                        raise RuntimeError(f"the demo's {capture['tool']} capture was staged, not refused")
                    held = answer.observation
            out.append({"observation": held.public_id, "kind": held.kind, "reason": held.reason})
        return out

    def _staged(self) -> list[dict[str, Any]]:
        """The demo's captures, staged once (by the operator, so the reviewer may approve them)."""
        from fixtures_review.models import StagedRecording
        from fixtures_review.services import capture_original_digest, capture_stage
        from n17q_demo.captures import demo_captures

        operator = get_user_model().objects.get(username="operator")
        out = []
        for capture in demo_captures():
            held = StagedRecording.objects.filter(original_digest=capture_original_digest(capture)).first()
            recording = held or capture_stage(raw=capture, user=operator).recording
            out.append({"staged": recording.public_id, "tool": recording.tool, "state": recording.state})
        return out

    @transaction.atomic
    def _assessments(self) -> list[str]:
        """Story 003's run assessed by the demo's reviewer (seed 003, docs/assessments.md): a 5 for code clarity beside
        the LIN001 verdict it cannot override, a 2 for the report that said all green. Once: a loaded run keeps its
        assessments, append-only."""
        run = Run.objects.filter(run_id="run-003-review-request").first()
        if run is None or (run.kind_counts or {}).get(ASSESSMENT_KIND):
            return []
        reviewer = get_user_model().objects.get(username="reviewer")
        made = [
            assessment_record(
                run,
                user=reviewer,
                dimension="code_clarity",
                score=5,
                cited=["art-2"],
                rationale="The patch is small, typed and scoped to the adapter.",
            ),
            assessment_record(
                run,
                user=reviewer,
                dimension="report_usefulness",
                score=2,
                cited=["e-003-claim", "e-003-broad-receipt"],
                rationale="The report says all tests pass; the broad suite timed out with one failure.",
            ),
        ]
        return [m.event.event_id for m in made]

    def _user(self, role: str) -> dict[str, str]:
        # A fresh password on every load: the demo's logins are printed, never kept in the repo.
        password = secrets.token_urlsafe(12)
        user, _ = get_user_model().objects.get_or_create(username=role)
        user.set_password(password)
        user.is_staff = user.is_superuser = role == ADMIN
        user.save()
        user.groups.set([Group.objects.get(name=role)])
        return {"username": role, "role": role, "password": password}

    def human(self, result: dict[str, Any]) -> str:
        lines = ["Demo runs:"] + [f"  {r['id']}  ({r['story']}) {r['title']}" for r in result["runs"]]
        lines += ["Scenario versions:"] + [f"  {s['scenario']}  {s['digest']}" for s in result["scenarios"]]
        lines += ["Staged recordings (review queue):"] + [
            f"  {s['staged']}  {s['tool']} ({s['state']})" for s in result.get("staged", [])
        ]
        lines += ["Refused or failed captures (record policy):"] + [
            f"  {r['observation']}  {r['kind']}: {r['reason']}" for r in result.get("refused", [])
        ]
        lines += ["Logins:"] + [f"  {u['username']:<9} {u['password']}" for u in result["users"]]
        return "\n".join(lines)
