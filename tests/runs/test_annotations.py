"""Annotations and corrections (issue 38, runs/annotations.py, docs/annotations.md): scores, labels and comments on
a run, an event or a finding, and corrections of recorded facts, appended to the run as events naming author, basis and
time; never edited; shown on the run page and in the detail panel; in the API, a command, and both exports."""

from __future__ import annotations

import io
import json
import re
import zipfile

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from accounts.models import AuditEntry, HarnessToken
from console.append_only import HistoryIsAppendOnly
from n17q_engine.lineage.checks import check_events
from runs import annotations as annotation_service
from runs.bundle_export import run_bundle_zip, run_otlp_json
from runs.importer import run_import_from_path
from runs.models import Edge, Event, Finding, Run
from tests import bundles
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db

RUN = "run-example-docs"


@pytest.fixture
def run():
    run_import_from_path(bundles.EXAMPLE)
    return Run.objects.get(run_id=RUN)


@pytest.fixture
def reviewer(role_user):
    return role_user("reviewer", "rita")


@pytest.fixture
def run_with_finding(tmp_path):
    """The example run with a dangling reference: one LIN011 finding from e-res2."""
    manifest, events, blobs = bundles.example_parts()
    manifest["run"]["id"] = "run-with-finding"
    next(e for e in events if e["id"] == "e-res2")["call_id"] = "e-nowhere"
    folder = bundles.write_folder(tmp_path / "b", manifest, events, blobs)
    run_import_from_path(folder)
    return Run.objects.get(run_id="run-with-finding")


def post(client, run_id: str, body: dict, **extra):
    return client.post(
        reverse("api-run-annotations", args=[run_id]), data=json.dumps(body), content_type="application/json", **extra
    )


def test_a_score_a_label_and_a_comment_on_the_run_are_events_naming_author_and_time(run, reviewer):
    before = run.event_count
    score = annotation_service.annotate(
        run, {"annotation": "score", "name": "correctness", "value": 0.8}, user=reviewer
    )
    label = annotation_service.annotate(run, {"annotation": "label", "name": "hallucination"}, user=reviewer)
    comment = annotation_service.annotate(run, {"annotation": "comment", "text": "Checked by hand."}, user=reviewer)
    run.refresh_from_db()
    assert run.event_count == before + 3
    assert run.kind_counts["annotation.recorded"] == 3
    bodies = [a.event.body for a in (score, label, comment)]
    assert [b["seq"] for b in bodies] == [before + 1, before + 2, before + 3]
    assert bodies[0]["value"] == 0.8 and bodies[0]["scale"] == "0..1" and bodies[0]["name"] == "correctness"
    assert bodies[1]["name"] == "hallucination" and bodies[2]["text"] == "Checked by hand."
    assert all(b["author"] == "rita" and b["author_role"] == "reviewer" and "subject" not in b for b in bodies)
    assert all(b["at"]["wall"] for b in bodies)
    listed = annotation_service.run_annotations(run)
    assert [a.annotation for a in listed] == ["score", "label", "comment"]
    assert {a.target for a in listed} == {"run"}
    assert AuditEntry.objects.filter(action="run.annotated", target=RUN).count() == 3


def test_an_event_annotation_has_an_edge_to_its_event_and_shows_in_that_events_panel(run, reviewer):
    made = annotation_service.annotate(
        run, {"annotation": "score", "name": "verdict", "value": "fail", "scale": "pass/fail", "event": "e-res2"},
        user=reviewer,
    )  # fmt: skip
    assert made.event.body["subject"] == "e-res2" and made.event.body["value"] == "fail"
    edge = Edge.objects.get(source=made.event)
    assert edge.field == "subject" and edge.target_event.event_id == "e-res2"
    target = Event.objects.get(run=run, event_id="e-res2")
    assert [a.id for a in annotation_service.event_annotations(run, target)] == [made.event.event_id]
    assert annotation_service.event_annotations(run, Event.objects.get(run=run, event_id="e-res1")) == []


