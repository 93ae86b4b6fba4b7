"""Issue 20, point 1: findings streamed like events.

A run whose every event names something missing has a finding per event. The checker yields them one source event
at a time (`LineageGraph.iter_findings`), the importer writes them in batches and answers with the first
FINDINGS_IN_ANSWER and a count, the API lists them page by page, the lineage re-check bounds its answer the same
way, and the run page says how many it groups. Bundles come from the real producers: the demo's stories (every
lineage code) and the benchmark's generator of dangling references (benchmarks/synth.py).
"""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from benchmarks import synth
from n17q_demo import stories
from n17q_engine.lineage import LineageGraph
from runs import importer, selectors
from runs.importer import FINDINGS_IN_ANSWER, run_import_from_path
from runs.models import Event, Finding, Run
from tests import bundles

pytestmark = pytest.mark.django_db

EVENTS = 250  # more than the answer's FINDINGS_IN_ANSWER and the verdict's 200, several write batches


def _old_order(graph: LineageGraph) -> list:
    """`findings()` as it was before issue 20: every source's findings gathered, then one global sort."""
    sources: dict[str, None] = dict.fromkeys(graph._decisions)
    for group in (graph._intents, graph._admissions, graph._claims, graph._found, graph._unresolved):
        sources.update(dict.fromkeys(group))
    return graph._sorted(f for event_id in sources for f in graph._findings_from(event_id))


@pytest.fixture
def dangling(tmp_path):
    folder = tmp_path / "dangling"
    synth.write_dangling_bundle(folder, EVENTS)
    return folder


def test_the_iterator_yields_what_findings_did_in_the_same_order():
    checked = 0
    for story in stories.demo_bundles():
        graph = LineageGraph(story.manifest["run"])
        for event in story.events:
            graph.add(event)
        expected = _old_order(graph)
        assert list(graph.iter_findings()) == expected == graph.findings(), story.story
        assert {f.code for f in expected} == set(story.expected_codes), story.story
        checked += len(expected)
    assert checked >= 10  # the stories hold every code between them


def test_an_out_of_order_graph_still_sorts_by_seq():
    story = next(s for s in stories.demo_bundles() if s.story.startswith("003"))
    graph = LineageGraph(story.manifest["run"])
    for event in reversed(story.events):  # hand-fed, against the reader's rule: the fallback sorts
        graph.add(event)
    assert list(graph.iter_findings()) == _old_order(graph)


def test_the_import_writes_every_finding_in_batches_and_answers_with_the_first(dangling, monkeypatch):
    monkeypatch.setattr(importer, "FINDING_BATCH", 64)
    # The importer never asks for the whole list.
    monkeypatch.setattr(LineageGraph, "findings", lambda self: pytest.fail("findings() holds every finding"))
    result = run_import_from_path(dangling)
    answer = result.to_json()
    run = Run.objects.get(run_id=f"bench-dangling-{EVENTS}")
    assert answer["events"] == EVENTS and answer["finding_count"] == EVENTS and answer["findings_truncated"] is True
    assert len(answer["findings"]) == FINDINGS_IN_ANSWER
    assert answer["findings_url"] == f"/api/v1/runs/bench-dangling-{EVENTS}/findings/"
    assert all(set(f) == {"code", "severity", "from", "to", "message"} for f in answer["findings"])
    assert {f["code"] for f in answer["findings"]} == {"LIN011"}
    assert len(json.dumps(answer)) < 64 * 1024
    stored = list(Finding.objects.filter(run=run).order_by("id"))
    assert len(stored) == EVENTS and run.finding_count == EVENTS and run.error_count == 0  # LIN011 is a warning
    events = dict(Event.objects.filter(run=run).values_list("event_id", "pk"))
    ids = list(Event.objects.filter(run=run).order_by("seq").values_list("event_id", flat=True))
    # In the checker's order (the events' seq), each finding tied to its event, the answer's the first of them.
    assert [f.from_ref for f in stored] == ids
    assert all(f.from_event_id == events[f.from_ref] and f.to_event_id is None for f in stored)
    assert [f["from"] for f in answer["findings"]] == ids[:FINDINGS_IN_ANSWER]


def test_a_run_with_few_findings_answers_with_all_of_them(tmp_path):
    folder = tmp_path / "few"
    synth.write_dangling_bundle(folder, 3)
    answer = run_import_from_path(folder).to_json()
    assert len(answer["findings"]) == answer["finding_count"] == 3 and answer["findings_truncated"] is False


def test_the_api_lists_the_findings_page_by_page(client, role_user, dangling):
    run_import_from_path(dangling)
    client.force_login(role_user("viewer"))
    url = reverse("api-run-findings", args=[f"bench-dangling-{EVENTS}"])
    first = client.get(url).json()
    assert first["count"] == EVENTS and len(first["results"]) == 50  # PAGE_SIZE
    page = client.get(url, {"limit": 100, "offset": 200}).json()
    assert len(page["results"]) == EVENTS - 200 and page["next"] is None
    everything = []
    offset = 0
    while True:
        got = client.get(url, {"limit": 80, "offset": offset}).json()["results"]
        if not got:
            break
        everything += got
        offset += 80
    stored = Finding.objects.filter(run__run_id=f"bench-dangling-{EVENTS}").order_by("id")
    assert everything == [
        {"code": f.code, "severity": f.severity, "from": f.from_ref, "to": f.to_ref, "message": f.message}
        for f in stored
    ]
    assert client.get(url, {"limit": "many"}).status_code == 400
    assert client.get(reverse("api-run-findings", args=["no-such-run"])).status_code == 404


