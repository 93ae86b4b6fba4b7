"""The run page: synchronized panes, focus, the lineage picture, findings, pinned query counts."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.synth import write_bundle
from n17q_demo import stories
from runs.importer import run_import_from_path
from runs.models import Event
from tests import bundles

pytestmark = pytest.mark.django_db

STORY_003 = "run-003-review-request"


@pytest.fixture
def viewer_client(client, role_user):
    client.force_login(role_user("viewer"))
    return client


@pytest.fixture
def story_003(tmp_path):
    story = next(b for b in stories.demo_bundles() if b.manifest["run"]["id"] == STORY_003)
    run_import_from_path(stories.write_bundle(story, tmp_path / "003"))
    return story


@pytest.fixture(scope="module")
def large_bundle(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("large") / "bundle"
    write_bundle(folder, 10_000)
    return folder


def page_queries(client, url: str) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url)
    assert response.status_code == 200
    return len(ctx.captured_queries), response.content.decode()


def test_it_keeps_the_run_page_query_count_flat_from_10_to_10000_events(viewer_client, large_bundle):
    run_import_from_path(bundles.EXAMPLE)
    run_import_from_path(large_bundle)
    small, _ = page_queries(viewer_client, "/runs/run-example-docs/")
    large, html = page_queries(viewer_client, "/runs/bench-run-10000/")
    # 1 session, 2 user, 3 run; 4-9 the six panes' windows; 10 the events the shown items point at, 11 the
    # receipts behind observations among them; 12 the findings panel; 13 the picture's window, 14 its
    # edges, 15 its broken edges; 16 the all-events window; 17 the user's groups (role badge); 18-19 the
    # user's and the groups' permissions (import and launch controls).
    assert small == large == 19
    assert "of 10000" in html  # the all-events window says how much there is, and shows only a window
    assert len(re.findall(r'<li class="item[ "]', html)) <= 6 * 40


def test_it_keeps_the_focused_run_page_query_count_flat(viewer_client, large_bundle, story_003):
    run_import_from_path(large_bundle)
    intent = Event.objects.filter(run__run_id="bench-run-10000", kind="effect.intent").order_by("-seq").first()
    small, _ = page_queries(viewer_client, f"/runs/{STORY_003}/?focus=e-003-intent-review-request")
    large, _ = page_queries(viewer_client, f"/runs/bench-run-10000/?focus={intent.event_id}")
    assert small == large


def test_it_keeps_the_run_list_query_count_flat(viewer_client, large_bundle):
    run_import_from_path(bundles.EXAMPLE)
    one, _ = page_queries(viewer_client, "/")
    run_import_from_path(large_bundle)
    two, html = page_queries(viewer_client, "/")
    # session, user, the user's groups (role badge), the permission checks (cached after the first), the page
    # of runs and its count.
    assert one == two
    assert "bench-run-10000" in html and "run-example-docs" in html


def _item(html: str, pane: str, event_id: str) -> str:
    match = re.search(rf'<li class="item[^"]*" id="ev-{pane}-{event_id}">.*?</li>', html, re.S)
    assert match, f"{event_id} not in pane {pane}"
    return match.group(0)


def test_it_focuses_the_review_request_and_its_evidence_in_every_pane(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/?focus=e-003-intent-review-request").content.decode()
    intent = _item(html, "effects", "e-003-intent-review-request")
    assert 'class="item focused"' in intent
    # The admission it relies on came from workspace one; the artifact it publishes was built in workspace two.
    admission = _item(html, "evidence", "e-003-focused-admitted")
    assert "focused" in admission.split(">")[0] and "ws-1" in admission
    artifact = _item(html, "workspaces", "e-003-artifact-created")
    assert "focused" in artifact.split(">")[0] and "ws-2" in artifact
    decision = _item(html, "policy", "e-003-policy-allow")
    assert "focused" in decision.split(">")[0]
    # The broken edge is drawn, labelled with its code and its sentence, never by colour alone.
    assert re.search(r'<g class="broken-edge" data-code="LIN001">', html)
    assert "LIN001: Intent e-003-intent-review-request relies on admission e-003-focused-admitted" in html


def test_it_answers_an_htmx_focus_with_every_pane_out_of_band(viewer_client, story_003):
    response = viewer_client.get(f"/runs/{STORY_003}/?focus=e-003-claim", HTTP_HX_REQUEST="true")
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="focus-bar"')
    for pane in ("attempts", "workspaces", "evidence", "policy", "effects", "account"):
        assert f'<section id="pane-{pane}" class="pane" aria-labelledby="pane-{pane}-h" hx-swap-oob="true">' in html
    assert '<section id="picture"' in html and '<section id="findings"' in html
    claim = _item(html, "account", "e-003-claim")
    assert "e-003-focused-receipt" in claim  # its supports are listed with their completion
    focused_receipt = _item(html, "evidence", "e-003-focused-receipt")
    assert "focused" in focused_receipt.split(">")[0]


def test_it_links_each_finding_to_both_ends(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/").content.decode()
    findings = html[html.index('id="findings"') :]
    assert '?focus=e-003-intent-review-request"' in findings and '?focus=e-003-focused-admitted"' in findings


def test_it_keeps_links_working_without_javascript(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/").content.decode()
    for link in re.findall(r'<a class="focus-link" href="([^"]+)" hx-get="([^"]+)"', html):
        assert link[0] == link[1] and link[0].startswith("?focus=")


def test_it_says_when_the_focus_names_nothing_in_the_run(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/?focus=e-nowhere").content.decode()
    assert "This run holds no event or object" in html and "e-nowhere" in html


def test_it_focuses_an_object_by_its_own_id(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/?focus=ws-2").content.decode()
    assert "(workspace, introduced by" in html
    assert "focused" in _item(html, "workspaces", "e-003-ws-2-created").split(">")[0]


def test_it_pages_a_pane_on_its_own(viewer_client, large_bundle):
    run_import_from_path(large_bundle)
    first = viewer_client.get("/runs/bench-run-10000/").content.decode()
    assert "Next evidence" in first
    next_from = re.search(r'href="\?evidence_from=(\d+)"', first).group(1)
    response = viewer_client.get(
        f"/runs/bench-run-10000/?evidence_from={next_from}&pane=evidence", HTTP_HX_REQUEST="true"
    )
    html = response.content.decode()
    assert html.lstrip().startswith('<section id="pane-evidence"') and "Previous evidence" in html
    shown = [int(s) for s in re.findall(r"· seq (\d+)", html)]
    assert len(shown) == 40 and min(shown) >= int(next_from)
    # The previous link leads back to the first window: it starts at the first window's first event.
    first_pane = first[first.index('id="pane-evidence"') : first.index('id="pane-policy"')]
    first_seq = re.search(r"· seq (\d+)", first_pane).group(1)
    assert f'<a href="?evidence_from={first_seq}" hx-get="?evidence_from={first_seq}&pane=evidence"' in html


def test_it_shows_logical_and_wall_time_apart(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/").content.decode()
    item = _item(html, "evidence", "e-003-broad-receipt")
    assert "logical <time" in item and "wall <time" in item
    assert "termination_unknown" in item and "Raw event" in item


def test_it_needs_a_login_for_the_run_page(client, story_003):
    assert client.get(reverse("runs:run-detail", args=[STORY_003])).status_code == 302


def test_it_keeps_the_filters_when_paging_the_run_list(viewer_client, tmp_path):
    manifest, events, blobs = bundles.example_parts()
    for i in range(51):
        manifest["run"]["id"] = f"run-page-{i:02d}"
        run_import_from_path(bundles.write_folder(tmp_path / str(i), manifest, events, blobs))
    html = viewer_client.get("/?mode=recorded&findings=no").content.decode()
    assert "Page 1 of 2" in html
    assert 'href="?mode=recorded&amp;findings=no&amp;page=2"' in html
    filtered = viewer_client.get("/?q=run-page-5").content.decode()
    assert "run-page-50" in filtered and "run-page-49" not in filtered