def test_a_finding_is_annotated_by_its_code_and_its_events(run_with_finding, reviewer):
    finding = Finding.objects.get(run=run_with_finding, code="LIN011")
    made = annotation_service.annotate(
        run_with_finding,
        {"annotation": "comment", "finding": f"LIN011:{finding.from_ref}", "text": "The harness lost the call."},
        user=reviewer,
    )
    assert made.event.body["finding"] == {"code": "LIN011", "from_id": finding.from_ref, "to_id": finding.to_ref}
    (a,) = annotation_service.run_annotations(run_with_finding)
    assert a.target == "finding"
    # By the finding's stored id too.
    again = annotation_service.annotate(
        run_with_finding, {"annotation": "label", "finding": str(finding.pk), "name": "harness-bug"}, user=reviewer
    )
    assert again.event.body["finding"]["code"] == "LIN011"


def test_a_correction_names_author_basis_and_time_and_leaves_the_recorded_event_facts_and_findings_alone(run, reviewer):
    original = Event.objects.get(run=run, event_id="e-res2").body
    facts, findings = run.facts, list(Finding.objects.filter(run=run).values_list("code", flat=True))
    made = annotation_service.annotate(
        run,
        {"annotation": "correction", "event": "e-res2", "field": "outcome", "corrected": "error",
         "basis": ["e-call2", "e-claim"], "rationale": "The status service was down; not_found was its error page."},
        user=reviewer,
    )  # fmt: skip
    body = made.event.body
    assert body["kind"] == "annotation.correction"
    assert (body["subject"], body["field"], body["recorded"], body["corrected"]) == (
        "e-res2",
        "outcome",
        "not_found",
        "error",
    )
    assert body["basis_ids"] == ["e-call2", "e-claim"] and body["author"] == "rita" and body["at"]["wall"]
    assert sorted(Edge.objects.filter(source=made.event).values_list("field", flat=True)) == [
        "basis_ids[0]", "basis_ids[1]", "subject",
    ]  # fmt: skip
    assert Event.objects.get(run=run, event_id="e-res2").body == original
    run.refresh_from_db()
    assert run.facts == facts
    assert list(Finding.objects.filter(run=run).values_list("code", flat=True)) == findings


def test_a_change_of_mind_supersedes_the_earlier_annotation_which_stays(run, reviewer):
    first = annotation_service.annotate(
        run, {"annotation": "score", "name": "correctness", "value": 0.8}, user=reviewer
    )
    second = annotation_service.annotate(
        run,
        {"annotation": "score", "name": "correctness", "value": 0.4, "supersedes": first.event.event_id},
        user=reviewer,
    )
    listed = annotation_service.run_annotations(run)
    assert [(a.id, a.superseded_by) for a in listed] == [
        (first.event.event_id, second.event.event_id), (second.event.event_id, ""),
    ]  # fmt: skip
    assert listed[1].as_json()["supersedes"] == first.event.event_id


def test_annotations_are_never_edited_or_deleted(run, reviewer):
    made = annotation_service.annotate(run, {"annotation": "comment", "text": "first"}, user=reviewer)
    made.event.body = {**made.event.body, "text": "rewritten"}
    with pytest.raises(HistoryIsAppendOnly):
        made.event.save()
    with pytest.raises(HistoryIsAppendOnly):
        Event.objects.filter(kind="annotation.recorded").delete()
    with pytest.raises(HistoryIsAppendOnly):
        Event.objects.filter(kind="annotation.recorded").update(body={})


