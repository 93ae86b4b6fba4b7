"""Qualitative reviewer assessments (runs/assessments.py, seed 003 "The scenario definition grew richer"): a person's
and a model reviewer's (a loopback OpenAI-compatible server behind an approved model connection), kept apart from the
verdict, on the demo's story 003 run, whose verdict holds the cross-workspace violation (LIN001)."""

from __future__ import annotations

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from accounts.models import HarnessToken
from n17q_demo.stories import demo_bundles, write_bundle
from runs.facts import facts_of
from runs.importer import run_import_from_path
from runs.models import Finding, Run
from tests.replays.model_connections import approve_model_connection
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db
RUN = "run-003-review-request"
CREDENTIAL = "N17Q_MODEL_CREDENTIAL_REVIEW_" + secrets.token_hex(4).upper()


def _import(tmp_path: Path) -> Run:
    (bundle,) = [b for b in demo_bundles() if b.manifest["run"]["id"] == RUN]
    run_import_from_path(write_bundle(bundle, tmp_path / "b"))
    return Run.objects.get(run_id=RUN)


def _verdict(client) -> str:
    html = client.get(f"/runs/{RUN}/").content.decode()
    start = html.index('id="findings-h"')
    return html[start : html.index("</h2>", start)]


@pytest.mark.seed("003", "The scenario definition grew richer")
def test_a_high_score_sits_beside_the_verdict_and_never_changes_it(client, role_user, tmp_path: Path) -> None:
    run = _import(tmp_path)
    findings_before = sorted(Finding.objects.filter(run=run).values_list("code", "from_ref", "to_ref"))
    facts_before = facts_of(run)
    viewer = role_user("viewer")
    client.force_login(viewer)
    verdict_before = _verdict(client)
    page = client.get(f"/runs/{RUN}/").content.decode()
    assert page.count("not reviewed") == 4  # every dimension, before anyone assessed it

    assessor = role_user("reviewer", "assessor")
    key = token_for(assessor, HarnessToken.Scope.ANNOTATE_RUNS)
    auth = {"HTTP_AUTHORIZATION": f"Token {key}"}
    post = {
        "dimension": "report_usefulness",
        "score": 5,
        "cited": ["e-003-claim", "art-2"],
        "rationale": "A clear, well organised report.",
    }
    made = client.post(f"/api/v1/runs/{RUN}/assessments/", post, content_type="application/json", **auth)
    assert made.status_code == 201, made.content
    # An id the run does not hold is refused, nothing is appended.
    refused = client.post(
        f"/api/v1/runs/{RUN}/assessments/",
        {**post, "cited": ["e-003-claim", "no-such-event"]},
        content_type="application/json",
        **auth,
    )
    assert refused.status_code == 400 and "no-such-event" in refused.json()["error"]
    bad_score = client.post(
        f"/api/v1/runs/{RUN}/assessments/", {**post, "score": 9}, content_type="application/json", **auth
    )
    assert bad_score.status_code == 400
    # A blank id in the list is one clear line naming its place (a list field's errors are keyed by index).
    blank = client.post(
        f"/api/v1/runs/{RUN}/assessments/", {**post, "cited": ["art-2", ""]}, content_type="application/json", **auth
    )
    assert blank.status_code == 400 and blank.json()["error"].startswith("cited.1: "), blank.content

    run.refresh_from_db()
    # The verdict, the findings and the facts are what they were: LIN001 stands beside a 5/5 report.
    assert _verdict(client) == verdict_before and "error" in verdict_before
    assert sorted(Finding.objects.filter(run=run).values_list("code", "from_ref", "to_ref")) == findings_before
    assert ("LIN001",) in {(f[0],) for f in findings_before}
    assert {k: v for k, v in facts_of(run).items() if k != "events"} == {
        k: v for k, v in facts_before.items() if k != "events"
    }
    page = client.get(f"/runs/{RUN}/").content.decode()
    section = page[page.index('id="assessments"') :]
    section = section[: section.index("</section>")]
    assert "<strong>5/5</strong>" in section and "A clear, well organised report." in section
    assert section.count("not reviewed") == 3
    reader = token_for(assessor, HarnessToken.Scope.IMPORT_RUNS)  # reading needs the read scope, not annotate's
    assert client.get(f"/api/v1/runs/{RUN}/assessments/", **auth).status_code == 403
    listed = client.get(f"/api/v1/runs/{RUN}/assessments/", HTTP_AUTHORIZATION=f"Token {reader}").json()
    (usefulness,) = [d for d in listed["dimensions"] if d["dimension"] == "report_usefulness"]
    assert usefulness["reviewed"] and usefulness["assessments"][0]["cited_ids"] == ["e-003-claim", "art-2"]
    assert [d["reviewed"] for d in listed["dimensions"]].count(False) == 3


