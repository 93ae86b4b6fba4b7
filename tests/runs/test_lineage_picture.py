"""The lineage picture explains itself (issue 15, point 4): tool calls and results drawn, a shape per family and
whole-word labels, numbered broken edges with a legend beside the picture, nothing drawn over anything else, a
finding selected with its two ends, windows with a fixed query count whatever the run's size."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from benchmarks import synth
from n17q_demo import stories
from runs.importer import run_import_from_path
from runs.lineage_picture import (
    FAMILIES,
    LABEL_CHARS,
    PICTURE_LEAD,
    PICTURE_WINDOW,
    Box,
    Picture,
    picture_build,
)
from runs.models import Event, Finding, Run
from runs.run_page import focus_resolve

pytestmark = pytest.mark.django_db

STORY_000 = "run-000-fail-open-replay"
STORY_001 = "run-001-naive-replay"
STORY_003 = "run-003-review-request"
DENSE = "dense-run"


def _import_stories(folder: Path) -> list[str]:
    run_ids = []
    for bundle in stories.demo_bundles():
        run_id = bundle.manifest["run"]["id"]
        run_import_from_path(stories.write_bundle(bundle, folder / run_id))
        run_ids.append(run_id)
    return run_ids


@pytest.fixture
def demo_runs(tmp_path) -> list[str]:
    return _import_stories(tmp_path)


def dense_bundle(folder: Path, n: int) -> Path:
    """benchmarks/synth.py's realistic run made a fixture rerun with findings all along it: every third tool result
    came from the live service (LIN014, from the result to its call), its intents aim at the live namespace (LIN007)
    on the strength of the recorded run's approvals (LIN005); and one late result answers the run's first call, a
    finding whose ends no window of the picture can hold together, and another answers a call nobody made."""
    synth.write_bundle(folder, n)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["run"].update(id=DENSE, environment="fixture", mode="rerun")
    (folder / "manifest.json").write_text(json.dumps(manifest))
    events = [json.loads(line) for line in (folder / "events.jsonl").read_text().splitlines()]
    first_call = next(e["id"] for e in events if e["kind"] == "tool.call")
    results = [e for e in events if e["kind"] == "tool.result"]
    for i, result in enumerate(results):
        if i % 3 == 0:
            result["origin"] = "live"
    results[-10]["call_id"] = first_call
    results[-10]["origin"] = "live"
    results[-20]["call_id"] = "call-nobody-made"  # a dangling reference (LIN011)
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    return folder


@pytest.fixture(scope="module")
def dense_10000(tmp_path_factory) -> Path:
    return dense_bundle(tmp_path_factory.mktemp("dense") / "bundle", 10_000)


@pytest.fixture(scope="module")
def dense_2000(tmp_path_factory) -> Path:
    return dense_bundle(tmp_path_factory.mktemp("dense") / "bundle", 2_000)


def _overlaps(a: Box, b: Box) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def assert_nothing_overlaps(pic: Picture, where: str) -> None:
    """No text box (label, lane name, badge) meets another or a node; everything lies inside the picture."""
    texts, nodes = pic.text_boxes, pic.node_boxes
    for i, (name, box) in enumerate(texts):
        for other, other_box in texts[i + 1 :] + nodes:
            assert not _overlaps(box, other_box), (where, name, box, other, other_box)
    for name, box in texts + nodes:
        assert box[0] >= 0 and box[1] >= 0 and box[2] <= pic.width and box[3] <= pic.height, (where, name, box)


def _picture(run_id: str, **kwargs) -> Picture:
    run = Run.objects.get(run_id=run_id)
    focus = kwargs.pop("focus", None)
    return picture_build(run, focus=focus_resolve(run, focus) if focus else None, **kwargs)


def _node(pic: Picture, event_id: str):
    return next(n for n in pic.nodes if n.event_id == event_id)


def test_it_draws_tool_calls_and_results_and_the_live_results_broken_edge(demo_runs):
    pic = _picture(STORY_000)
    kinds = {n.kind for n in pic.nodes}
    assert {"tool.call", "tool.result"} <= kinds
    assert "model.proposal" not in kinds and "replay.scope" not in kinds
    assert _node(pic, "e-000r-call-status").label == "status.lookup"
    assert _node(pic, "e-000r-res-status").label == "result: live"
    assert _node(pic, "e-000r-res-search").label == "result: fixture"
    [edge] = pic.broken
    assert (edge.number, edge.code, edge.from_ref, edge.to_ref) == (
        1,
        "LIN014",
        "e-000r-res-status",
        "e-000r-call-status",
    )
    # A result sits in its call's lane, beside it.
    assert _node(pic, "e-000r-res-status").lane == _node(pic, "e-000r-call-status").lane


def test_it_gives_each_family_a_shape_and_each_node_whole_distinct_words(demo_runs):
    assert len({f.shape for f in FAMILIES}) == len(FAMILIES)
    pic = _picture(STORY_003)
    labels = {n.event_id: n.label for n in pic.nodes}
    assert labels["e-003-focused-receipt"] == "receipt adapter"
    assert labels["e-003-broad-receipt"] == "receipt unit +2"
    assert labels["e-003-focused-admitted"] == "admitted focused"
    assert labels["e-003-broad-admitted-diagnosis"] == "admitted diagnosis"
    assert labels["e-003-ws-1-uncertain"] == "ws-1 uncertain"
    assert labels["e-003-policy-allow"] == "policy allow"
    assert labels["e-003-intent-review-request"] == "intent review-service"
    assert labels["e-003-a1-call-focused"] == "shell.run"
    shapes = {n.family: n.d.split()[0][0] for n in pic.nodes}
    assert {"state", "workspace", "evidence", "tool", "authority", "effect", "claim"} <= set(shapes)
    for run_id in demo_runs:
        for n in _picture(run_id).nodes:
            # Whole words: a label is whole, or cut with "…" and told whole in the node's title.
            assert n.label == n.full_label or (n.label.endswith("…") and n.full_label.startswith(n.label[:-1]))
            assert len(n.label) <= LABEL_CHARS


@pytest.mark.parametrize("run_id", [b.manifest["run"]["id"] for b in stories.demo_bundles()])
def test_it_places_no_label_over_another_or_over_a_node_in_the_demo_runs(tmp_path, run_id):
    _import_stories(tmp_path)
    assert_nothing_overlaps(_picture(run_id), run_id)
    for finding in Finding.objects.filter(run__run_id=run_id):
        assert_nothing_overlaps(_picture(run_id, finding_id=finding.pk), f"{run_id} finding {finding.pk}")
    for event_id in Event.objects.filter(run__run_id=run_id).values_list("event_id", flat=True)[:5]:
        assert_nothing_overlaps(_picture(run_id, focus=event_id), f"{run_id} focus {event_id}")


@pytest.mark.database_incidental
def test_it_places_no_label_over_another_or_over_a_node_in_a_dense_run(dense_2000):
    run_import_from_path(dense_2000)
    run = Run.objects.get(run_id=DENSE)
    total = 0
    for start in range(0, 2000, 97):
        pic = picture_build(run, focus=None, start_seq=start)
        assert len(pic.nodes) == PICTURE_WINDOW or not pic.has_more
        assert_nothing_overlaps(pic, f"window from {start}")
        total += len(pic.broken)
    assert total > 100  # the dense run's windows are full of numbered edges
    for finding in Finding.objects.filter(run=run).order_by("id")[::7]:
        assert_nothing_overlaps(picture_build(run, focus=None, finding_id=finding.pk), f"finding {finding.pk}")


def test_a_lane_that_starts_further_right_says_where(demo_runs):
    # Issue 38's tour: story 003's a2 and ws-2 lanes looked empty in the pane (their events are right of it).
    pic = _picture(STORY_003)
    notes = {lane.key: lane.note for lane in pic.lanes}
    late = {key: note for key, note in notes.items() if note}
    assert sorted(late.values()) == ["first event: seq 28 \u2192", "first event: seq 29 \u2192"]
    assert all(lane.note == "" for lane in pic.lanes if lane.name in ("a1", "ws-1"))
    assert_nothing_overlaps(pic, "story 003")  # the notes are in the lanes' empty stretch
    assert all(not lane.note for lane in _picture(STORY_000).lanes)  # a lane that starts in view says nothing


def test_it_selects_exactly_a_findings_edge_and_its_two_ends(demo_runs):
    finding = Finding.objects.get(run__run_id=STORY_003, code="LIN001", from_ref="e-003-intent-review-request")
    pic = _picture(STORY_003, finding_id=finding.pk)
    [selected] = [e for e in pic.broken if e.selected]
    assert selected.pk == finding.pk and selected.code == "LIN001"
    assert sorted(n.event_id for n in pic.nodes if n.selected) == [
        "e-003-focused-admitted",
        "e-003-intent-review-request",
    ]
    assert pic.selected is not None and pic.selected.number == selected.number and not pic.selected.why_not
    # Without a selection nothing is selected.
    assert not any(n.selected for n in _picture(STORY_003).nodes)
    # A finding on one event (a claim contradicting itself) selects that event alone.
    own = Finding.objects.get(run__run_id=STORY_003, code="LIN008", from_ref="e-003-claim", to_ref="e-003-claim")
    pic = _picture(STORY_003, finding_id=own.pk)
    assert [n.event_id for n in pic.nodes if n.selected] == ["e-003-claim"]
    assert [e.pk for e in pic.broken if e.selected] == [own.pk]


def test_it_moves_the_window_to_a_finding_deep_in_a_large_run(dense_2000):
    run_import_from_path(dense_2000)
    run = Run.objects.get(run_id=DENSE)
    first_call = Event.objects.filter(run=run, kind="tool.call").order_by("seq").first()
    near = Finding.objects.filter(run=run, code="LIN014").exclude(to_ref=first_call.event_id).order_by("id")
    finding = near[near.count() // 2]
    pic = picture_build(run, focus=None, finding_id=finding.pk)
    ends = {finding.from_ref, finding.to_ref}
    assert {n.event_id for n in pic.nodes if n.selected} == ends
    assert [e.pk for e in pic.broken if e.selected] == [finding.pk]
    # Both ends in the window, the earlier one a little after its start.
    earlier = min(n.col for n in pic.nodes if n.event_id in ends)
    assert earlier == PICTURE_LEAD
    assert pic.prev_start is not None
    # Near the run's end the window is filled with earlier events.
    last = Event.objects.filter(run=run).order_by("-seq").first()
    end = picture_build(run, focus=focus_resolve(run, last.event_id))
    assert len(end.nodes) == PICTURE_WINDOW and end.nodes[-1].event_id == last.event_id and not end.has_more
    # A window chosen by hand wins; the finding is then named, not drawn.
    elsewhere = picture_build(run, focus=None, start_seq=10, finding_id=finding.pk)
    assert 10 <= elsewhere.start_seq < 20 and elsewhere.selected.why_not == "window"
    assert not any(n.selected for n in elsewhere.nodes) and not any(e.selected for e in elsewhere.broken)


def test_it_says_when_a_findings_ends_are_too_far_apart(dense_2000):
    run_import_from_path(dense_2000)
    run = Run.objects.get(run_id=DENSE)
    first_call = Event.objects.filter(run=run, kind="tool.call").order_by("seq").first()
    # The late result answering the first call (the first call's own result is a finding on it too).
    far = Finding.objects.filter(run=run, code="LIN014", to_ref=first_call.event_id).order_by("-from_event__seq")[0]
    pic = picture_build(run, focus=None, finding_id=far.pk)
    assert pic.selected is not None and pic.selected.why_not == "apart" and pic.selected.number is None
    assert not any(e.selected for e in pic.broken) and not any(n.selected for n in pic.nodes)
    # The window shows the earlier end.
    assert first_call.event_id in {n.event_id for n in pic.nodes}
    # A dangling reference has one end only: the window shows it, and the finding says why there is no edge.
    dangling = Finding.objects.get(run=run, code="LIN011")
    pic = picture_build(run, focus=None, finding_id=dangling.pk)
    assert pic.selected.why_not == "dangling" and dangling.from_ref in {n.event_id for n in pic.nodes}
    # A finding of another run is no selection.
    other = picture_build(run, focus=None, finding_id=10**9)
    assert other.selected is None and other.finding_asked


def test_it_shows_the_legend_beside_the_picture_with_links_that_keep_the_page(client, role_user, demo_runs):
    client.force_login(role_user("viewer"))
    finding = Finding.objects.get(run__run_id=STORY_003, code="LIN001", from_ref="e-003-intent-review-request")
    html = client.get(f"/runs/{STORY_003}/?facet=evidence&finding={finding.pk}").content.decode()
    picture = html[html.index('<section id="picture"') :]
    legend = picture[picture.index('<aside class="picture-legend"') :]
    # Every broken edge has a numbered row: its number links to the finding, its code to the glossary.
    rows = re.findall(r'<li class="picture-finding[^"]*" id="picture-finding-(\d+)">(.*?)</li>', legend, re.S)
    assert len(rows) == 6
    row = dict(rows)[str(finding.pk)]
    assert (
        f'href="?facet=evidence&amp;finding={finding.pk}&amp;event=e-003-intent-review-request#picture-edge-{finding.pk}"'
        in row
    )
    assert 'href="/glossary/#LIN001"' in row and "aria-current" in row
    assert "From <code>e-003-intent-review-request</code> to <code>e-003-focused-admitted</code>" in row
    # The badge in the picture links the same way; only this finding's edge is selected.
    assert len(re.findall(r'<g class="broken-edge selected"', picture)) == 1
    assert re.search(
        rf'<a href="\?facet=evidence&amp;finding={finding.pk}&amp;[^"]*" class="edge-badge selected"', picture
    )
    # The SVG is a labelled group of links, each with words of its own.
    assert re.search(r'<svg [^>]*role="group" aria-labelledby="picture-title"', picture)
    nodes = re.findall(
        r'<a href="[^"]+" id="pic-[^"]+" class="node [^"]*" data-event="[^"]+"\s+aria-label="([^"]+)"', picture
    )
    assert len(nodes) == len(_picture(STORY_003).nodes)
    assert "receipt unit +2: command.receipt e-003-broad-receipt, seq 22. Focus it" in nodes
    # The key of the shapes is text, one entry per family.
    for family in FAMILIES:
        assert family.title in legend


def test_it_says_in_the_legend_why_a_selected_finding_is_not_drawn(client, role_user, dense_2000):
    client.force_login(role_user("viewer"))
    run_import_from_path(dense_2000)
    run = Run.objects.get(run_id=DENSE)
    first_call = Event.objects.filter(run=run, kind="tool.call").order_by("seq").first()
    far = Finding.objects.filter(run=run, code="LIN014", to_ref=first_call.event_id).order_by("-from_event__seq")[0]
    html = client.get(f"/runs/{DENSE}/?finding={far.pk}").content.decode()
    note = re.search(r'<p class="selected-note" role="status">(.*?)</p>', html, re.S).group(1)
    assert f"too far apart to show in one window of {PICTURE_WINDOW} events" in note
    seqs = Event.objects.filter(run=run, event_id__in=[far.from_ref, far.to_ref]).values_list("seq", flat=True)
    for seq in seqs:
        assert f'href="?finding={far.pk}&amp;picture_start={seq}#pic-' in note
    dangling = Finding.objects.get(run=run, code="LIN011")
    html = client.get(f"/runs/{DENSE}/?finding={dangling.pk}").content.decode()
    assert "the run holds no event <code>call-nobody-made</code> (a dangling reference)" in html


def test_it_pages_the_picture_with_earlier_and_later_windows(client, role_user, dense_2000):
    client.force_login(role_user("viewer"))
    run_import_from_path(dense_2000)
    first = client.get(f"/runs/{DENSE}/").content.decode()
    later = re.search(r'href="\?picture_start=(\d+)#picture">Later events', first).group(1)
    assert "Earlier events</a>" not in first[first.index('<section id="picture"') :]
    second = client.get(f"/runs/{DENSE}/?picture_start={later}").content.decode()
    earlier = re.search(r'href="\?picture_start=(\d+)#picture">Earlier events', second).group(1)
    first_seq = re.search(r"drawn events, seq (\d+)\u2013", first).group(1)
    assert earlier == first_seq  # the earlier window is exactly the first one


def _picture_queries(run: Run, **kwargs) -> int:
    with CaptureQueriesContext(connection) as ctx:
        picture_build(run, **kwargs)
    return len(ctx.captured_queries)


def test_it_keeps_the_picture_query_count_flat_from_a_demo_run_to_10000_events(demo_runs, dense_10000):
    run_import_from_path(dense_10000)
    small, large = Run.objects.get(run_id=STORY_003), Run.objects.get(run_id=DENSE)
    small_finding = Finding.objects.filter(run=small).order_by("id").first()
    large_finding = Finding.objects.filter(run=large).order_by("-id")[5]
    cases: dict[str, tuple[dict[str, Any], dict[str, Any], int]] = {
        # the window, its references, the findings touching it
        "start": ({"focus": None}, {"focus": None}, 3),
        # + the events before the window's start (the "Earlier events" link)
        "window": ({"focus": None, "start_seq": 20}, {"focus": None, "start_seq": 6_000}, 4),
        # + the events before the focus (lead-in and "Earlier events")
        "focus": (
            {"focus": focus_resolve(small, "e-003-intent-review-request")},
            {"focus": focus_resolve(large, large_finding.from_ref)},
            4,
        ),
        # + the finding
        "finding": (
            {"focus": None, "finding_id": small_finding.pk},
            {"focus": None, "finding_id": large_finding.pk},
            5,
        ),
    }
    for name, (small_kwargs, large_kwargs, expected) in cases.items():
        counts = [_picture_queries(small, **small_kwargs), _picture_queries(large, **large_kwargs)]
        assert counts == [expected, expected], (name, counts)