@pytest.mark.parametrize(
    ("data", "field"),
    [
        ({"annotation": "grade"}, "annotation"),
        ({"annotation": "score", "name": "correctness", "value": 2}, "value"),
        ({"annotation": "score", "name": "correctness", "value": "high"}, "value"),
        ({"annotation": "score", "name": "verdict", "value": "maybe", "scale": "pass/fail"}, "value"),
        ({"annotation": "score", "name": "x", "value": 1, "scale": "5..1"}, "scale"),
        ({"annotation": "score", "value": 1}, "name"),
        ({"annotation": "comment"}, "text"),
        ({"annotation": "comment", "text": "x" * (annotation_service.TEXT_MAX + 1)}, "text"),
        ({"annotation": "comment", "text": "a", "event": "e-nowhere"}, "event"),
        ({"annotation": "comment", "text": "a", "target": "finding", "finding": "LIN001:e-res2"}, "finding"),
        ({"annotation": "comment", "text": "a", "target": "span"}, "target"),
        ({"annotation": "comment", "text": "a", "supersedes": "e-res2"}, "supersedes"),
        (
            {
                "annotation": "correction",
                "event": "e-res2",
                "field": "outcome",
                "corrected": "broken",
                "basis": ["e-call2"],
                "rationale": "r",
            },
            "corrected",
        ),
        (
            {
                "annotation": "correction",
                "event": "e-res2",
                "field": "outcome",
                "corrected": "not_found",
                "basis": ["e-call2"],
                "rationale": "r",
            },
            "corrected",
        ),
        (
            {
                "annotation": "correction",
                "event": "e-res2",
                "field": "nothing",
                "corrected": "x",
                "basis": ["e-call2"],
                "rationale": "r",
            },
            "field",
        ),
        (
            {
                "annotation": "correction",
                "event": "e-res2",
                "field": "seq",
                "corrected": 3,
                "basis": ["e-call2"],
                "rationale": "r",
            },
            "field",
        ),
        (
            {
                "annotation": "correction",
                "event": "e-res2",
                "field": "outcome",
                "corrected": "error",
                "basis": [],
                "rationale": "r",
            },
            "basis",
        ),
        (
            {
                "annotation": "correction",
                "event": "e-res2",
                "field": "outcome",
                "corrected": "error",
                "basis": ["e-nowhere"],
                "rationale": "r",
            },
            "basis",
        ),
        (
            {
                "annotation": "correction",
                "event": "e-res2",
                "field": "outcome",
                "corrected": "error",
                "basis": ["e-call2"],
            },
            "rationale",
        ),
    ],
    ids=lambda x: x if isinstance(x, str) else None,
)
def test_bad_input_is_refused_in_one_line_naming_the_field_and_stores_nothing(run, reviewer, data, field):
    count = Event.objects.filter(run=run).count()
    with pytest.raises(annotation_service.AnnotationRefused) as refused:
        annotation_service.annotate(run, data, user=reviewer)
    assert refused.value.field == field and "\n" not in str(refused.value)
    assert Event.objects.filter(run=run).count() == count


def test_the_api_lists_and_appends_with_roles_and_scopes(client, run, reviewer, role_user):
    key = token_for(reviewer, HarnessToken.Scope.ANNOTATE_RUNS)
    made = post(
        client, RUN, {"annotation": "label", "name": "flaky", "event": "e-call2"}, HTTP_AUTHORIZATION=f"Token {key}"
    )
    assert made.status_code == 201, made.content
    assert made.json()["subject"] == "e-call2" and made.json()["author"] == "rita" and made.json()["masked"] == []
    bad = post(client, RUN, {"annotation": "score", "name": "c", "value": 9}, HTTP_AUTHORIZATION=f"Token {key}")
    assert bad.status_code == 400 and bad.json()["field"] == "value" and "\n" not in bad.json()["error"]
    missing = post(client, RUN, {"name": "c"}, HTTP_AUTHORIZATION=f"Token {key}")
    assert missing.status_code == 400 and missing.json()["error"].startswith("annotation:")
    # A read-only token reads, may not append; a viewer reads, may not append; an operator may not either.
    read_key = token_for(reviewer, HarnessToken.Scope.IMPORT_RUNS)
    assert (
        post(client, RUN, {"annotation": "label", "name": "x"}, HTTP_AUTHORIZATION=f"Token {read_key}").status_code
        == 403
    )
    listed = client.get(reverse("api-run-annotations", args=[RUN]), HTTP_AUTHORIZATION=f"Token {read_key}")
    assert listed.status_code == 200 and [a["name"] for a in listed.json()["results"]] == ["flaky"]
    for role in ("viewer", "operator"):
        client.force_login(role_user(role))
        assert post(client, RUN, {"annotation": "label", "name": "x"}).status_code == 403
        assert client.get(reverse("api-run-annotations", args=[RUN])).status_code == 200
    assert client.get(reverse("api-run-annotations", args=["run-nowhere"])).status_code == 404