class _Reviewer:
    """A model reviewer on loopback: answers every chat request with the assessments it was given."""

    def __init__(self, assessments: list[dict[str, Any]]) -> None:
        received: list[dict[str, Any]] = []
        self.received = received
        answer = {
            "id": "chatcmpl-review",
            "object": "chat.completion",
            "created": 1_767_225_600,
            "model": "reviewer-1",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": json.dumps({"assessments": assessments})},
                    "finish_reason": "stop",
                }
            ],
        }

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                received.append({"path": self.path, "body": json.loads(self.rfile.read(length))})
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.seed("003", "The scenario definition grew richer")
def test_a_model_reviewer_assesses_each_dimension_citing_events_and_a_hard_failure_stays(
    role_user, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _import(tmp_path)
    errors_before = run.error_count
    monkeypatch.setenv(CREDENTIAL, "sk-review-" + secrets.token_hex(8))
    reviewer = _Reviewer(
        [
            {"dimension": "code_clarity", "score": 5, "cited": ["art-2"], "rationale": "Small, clear patch."},
            {"dimension": "diagnostic_reasoning", "score": 4, "cited": ["e-003-broad-receipt"], "rationale": "ok"},
            {"dimension": "report_usefulness", "score": 2, "cited": ["e-003-claim"], "rationale": "Says all green."},
            {"dimension": "path_economy", "score": 3, "cited": ["e-003-a2-start"], "rationale": "A full retry."},
        ]
    )
    try:
        approve_model_connection("review-model", port=reviewer.port, credential=CREDENTIAL)
        role_user("reviewer", "assessor")
        call_command(
            "assess_run", RUN, "--connection", "review-model", "--model", "reviewer-1", "--user", "assessor", "--json"
        )
    finally:
        reviewer.close()
    made = json.loads(capsys.readouterr().out)["made"]
    assert [(m["dimension"], m["score"]) for m in made] == [
        ("code_clarity", 5),
        ("diagnostic_reasoning", 4),
        ("report_usefulness", 2),
        ("path_economy", 3),
    ]
    (sent,) = reviewer.received
    assert sent["path"] == "/v1/chat/completions" and sent["body"]["model"] == "reviewer-1"
    assert "e-003-focused-admitted" in sent["body"]["messages"][1]["content"]  # it was shown the run's events
    run.refresh_from_db()
    assert run.error_count == errors_before  # a hard failure coexists with a 5 for code clarity
    call_command("assess_run", RUN, "--list", "--json")
    listed = json.loads(capsys.readouterr().out)
    (clarity,) = [d for d in listed["dimensions"] if d["dimension"] == "code_clarity"]
    assert clarity["assessments"][0]["reviewer"] == {"kind": "model", "name": "reviewer-1"}
    assert clarity["assessments"][0]["connection"] == "review-model"


def test_a_model_answer_citing_an_unknown_id_records_nothing(role_user, tmp_path: Path, monkeypatch) -> None:
    from django.core.management.base import CommandError

    run = _import(tmp_path)
    monkeypatch.setenv(CREDENTIAL, "sk-review-" + secrets.token_hex(8))
    reviewer = _Reviewer(
        [
            {"dimension": "code_clarity", "score": 5, "cited": ["art-2"], "rationale": "fine"},
            {"dimension": "path_economy", "score": 5, "cited": ["invented-event"], "rationale": "fine"},
        ]
    )
    try:
        approve_model_connection("review-model-2", port=reviewer.port, credential=CREDENTIAL)
        role_user("reviewer", "assessor")
        with pytest.raises(CommandError, match="invented-event"):
            call_command("assess_run", RUN, "--connection", "review-model-2", "--user", "assessor")
        with pytest.raises(CommandError, match="no model connection"):
            call_command("assess_run", RUN, "--connection", "not-registered", "--user", "assessor")
    finally:
        reviewer.close()
    run.refresh_from_db()
    assert not (run.kind_counts or {}).get("review.assessment")
