"""The run page: the verdict, the trace and its facets and search, the detail panel, focus that narrows, pinned
query counts from 10 to 100,000 events."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from benchmarks.synth import write_bundle
from n17q_demo import stories
from runs.importer import run_import_from_path
from runs.models import Event, Run
from tests import bundles

pytestmark = pytest.mark.django_db

STORY_000 = "run-000-fail-open-replay"
STORY_001 = "run-001-naive-replay"
STORY_003 = "run-003-review-request"


@pytest.fixture
def viewer_client(client, role_user):
    client.force_login(role_user("viewer"))
    return client


def _import_story(run_id: str, folder: Path) -> None:
    story = next(b for b in stories.demo_bundles() if b.manifest["run"]["id"] == run_id)
    run_import_from_path(stories.write_bundle(story, folder))


@pytest.fixture
def story_003(tmp_path):
    _import_story(STORY_003, tmp_path / "003")


@pytest.fixture
def story_000(tmp_path):
    _import_story(STORY_000, tmp_path / "000")


@pytest.fixture
def story_001(tmp_path):
    _import_story(STORY_001, tmp_path / "001")


@pytest.fixture(scope="module")
def large_bundle(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("large") / "bundle"
    write_bundle(folder, 10_000)
    return folder


@pytest.fixture(scope="module")
def huge_bundle(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("huge") / "bundle"
    write_bundle(folder, 100_000)
    return folder


def page_queries(client, url: str, **headers) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, **headers)
    assert response.status_code == 200, (url, response.status_code)
    return len(ctx.captured_queries), response.content.decode()


def _row(html: str, event_id: str) -> str:
    match = re.search(rf'<li class="trace-row[^"]*" id="ev-{event_id}"[^>]*>.*?</li>', html, re.S)
    assert match, f"{event_id} not in the trace"
    return match.group(0)


def _last_intent(run_id: str) -> str:
    return (
        Event.objects.filter(run__run_id=run_id, kind="effect.intent")
        .order_by("-seq")
        .values_list("event_id", flat=True)[0]
    )


def test_it_keeps_every_run_page_query_count_flat_from_10_to_100000_events(viewer_client, huge_bundle):
    run_import_from_path(bundles.EXAMPLE)
    run_import_from_path(huge_bundle)
    small_run, large_run = "run-example-docs", "bench-run-100000"
    small_event = Event.objects.filter(run__run_id=small_run, kind="tool.result").values_list("event_id", flat=True)[0]
    large_event = (
        Event.objects.filter(run__run_id=large_run, kind="tool.result")
        .order_by("-seq")
        .values_list("event_id", flat=True)[0]
    )
    small_intent = _last_intent(small_run) if Event.objects.filter(run__run_id=small_run, kind="effect.intent") else ""
    cases = {
        # 1 session, 2 user; 3 the run; 4 the trace's window, 5 the tools of its results' calls; 6 the findings
        # (verdict), 7 the objects, 8 the key events; 9 the picture's window, 10 the findings touching it, 11 its
        # references; 12 the run's blobs whose bytes retention removed (summary and rows, issue 38);
        # 13 the user's groups (role badge); 14-15 the user's and the groups' permissions (launch controls).
        "page": ("/runs/{run}/", {}, 15),
        # the trace's window deep in the run: + the previous window's start.
        "deep window": ("/runs/{run}/?trace_from={deep}", {}, 16),
        # two facets: the window on the (run, kind, seq) index; it holds no tool result, so no query for tools.
        "facet": ("/runs/{run}/?facet=evidence&facet=effects", {}, 14),
        # search: + whether anything lies past the searched span.
        "search": ("/runs/{run}/?q=tool", {}, 16),
        # the detail panel: + the event, its facts' related events (2), its tool, its references out and in, its
        # blobs, its findings.
        "event selected": ("/runs/{run}/?event={event}", {}, 23),
        "detail panel alone": ("/runs/{run}/events/{event}/", {"HTTP_HX_REQUEST": "true"}, None),
    }
    for name, (url, headers, expected) in cases.items():
        counts = []
        for run, event in ((small_run, small_event), (large_run, large_event)):
            deep = 5 if run == small_run else 60_000
            count, _ = page_queries(viewer_client, url.format(run=run, event=event, deep=deep), **headers)
            counts.append(count)
        assert counts[0] == counts[1], (name, counts)
        if expected is not None:
            assert counts[0] == expected, (name, counts)
    # Focus (with its neighbourhood walk) and focus narrowed: the same count for a small and a huge run.
    if small_intent:
        for suffix in ("", "&narrow=hide"):
            small, _ = page_queries(viewer_client, f"/runs/{small_run}/?focus={small_intent}{suffix}")
            large, _ = page_queries(viewer_client, f"/runs/{large_run}/?focus={_last_intent(large_run)}{suffix}")
            assert small == large, suffix


def test_it_keeps_the_focused_page_query_count_flat(viewer_client, large_bundle, story_003):
    run_import_from_path(large_bundle)
    intent = _last_intent("bench-run-10000")
    for suffix in ("", "&narrow=hide", "&event=e-003-claim"):
        small, _ = page_queries(viewer_client, f"/runs/{STORY_003}/?focus=e-003-intent-review-request{suffix}")
        event = "&event=" + intent if suffix.startswith("&event") else suffix
        large, _ = page_queries(viewer_client, f"/runs/bench-run-10000/?focus={intent}{event}")
        assert small == large, suffix


def test_it_keeps_the_run_list_query_count_flat(viewer_client, large_bundle):
    run_import_from_path(bundles.EXAMPLE)
    one, _ = page_queries(viewer_client, "/")
    run_import_from_path(large_bundle)
    two, html = page_queries(viewer_client, "/")
    assert one == two
    assert "bench-run-10000" in html and "run-example-docs" in html


def test_it_states_the_verdict_with_one_sentence_per_root_cause(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/").content.decode()
    # Six findings, four causes: the two LIN001 meet at the workspace-one admission, the two LIN008 at the claim.
    assert "6 errors in 4 root causes" in html
    groups = re.findall(r'<li class="finding-group sev-error">(.*?)</ul>\s*</li>', html, re.S)
    assert len(groups) == 4
    lin001 = next(g for g in groups if "#LIN001" in g)
    assert "2 findings meet at e-003-focused-admitted" in lin001
    # Digests in the sentences are shortened, whole behind a copy button.
    assert "sha256:507cecf1…" in lin001 and 'data-copy="sha256:507cecf1' in lin001
    # The key objects are chips; workspace one is an end of a finding.
    assert re.search(r'<li class="chip bad"><span class="chip-k">workspace</span> <a [^>]*>ws-1</a>', html) is None
    assert ">ws-1</a>" in html and ">art-2</a>" in html


def test_it_shows_the_second_delivery_and_the_historical_approval_in_the_verdict(viewer_client, story_001):
    html = viewer_client.get(f"/runs/{STORY_001}/").content.decode()
    verdict = html[: html.index('id="focus-bar"')]
    assert "duplicate of &lt;m-5501@acme.example&gt;" in verdict
    assert "revision 42 → 43" in verdict
    approval = re.search(
        r'<li class="chip bad"><span class="chip-k">[^<]*<a [^>]*>approval</a></span>.*?</li>', verdict, re.S
    )
    assert approval and "historical, from run run-001-recorded (live)" in approval.group(0)


def test_it_shows_the_live_result_and_its_body_in_the_detail_panel(viewer_client, story_000):
    html = viewer_client.get(f"/runs/{STORY_000}/?event=e-000r-res-status").content.decode()
    detail = html[html.index('<aside id="detail"') :]
    assert '<span class="badge origin-live">live</span>' in detail
    assert "LIN014" in detail
    # The body the live service answered with, highlighted JSON: the request it should not have found.
    assert "req-7781" in detail and "team-keys" in detail and 'class="hl"' in detail
    assert f'href="/runs/{STORY_000}/blobs/sha256:' in detail
    row = _row(html, "e-000r-res-status")
    assert "selected" in row.split(">")[0] and 'aria-current="true"' in row


def test_it_marks_each_origin_with_its_own_badge(viewer_client, story_000):
    html = viewer_client.get(f"/runs/{STORY_000}/").content.decode()
    assert '<span class="badge origin-fixture">fixture</span>' in _row(html, "e-000r-res-search")
    assert '<span class="badge origin-live">live</span>' in _row(html, "e-000r-res-status")
    # A result names its call; the row names the call's tool.
    assert "ok from status.lookup" in _row(html, "e-000r-res-status")


def test_it_narrows_the_trace_to_the_focus_and_keeps_it_in_the_url(viewer_client, story_003):
    url = f"/runs/{STORY_003}/?focus=e-003-intent-review-request"
    dimmed = viewer_client.get(url).content.decode()
    assert 'class="trace has-focus narrow-dim"' in dimmed
    intent = _row(dimmed, "e-003-intent-review-request")
    assert "focus-origin" in intent.split(">")[0]
    admission = _row(dimmed, "e-003-focused-admitted")
    assert "in-focus" in admission.split(">")[0]
    outside = _row(dimmed, "e-003-a1-read-adapter")
    assert "in-focus" not in outside.split(">")[0]
    hidden = viewer_client.get(url + "&narrow=hide").content.decode()
    rows = re.findall(r'<li class="trace-row[^"]*" id="ev-([^"]+)"', hidden)
    assert "e-003-intent-review-request" in rows and "e-003-focused-admitted" in rows
    assert "e-003-a1-read-adapter" not in rows and len(rows) < 47
    assert "dim them instead" in hidden


def test_it_filters_the_trace_by_facet(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/?facet=evidence").content.decode()
    kinds = set(re.findall(r'<span class="kind">([^<]+)</span>', html))
    assert kinds and kinds <= {"command.receipt", "evidence.observed", "evidence.admitted", "evidence.superseded"}
    assert 'value="evidence" checked' in html


def test_it_searches_within_the_run(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/?q=review-service").content.decode()
    rows = re.findall(r'<li class="trace-row[^"]*" id="ev-([^"]+)"', html)
    assert "e-003-intent-review-request" in rows and "e-003-a1-start" not in rows
    assert "the end of the run" in html
    nothing = viewer_client.get(f"/runs/{STORY_003}/?q=no-such-text-anywhere").content.decode()
    assert "No event matches" in nothing


def test_it_searches_a_large_run_a_bounded_span_at_a_time(viewer_client, large_bundle):
    run_import_from_path(large_bundle)
    html = viewer_client.get("/runs/bench-run-10000/?q=no-such-text-anywhere").content.decode()
    assert "No event matches" in html and "the end of the run" in html


def test_it_pages_the_trace_with_keyset_windows(viewer_client, large_bundle):
    run_import_from_path(large_bundle)
    first = viewer_client.get("/runs/bench-run-10000/").content.decode()
    next_from = re.search(r'href="\?trace_from=(\d+)#trace">Later events', first).group(1)
    second = viewer_client.get(f"/runs/bench-run-10000/?trace_from={next_from}").content.decode()
    seqs = [int(s) for s in re.findall(r'<span class="seq">(\d+)</span>', second)]
    assert len(seqs) == 60 and min(seqs) == int(next_from)
    earlier = re.search(r'href="\?trace_from=(\d+)#trace">Earlier events', second).group(1)
    first_seqs = [int(s) for s in re.findall(r'<span class="seq">(\d+)</span>', first)]
    assert int(earlier) == first_seqs[0]  # the earlier window is exactly the first one


def test_it_links_each_finding_to_its_edge_and_both_ends(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/").content.decode()
    findings = html[html.index('id="findings"') : html.index('id="focus-bar"')]
    assert re.search(r"href=\"\?finding=\d+&amp;event=e-003-intent-review-request#picture-edge-\d+\"", findings)
    assert '?event=e-003-focused-admitted#detail"' in findings


def test_it_keeps_links_working_without_javascript(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/").content.decode()
    # Every trace link is a plain link with its place in the URL; none depends on a script.
    links = re.findall(r'<a class="row-link" href="([^"]+)"', html)
    assert len(links) == 47 and all(link.startswith("?event=") and link.endswith("#detail") for link in links)
    assert "hx-get" not in html[html.index('id="trace"') : html.index('<aside id="detail"')]


def test_it_says_when_the_focus_or_the_event_names_nothing_in_the_run(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/?focus=e-nowhere&event=e-elsewhere").content.decode()
    assert "This run holds no event or object" in html and "e-nowhere" in html
    assert "This run holds no event <code>e-elsewhere</code>" in html


def test_it_answers_nonsense_parameters_with_the_page(viewer_client, story_003):
    for params in (
        "trace_from=abc",
        "trace_from=-5",
        "finding=x",
        "facet=nothing",
        "narrow=sideways",
        "q=" + "x" * 5000,
    ):
        assert viewer_client.get(f"/runs/{STORY_003}/?{params}").status_code == 200, params


def test_it_focuses_an_object_by_its_own_id(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/?focus=ws-2").content.decode()
    assert "(workspace, introduced by" in html
    assert "focus-origin" in _row(html, "e-003-ws-2-created").split(">")[0]


def test_it_shows_an_events_facts_and_references_both_ways(viewer_client, story_003):
    html = viewer_client.get(f"/runs/{STORY_003}/?event=e-003-focused-admitted").content.decode()
    detail = html[html.index('<aside id="detail"') :]
    assert "e-003-focused-receipt in ws-1: completed, 0 failed" in detail  # the receipt behind the admission
    assert "It refers to" in detail and "Referred to by" in detail
    assert "e-003-intent-review-request" in detail  # the intent that relies on it
    assert "logical" in detail and "wall" in detail and "Event as recorded" in detail


def test_it_renders_a_patch_as_a_diff(viewer_client, story_003):
    artifact = Event.objects.get(run__run_id=STORY_003, event_id="e-003-artifact-created")
    assert artifact.body["media_type"] == "text/x-diff"
    html = viewer_client.get(f"/runs/{STORY_003}/?event=e-003-artifact-created").content.decode()
    detail = html[html.index('<aside id="detail"') :]
    assert "render-diff" in detail and '<span class="gi">+' in detail


def test_it_answers_the_detail_panel_alone_to_htmx_and_redirects_a_browser(viewer_client, story_003):
    url = f"/runs/{STORY_003}/events/e-003-claim/"
    alone = viewer_client.get(url, HTTP_HX_REQUEST="true")
    assert alone.status_code == 200 and alone.content.decode().lstrip().startswith('<aside id="detail"')
    redirect = viewer_client.get(url)
    assert redirect.status_code == 302 and redirect["Location"].endswith("?event=e-003-claim#detail")
    assert viewer_client.get(f"/runs/{STORY_003}/events/e-nowhere/", HTTP_HX_REQUEST="true").status_code == 404


def test_the_detail_panel_names_an_events_workspace_once(viewer_client, story_003):
    # Issue 38's tour: a tool.call's panel listed "workspace ws-1" twice (its facts, then the panel's own row).
    for event_id in ("e-003-a1-call-apply-patch", "e-003-a1-call-read-adapter", "e-003-claim"):
        html = viewer_client.get(f"/runs/{STORY_003}/events/{event_id}/", HTTP_HX_REQUEST="true").content.decode()
        panel = html[html.index('<dl class="kv">') : html.index("</dl>")]
        assert panel.count("<dt>workspace</dt>") <= 1, event_id
    call = viewer_client.get(
        f"/runs/{STORY_003}/events/e-003-a1-call-apply-patch/", HTTP_HX_REQUEST="true"
    ).content.decode()
    assert "<dt>workspace</dt><dd>ws-1</dd>" in call


def test_it_downloads_a_blob_as_an_attachment_that_runs_nothing(viewer_client, story_000):
    event = Event.objects.get(run__run_id=STORY_000, event_id="e-000r-res-status")
    response = viewer_client.get(f"/runs/{STORY_000}/blobs/{event.body['blob']}/")
    assert response.status_code == 200
    assert response["Content-Type"] == "application/octet-stream"
    assert response["Content-Disposition"].startswith("attachment")
    assert response["X-Content-Type-Options"] == "nosniff"
    assert "sandbox" in response["Content-Security-Policy"]
    assert b"req-7781" in b"".join(response.streaming_content)
    assert viewer_client.get(f"/runs/{STORY_000}/blobs/sha256:{'0' * 64}/").status_code == 404
    assert viewer_client.get(f"/runs/{STORY_003}/blobs/{event.body['blob']}/").status_code == 404  # not its run's


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


PRODUCERS = Path(__file__).resolve().parents[1] / "data" / "producers"


def _model_chip(html: str) -> str:
    chip = re.search(r'<li class="chip"><span class="chip-k">model</span>(.*?)</li>', html, re.S)
    assert chip is not None
    return " ".join(chip.group(1).split())


def test_the_model_chip_names_a_version_only_when_it_differs_from_the_name(viewer_client, story_003):
    # The GenAI producer's trace names gpt-4o-mini as the requested and the answering model: said once, not twice
    # (seen side by side with Phoenix, docs/trace-reader-comparison.md).
    out = io.StringIO()
    call_command("import_run", str(PRODUCERS / "genai-openai.otlp.json"), "--json", stdout=out)
    run_id = json.loads(out.getvalue())["run"]
    html = viewer_client.get(reverse("runs:run-detail", args=[run_id])).content.decode()
    assert _model_chip(html) == "gpt-4o-mini"
    story = viewer_client.get(reverse("runs:run-detail", args=[STORY_003])).content.decode()
    run = Run.objects.get(run_id=STORY_003)
    assert run.model_version and run.model_version != run.model_name
    assert _model_chip(story) == f"{run.model_name} {run.model_version}"
