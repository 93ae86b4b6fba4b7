"""The review pages without a browser: roles, what a staged recording shows, actions with and without htmx,
the raw download, scenario versions with their coverage, query counts, the HTML sanitizer."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from console.captured_html import sanitize_captured_html
from fixtures_review.models import StagedRecording
from fixtures_review.services import capture_stage

from .conftest import search_capture, status_capture
from .corpus import rnd

pytestmark = pytest.mark.django_db


def stage(capture, user=None) -> StagedRecording:
    return capture_stage(raw=json.dumps(capture).encode(), user=user).recording


def test_anonymous_people_are_sent_to_sign_in(client):
    for url in ("/review/", "/scenarios/", "/review/sr-x/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/login/"), url


def test_a_viewer_may_not_read_staged_recordings(client, role_user, seed_scenarios):
    rec = stage(status_capture())
    client.force_login(role_user("viewer"))
    assert client.get("/review/").status_code == 403
    assert client.get(f"/review/{rec.public_id}/").status_code == 403
    assert b"Review</a>" not in client.get("/").content
    assert client.get("/scenarios/").status_code == 200


def test_the_queue_costs_the_same_queries_however_many_recordings(client, role_user, seed_scenarios,
                                                                   django_assert_max_num_queries):  # fmt: skip
    client.force_login(role_user("reviewer"))
    stage(status_capture())
    client.get("/review/")  # warm caches (content types, permissions)
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as one:
        assert client.get("/review/").status_code == 200
    for i in range(6):
        stage(search_capture(query=f"query {i}"))
    with CaptureQueriesContext(connection) as seven:
        page = client.get("/review/")
    assert page.content.count(b'href="/review/sr-') == 7
    assert len(seven.captured_queries) == len(one.captured_queries), [q["sql"] for q in seven.captured_queries]


def test_a_staged_recording_shows_what_a_reviewer_needs(client, role_user, seed_scenarios):
    token = "ghp_" + rnd(36)
    capture = search_capture(
        body={"items": [{"title": "Key rotation", "url": "https://docs.example/k"}], "debug": token}
    )
    capture["request"]["headers"]["Authorization"] = "Bearer " + rnd(30)
    rec = stage(capture)
    client.force_login(role_user("reviewer"))
    page = client.get(f"/review/{rec.public_id}/").content.decode()
    assert rec.request_digest in page and "Normalized request" in page and "&quot;public-docs&quot;" in page
    assert "Recording age" in page and "docs-api" in page and "docs@2026-07-01" in page
    # The response's shape (PostgreSQL's jsonb may return keys in another order).
    assert "items: [1 x {" in page and "title: string (12 chars)" in page and "url: string (22 chars)" in page
    assert "github-pat" in page and "ghp_•••• (40 chars)" in page and token not in page
    assert "request.headers.Authorization" in page  # the redaction on intake
    assert "search-rotate-keys" in page and "only-staged" in page  # the nearest fixture and its field diff
    assert "unresolved finding(s) block approval" in page
    assert "None: read changes no world state." in page


def test_the_capturers_approve_is_refused_with_the_reason_shown_without_js(client, role_user, seed_scenarios):
    capturer = role_user("reviewer", "rita")
    rec = stage(status_capture(), user=capturer)
    client.force_login(capturer)
    response = client.post(reverse("fixtures:action", args=[rec.public_id, "approve"]), {"revision": rec.revision})
    assert response.status_code == 302
    page = client.get(response["Location"]).content.decode()
    assert "Approve refused: four eyes: you captured this recording" in page
    assert StagedRecording.objects.get().state == "staged"


def test_approve_is_disabled_with_the_reason_while_approval_is_impossible(client, role_user, seed_scenarios):
    # Issue 16: Approve stayed enabled while approval was impossible (four eyes, open findings, contract tests).
    capturer = role_user("reviewer", "rita")
    mine = stage(status_capture(), user=capturer)
    client.force_login(capturer)
    page = client.get(f"/review/{mine.public_id}/").content.decode()
    form = page[page.index('id="approve-form"') :]
    form = form[: form.index("</form>")]
    assert "You cannot approve this now: four eyes: you captured this recording" in form
    assert 'disabled aria-describedby="approve-refusal">Approve</button>' in form
    # A contract mismatch stops every reviewer, the capturer's colleague too.
    broken = stage(status_capture(contract_revision=3), user=role_user("operator", "oscar"))
    client.force_login(role_user("reviewer", "second"))
    page = client.get(f"/review/{broken.public_id}/").content.decode()
    assert "No reviewer can approve this yet:" in page and "pins status.lookup revision 2" in page
    assert 'disabled aria-describedby="approve-refusal">Approve</button>' in page
    # And one that can be approved has a live button.
    fine = stage(status_capture(), user=role_user("operator", "olga"))
    page = client.get(f"/review/{fine.public_id}/").content.decode()
    assert '<button type="submit" class="primary">Approve</button>' in page and "approve-refusal" not in page


def test_htmx_actions_answer_with_the_recording_region(client, role_user, seed_scenarios):
    rec = stage(status_capture())
    client.force_login(role_user("reviewer"))
    url = reverse("fixtures:action", args=[rec.public_id, "redact"])
    response = client.post(url, {"path": "response.body.error", "reason": "r", "revision": 1}, HTTP_HX_REQUEST="true")
    body = response.content.decode()
    assert response.status_code == 200 and body.lstrip().startswith('<div id="recording"')
    assert "Redacted response.body.error." in body and "<html" not in body
    refused = client.post(url, {"path": "request.args.request_id", "revision": 2}, HTTP_HX_REQUEST="true").content
    assert b"Redact refused: request.args.request_id: an argument is part of the fixture key" in refused


def test_approving_from_the_page_shows_the_new_scenario_version(client, role_user, seed_scenarios):
    rec = stage(status_capture(), user=role_user("operator", "oscar"))
    client.force_login(role_user("reviewer"))
    response = client.post(reverse("fixtures:action", args=[rec.public_id, "approve"]), {"revision": 1}, follow=True)
    page = response.content.decode()
    assert "new scenario version docs-research@2" in page and 'id="new-scenario-version"' in page
    version_page = client.get("/scenarios/docs-research@2/").content.decode()
    assert rec.public_id in version_page and "status.lookup r2" in version_page


def test_a_viewer_or_operator_sees_no_review_actions(client, role_user, seed_scenarios):
    rec = stage(status_capture())
    client.force_login(role_user("operator"))
    page = client.get(f"/review/{rec.public_id}/").content.decode()
    assert "Reviewing needs the reviewer role" in page and 'id="approve-form"' not in page
    response = client.post(reverse("fixtures:action", args=[rec.public_id, "approve"]), {}, follow=True)
    assert "Approve refused: approving needs the reviewer role" in response.content.decode()


def test_the_raw_body_is_only_a_download(client, role_user, seed_scenarios):
    html = "<html><body><script>alert(1)</script><p>hello</p></body></html>"
    capture = search_capture()
    capture["response"]["headers"]["Content-Type"] = "text/html"
    capture["response"]["body"] = html
    rec = stage(capture)
    client.force_login(role_user("reviewer"))
    response = client.get(reverse("fixtures:body", args=[rec.public_id, "response"]))
    assert response["Content-Disposition"].startswith("attachment;")
    assert response["Content-Type"] == "application/octet-stream" and response["X-Content-Type-Options"] == "nosniff"
    assert b"".join(response.streaming_content) == html.encode()
    page = client.get(f"/review/{rec.public_id}/").content.decode()
    assert "<script>" not in page and "<p>hello</p>" in page
    assert client.get(reverse("fixtures:body", args=[rec.public_id, "request"])).status_code == 404


def test_the_scenario_page_links_uncovered_behaviour_to_its_tools(client, role_user, seed_scenarios):
    client.force_login(role_user("viewer"))
    page = client.get("/scenarios/docs-research@1/").content.decode()
    assert 'id="coverage-contract"' in page and "uncovered" in page
    assert 'href="#tool-statuslookup"' in page and 'id="tool-statuslookup"' in page
    email = client.get("/scenarios/email-delivery@1/").content.decode()
    assert 'href="#invariant-one-delivery"' in email and 'id="invariant-one-delivery"' in email
    assert client.get("/scenarios/docs-research@9/").status_code == 404


@pytest.mark.parametrize(
    "payload",
    [
        "<script>alert(1)</script>",
        '<img src=x onerror="alert(1)">',
        '<a href="javascript:alert(1)">x</a>',
        '<svg onload="alert(1)"><script>alert(1)</script></svg>',
        '<div hx-get="/logout/" hx-trigger="load">x</div>',
        '<div data-hx-post="/logout/" data-hx-trigger="load">x</div>',
        '<iframe src="https://evil.example/"></iframe>',
        "<style>body{background:url(https://evil.example/x)}</style>",
        '<form action="https://evil.example/"><button>go</button></form>',
        '<meta http-equiv="refresh" content="0;url=https://evil.example/">',
        '<p style="background:url(https://evil.example/)">x</p>',
        "<base href='https://evil.example/'>",
        "<object data='https://evil.example/x.swf'></object>",
        "<math><mi xlink:href='javascript:alert(1)'>x</mi></math>",
    ],
)
def test_the_sanitizer_leaves_nothing_live(payload):
    clean = sanitize_captured_html(payload)
    lowered = clean.lower()
    for live in ("<script", "<img", "<svg", "<iframe", "<style", "<form", "<meta", "<base", "<object", "<math",
                 "onerror", "onload", "href", "src=", "hx-", "style=", "action="):  # fmt: skip
        assert live not in lowered, (payload, clean)