def test_the_command_appends_and_lists_and_refuses_in_one_line(run, reviewer, role_user):
    out = io.StringIO()
    call_command("annotate_run", RUN, "--correct", "e-res2.outcome=error", "--basis", "e-call2", "--rationale",
                 "down", "--user", "rita", "--json", stdout=out)  # fmt: skip
    answer = json.loads(out.getvalue())
    assert (
        answer["annotation"] == "correction" and answer["corrected"] == "error" and answer["basis_ids"] == ["e-call2"]
    )
    out = io.StringIO()
    call_command("annotate_run", RUN, "--score", "correctness=0.5", "--event", "e-res1", "--user", "rita", "--json",
                 stdout=out)  # fmt: skip
    assert json.loads(out.getvalue())["value"] == 0.5
    out = io.StringIO()
    call_command("annotate_run", RUN, "--list", "--json", stdout=out)
    assert [a["annotation"] for a in json.loads(out.getvalue())["annotations"]] == ["correction", "score"]
    role_user("viewer", "vic")
    for args, said in [
        (["--comment", "x", "--user", "vic"], "may not annotate"),
        (["--comment", "x"], "--user is required"),
        (["--comment", "x", "--user", "nobody"], "no user"),
        (["--score", "correctness", "--user", "rita"], "NAME=VALUE"),
        (["--correct", "e-res2.outcome=error", "--user", "rita"], "basis"),
    ]:
        with pytest.raises(CommandError, match=said):
            call_command("annotate_run", RUN, *args)


def test_the_run_page_shows_annotations_and_the_panel_the_corrected_fact_beside_the_recorded_one(client, run, reviewer):
    annotation_service.annotate(run, {"annotation": "comment", "text": "<script>alert(1)</script>"}, user=reviewer)
    annotation_service.annotate(
        run,
        {"annotation": "correction", "event": "e-res2", "field": "outcome", "corrected": "error",
         "basis": ["e-call2"], "rationale": "down"},
        user=reviewer,
    )  # fmt: skip
    client.force_login(reviewer)
    html = client.get(f"/runs/{RUN}/").content.decode()
    assert 'id="annotations"' in html and 'Annotations <span class="count">(2)' in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>alert(1)" not in html
    assert 'id="annotate-run"' in html
    panel = client.get(f"/runs/{RUN}/?event=e-res2").content.decode()
    detail = panel[panel.index('id="detail"') :]
    assert "corrected to <strong><code>error</code>" in detail and "recorded <code>not_found</code>" in detail
    assert 'id="correct-event"' in detail and 'id="annotate-event"' in detail
    # In the trace too: the corrected event's row says so, beside its recorded outcome.
    row = re.search(r'<li class="trace-row[^"]*" id="ev-e-res2"[^>]*>.*?</li>', html, re.S).group(0)
    assert "not found" in row and '<span class="badge warn">corrected</span>' in row


def test_the_page_forms_append_for_reviewers_and_refuse_viewers_and_bad_input(client, run, reviewer, role_user):
    client.force_login(role_user("viewer"))
    html = client.get(f"/runs/{RUN}/?event=e-res2").content.decode()
    assert 'id="annotate-run"' not in html and 'id="correct-event"' not in html
    assert (
        client.post(reverse("runs:run-annotate", args=[RUN]), {"annotation": "comment", "text": "x"}).status_code == 403
    )
    client.force_login(reviewer)
    done = client.post(reverse("runs:run-annotate", args=[RUN]), {"annotation": "score", "name": "c", "value": "1"})
    assert done.status_code == 302 and done["Location"].endswith("#annotations")
    done = client.post(
        reverse("runs:run-annotate", args=[RUN]),
        {"annotation": "correction", "event": "e-res2", "field": "outcome", "corrected": "error",
         "basis": "e-call2, e-claim", "rationale": "down"},
    )  # fmt: skip
    assert done.status_code == 302 and "event=e-res2" in done["Location"]
    bad = client.post(reverse("runs:run-annotate", args=[RUN]), {"annotation": "score", "name": "c", "value": "7"})
    assert bad.status_code == 400 and bad.content.decode().count("\n") == 1
    assert client.get(reverse("runs:run-annotate", args=[RUN])).status_code == 405
    run.refresh_from_db()
    assert [a.annotation for a in annotation_service.run_annotations(run)] == ["score", "correction"]


def _queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