def test_the_import_answer_through_the_api_is_bounded(client, role_user, dangling, tmp_path):
    from rest_framework.test import APIClient

    api = APIClient()
    api.force_authenticate(role_user("operator"))
    archive = bundles.zip_folder(dangling, tmp_path / "d.zip")
    with open(archive, "rb") as fh:
        response = api.post(reverse("api-runs"), {"bundle": fh}, format="multipart")
    assert response.status_code == 201, response.content[:300]
    body = response.json()
    assert body["finding_count"] == EVENTS and len(body["findings"]) == FINDINGS_IN_ANSWER
    assert body["findings_truncated"] is True and body["findings_url"].endswith("/findings/")


def test_the_lineage_recheck_is_bounded_and_counted(dangling, capsys):
    run_import_from_path(dangling)
    run = Run.objects.get(run_id=f"bench-dangling-{EVENTS}")
    answer = selectors.run_lineage_json(run, limit=10)
    assert len(answer["findings"]) == 10 and answer["finding_count"] == EVENTS and answer["findings_truncated"]
    assert answer["error_count"] == 0
    stored = list(Finding.objects.filter(run=run).order_by("id").values_list("from_ref", flat=True)[:10])
    assert [f["from"] for f in answer["findings"]] == stored
    call_command("lineage", run.run_id, "--json")
    printed = json.loads(capsys.readouterr().out)
    assert printed["finding_count"] == EVENTS and len(printed["findings"]) == EVENTS  # under the CLI's 1,000
    call_command("lineage", run.run_id)
    assert capsys.readouterr().out.splitlines()[0] == f"{run.run_id}: {EVENTS} lineage findings"


def test_the_run_page_says_how_many_findings_it_groups(client, role_user, dangling):
    run_import_from_path(dangling)
    client.force_login(role_user("viewer"))
    html = client.get(reverse("runs:run-detail", args=[f"bench-dangling-{EVENTS}"])).content.decode()
    assert f"The first 200 of {EVENTS} findings are grouped here." in html


def _stored(run_id: str) -> tuple[list, list]:
    run = Run.objects.get(run_id=run_id)
    names: dict[int | None, str] = dict(Event.objects.filter(run=run).values_list("pk", "event_id"))
    edges = sorted(
        (names[e.source_id], e.field, e.target_ref, names.get(e.target_event_id), e.target_object_id is not None)
        for e in run.edges.all()
    )
    findings = [
        (f.code, f.from_ref, f.to_ref, names.get(f.from_event_id), names.get(f.to_event_id), f.message)
        for f in Finding.objects.filter(run=run).order_by("id")
    ]
    return edges, findings


@pytest.mark.parametrize("story_index", range(len(stories.demo_bundles())))
def test_an_import_whose_checker_state_moved_to_disk_stores_the_same_edges_and_findings(
    tmp_path, monkeypatch, story_index
):
    """The same bundle imported twice under two run ids, once with the checker's state in memory and once moved to
    disk after two events (as a large run's is): the same edges, resolved to the same events and objects, and the
    same findings tied to the same events, in the same order."""
    from n17q_engine import spill
    from n17q_engine.lineage import graph as lineage_graph

    story = stories.demo_bundles()[story_index]
    answers = []
    for name, spill_after in (("memory", None), ("disk", 2)):
        if spill_after is not None:
            monkeypatch.setattr(spill, "SPILL_AFTER", spill_after)
            monkeypatch.setattr(lineage_graph, "_SPILL_CHECK_EVERY", 1)
        manifest = json.loads(json.dumps(story.manifest))
        manifest["run"]["id"] = f"{manifest['run']['id']}-{name}"
        folder = bundles.write_folder(tmp_path / name, manifest, story.events, story.blobs)
        answers.append((manifest["run"]["id"], run_import_from_path(folder).to_json()))
    (memory_id, memory), (disk_id, disk) = answers
    # A message may name the run it is about (LIN005: "this is <run>"): compared with the run's own id left out.
    assert _same(_stored(memory_id), memory_id) == _same(_stored(disk_id), disk_id)
    assert _stored(memory_id)[0]  # the stories hold edges
    assert _same({k: v for k, v in memory.items() if k != "run"}, memory_id) == _same(
        {k: v for k, v in disk.items() if k != "run"}, disk_id
    )


def _same(value, run_id: str):
    return json.loads(json.dumps(value).replace(run_id, "<run>"))


def test_a_large_import_on_sqlite_runs_with_a_bounded_page_cache_and_gives_it_back(dangling, monkeypatch):
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("the page cache bound is SQLite's")
    seen = []
    real = importer._write_findings

    def during(*args, **kwargs):
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA cache_size")
            seen.append(cursor.fetchone()[0])
        return real(*args, **kwargs)

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        before = cursor.fetchone()[0]
    monkeypatch.setattr(importer, "LARGE_IMPORT_LINES", EVENTS - 1)
    monkeypatch.setattr(importer, "_write_findings", during)
    assert run_import_from_path(dangling).finding_count == EVENTS
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        after = cursor.fetchone()[0]
    assert seen == [-importer.LARGE_IMPORT_CACHE_KIB] and after == before != seen[0]