def test_the_run_page_query_count_is_pinned_with_annotations_and_does_not_grow_with_them(client, run, reviewer):
    client.force_login(reviewer)
    bare, bare_panel = _queries(client, f"/runs/{RUN}/"), _queries(client, f"/runs/{RUN}/?event=e-res2")
    annotation_service.annotate(run, {"annotation": "comment", "text": "one", "event": "e-res2"}, user=reviewer)
    one, one_panel = _queries(client, f"/runs/{RUN}/"), _queries(client, f"/runs/{RUN}/?event=e-res2")
    # The run's list: one query once the run holds any; the panel's: one more (the edges naming the event).
    assert (one, one_panel) == (bare + 1, bare_panel + 2)
    annotation_service.annotate(
        run,
        {"annotation": "correction", "event": "e-res2", "field": "outcome", "corrected": "error",
         "basis": ["e-call2"], "rationale": "down"},
        user=reviewer,
    )  # fmt: skip
    # A correction: + the corrected events of the trace's window (one query through the edges).
    one, one_panel = one + 1, one_panel + 1
    assert (_queries(client, f"/runs/{RUN}/"), _queries(client, f"/runs/{RUN}/?event=e-res2")) == (one, one_panel)
    for n in range(20):
        annotation_service.annotate(run, {"annotation": "label", "name": f"l{n}", "event": "e-res2"}, user=reviewer)
    assert (_queries(client, f"/runs/{RUN}/"), _queries(client, f"/runs/{RUN}/?event=e-res2")) == (one, one_panel)


def test_the_bundle_export_carries_them_and_imports_again_with_them(run, reviewer, tmp_path):
    annotation_service.annotate(
        run, {"annotation": "score", "name": "correctness", "value": 1, "event": "e-res1"}, user=reviewer
    )
    annotation_service.annotate(
        run,
        {"annotation": "correction", "event": "e-res2", "field": "outcome", "corrected": "error",
         "basis": ["e-call2"], "rationale": "down"},
        user=reviewer,
    )  # fmt: skip
    out = tmp_path / "out.zip"
    with out.open("wb") as fh:
        run_bundle_zip(run, fh, by="test")
    with zipfile.ZipFile(out) as z:
        events = [json.loads(line) for line in z.read("events.jsonl").splitlines()]
        manifest = json.loads(z.read("manifest.json"))
        folder = tmp_path / "again"
        z.extractall(folder)
    assert [e["kind"] for e in events[-2:]] == ["annotation.recorded", "annotation.correction"]
    # Imported again under another id: the annotations are events of the new run, the findings and facts as before.
    manifest["run"]["id"] = "run-again"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    run_import_from_path(folder)
    again = Run.objects.get(run_id="run-again")
    assert [a.annotation for a in annotation_service.run_annotations(again)] == ["score", "correction"]

    def facts(r: Run) -> dict:  # what the run did; not its id or its event count
        return {k: v for k, v in (r.facts or {}).items() if k not in ("run", "events")}

    assert facts(again) == facts(Run.objects.get(run_id=RUN))
    assert again.finding_count == run.finding_count
    # The checker reads neither kind: the same findings with them and without them.
    plain = [e for e in events if not e["kind"].startswith("annotation.")]
    assert check_events(manifest["run"], events) == check_events(manifest["run"], plain)


def test_the_otlp_export_carries_them_as_span_events(run, reviewer):
    made = annotation_service.annotate(run, {"annotation": "comment", "text": "seen", "event": "e-res1"}, user=reviewer)
    out = io.BytesIO()
    run_otlp_json(run, out, by="test")
    spans = [s for rs in json.loads(out.getvalue())["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]
    carried = [
        json.loads(next(a["value"]["stringValue"] for a in ev["attributes"] if a["key"] == "n17q.event"))
        for s in spans
        for ev in s.get("events", [])
        if ev["name"] == "annotation.recorded"
    ]
    assert [c["id"] for c in carried] == [made.event.event_id] and carried[0]["text"] == "seen"


def test_a_replay_package_leaves_the_annotations_out(run, reviewer):
    from replays.services import _source

    annotation_service.annotate(run, {"annotation": "comment", "text": "a note"}, user=reviewer)
    _manifest, events, _blobs, _expired = _source(run)
    assert b"annotation.recorded" not in events
