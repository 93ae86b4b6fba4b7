"""The run list (issue 15, point 6): each run named by its title (DESIGN §10), newest created first, replays counted
on their source and listed under it when asked for, a search over ids, titles, tasks, tools and destinations, and a
query count that does not grow with the runs or their replays."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils.html import escape

from n17q_demo import stories
from n17q_engine.bundle import BundleError
from replays import services as replays
from runs.importer import run_import_from_path
from runs.models import Run
from tests import bundles
from tests.migrations_at import apps_at, migrate_to

pytestmark = pytest.mark.django_db


@pytest.fixture
def viewer_client(client, role_user):
    client.force_login(role_user("viewer"))
    return client


def import_run(
    folder: Path,
    run_id: str,
    *,
    title: Any = None,
    created_at: str | None = None,
    parent: str | None = None,
    task: str | None = None,
    tool: str | None = None,
    destination: str | None = None,
) -> Run:
    """The example bundle (tools docs.search and status.lookup, no intent) as `run_id`, with what the test names."""
    manifest, events, blobs = bundles.example_parts()
    run = manifest["run"]
    run["id"] = run_id
    if title is not None:
        run["title"] = title
    if created_at is not None:
        run["created_at"] = created_at
    if parent is not None:
        run.update(parent_run=parent, mode="rerun", environment="fixture")
    if task is not None:
        run["task"]["id"] = task
    if tool is not None:
        for event in events:
            if event["kind"] == "tool.call":
                event["tool"] = tool
    if destination is not None:
        events.append(
            {
                "seq": 10,
                "id": "e-intent",
                "kind": "effect.intent",
                "at": {"logical": "2026-07-01T09:00:10Z", "wall": "2026-07-01T09:00:10Z"},
                "attempt": "a1",
                "effect_class": "notify",
                "destination": destination,
                "artifact_id": None,
                "admission_ids": [],
                "approval_id": None,
                "idempotency_key": "k-1",
                "namespace": "live",
                "historical_intent": None,
            }
        )
    return run_import_from_path(bundles.write_folder(folder / run_id, manifest, events, blobs)).run


def listed(html: str) -> list[str]:
    """The run ids of the table's rows, in order."""
    return re.findall(r'<th scope="row" class="run-name">.*?<a href="/runs/([^/"]+)/">', html, re.S)


def row(html: str, run_id: str) -> str:
    name = (
        rf'<th scope="row" class="run-name">(?:<span class="replay-mark"[^>]*>[^<]*</span>)?<a href="/runs/{run_id}/">'
    )
    match = re.search(rf"<tr[^>]*>\s*{name}.*?</tr>", html, re.S)
    assert match, f"{run_id} is not listed"
    return match.group(0)


def page(client, url: str = "/") -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


# --- the title --------------------------------------------------------------------------------------------------


def test_it_names_a_run_by_its_title_with_its_id_beneath(viewer_client, tmp_path):
    run = import_run(tmp_path, "run-titled", title="  Key rotation research <b>by hand</b>  ")
    assert run.title == "Key rotation research <b>by hand</b>"  # stripped, kept as text
    html = row(page(viewer_client), "run-titled")
    assert '<a href="/runs/run-titled/">Key rotation research &lt;b&gt;by hand&lt;/b&gt;</a>' in html
    assert '<small class="muted run-id">run-titled</small>' in html


def test_it_names_a_run_without_a_title_by_its_id(viewer_client, tmp_path):
    for run_id, title in (("run-untitled", None), ("run-blank-title", "   ")):
        assert import_run(tmp_path, run_id, title=title).title == ""
    html = page(viewer_client)
    for run_id in ("run-untitled", "run-blank-title"):
        assert f'<a href="/runs/{run_id}/">{run_id}</a>' in row(html, run_id)
        assert "run-id" not in row(html, run_id)  # the id is not said twice


@pytest.mark.parametrize(
    ("title", "problem"),
    [
        (42, "must be a string, got int"),
        (["a", "list"], "must be a string, got list"),
        ("two\nlines", "must be one line of printable text (holds U+000A)"),
        ("tab\there", "must be one line of printable text (holds U+0009)"),
        ("reads \u202ebackwards", "must be one line of printable text (holds U+202E)"),
        ("x" * 301, "must be at most 300 characters"),
    ],
)
def test_it_refuses_a_bundle_whose_title_cannot_name_a_run(tmp_path, title, problem):
    with pytest.raises(BundleError) as refused:
        import_run(tmp_path, "run-bad-title", title=title)
    assert str(refused.value) == f"manifest.json, field run.title: {problem}"
    assert not Run.objects.exists()


def test_it_takes_a_title_of_300_characters(tmp_path):
    assert import_run(tmp_path, "run-long-title", title="é" * 300).title == "é" * 300


def test_it_prints_the_title_from_the_command_and_serves_it_from_the_api(viewer_client, tmp_path, capsys):
    manifest, events, blobs = bundles.example_parts()
    manifest["run"]["title"] = "Docs research"
    call_command("import_run", str(bundles.write_folder(tmp_path / "b", manifest, events, blobs)), "--json")
    printed = json.loads(capsys.readouterr().out)
    assert printed["title"] == "Docs research" and set(printed) >= {"run", "events", "findings"}
    assert viewer_client.get("/api/v1/runs/run-example-docs/").json()["title"] == "Docs research"
    assert viewer_client.get("/api/v1/runs/").json()["results"][0]["title"] == "Docs research"


def test_it_gives_the_demo_runs_their_titles(viewer_client, capsys):
    call_command("load_demo", "--json")
    demo = json.loads(capsys.readouterr().out)
    assert {"runs", "users"} <= set(demo)
    assert all(set(r) >= {"id", "story", "title"} for r in demo["runs"])
    titles = {b.manifest["run"]["id"]: b.title for b in stories.demo_bundles()}
    assert {r["id"]: r["title"] for r in demo["runs"]} == titles
    assert dict(Run.objects.values_list("run_id", "title")) == titles
    html = page(viewer_client, "/?replays=on")
    for run_id, title in titles.items():
        assert f">{escape(title)}</a>" in row(html, run_id)


# --- the order --------------------------------------------------------------------------------------------------


def test_it_lists_the_newest_created_run_first(viewer_client, tmp_path):
    import_run(tmp_path, "run-june", created_at="2026-06-01T00:00:00Z")
    import_run(tmp_path, "run-august", created_at="2026-08-01T00:00:00Z")
    import_run(tmp_path, "run-july", created_at="2026-07-01T00:00:00+02:00")
    import_run(tmp_path, "run-july-again", created_at="2026-06-30T22:00:00Z")  # the same instant, imported later
    assert listed(page(viewer_client)) == ["run-august", "run-july-again", "run-july", "run-june"]


# --- replays ----------------------------------------------------------------------------------------------------


@pytest.fixture
def family(tmp_path):
    """Two sources, the newer with two replays (one of which has a replay of its own), the older with none."""
    import_run(tmp_path, "run-old", title="Old source", created_at="2026-05-01T00:00:00Z")
    import_run(tmp_path, "run-src", title="Newer source", created_at="2026-06-01T00:00:00Z")
    import_run(tmp_path, "run-src-r1", parent="run-src", created_at="2026-06-02T00:00:00Z")
    import_run(tmp_path, "run-src-r2", title="Second look", parent="run-src", created_at="2026-06-03T00:00:00Z")
    import_run(tmp_path, "run-src-r2-r1", parent="run-src-r2", created_at="2026-06-04T00:00:00Z")


def test_it_hides_replays_and_counts_them_on_their_source(viewer_client, family):
    html = page(viewer_client)
    assert listed(html) == ["run-src", "run-old"]
    assert '<a href="/?source=run-src">2 replays</a>' in row(html, "run-src")
    assert "replay" not in row(html, "run-old").replace("replay-row", "")
    assert '<input type="checkbox" name="replays" id="id_replays">' in html
    assert '<label class="check">' in html and "Show replays</label>" in html


def test_a_source_row_says_what_its_hidden_replays_found(viewer_client, capsys):
    # Issue 38: with replays hidden, story 000's source read "none" while its fail-open replay had an error.
    from django.core.management import call_command

    call_command("load_demo")
    html = page(viewer_client)
    assert 'href="/?source=run-000-recorded">1 error in its replays</a>' in row(html, "run-000-recorded")
    assert 'href="/?source=run-001-recorded">3 errors in its replays</a>' in row(html, "run-001-recorded")
    assert "in its replays" not in row(html, "run-003-review-request")  # no replays: nothing to say
    # No finding is not a pass where the checks had nothing to judge: the row says how many (issue 34's honesty).
    assert "15 checks not evaluated</small>" in row(html, "run-000-recorded")
    assert 'title="LIN001, ' in row(html, "run-000-recorded")
    # Listed with their source, each replay speaks for itself.
    assert "in its replays" not in page(viewer_client, "/?replays=on")


def test_it_lists_one_source_and_its_replays_from_the_count(viewer_client, family):
    html = page(viewer_client, "/?source=run-src")
    assert listed(html) == ["run-src", "run-src-r2", "run-src-r2-r1", "run-src-r1"]
    assert listed(page(viewer_client, "/?source=run-old")) == ["run-old"]
    assert listed(page(viewer_client, "/?source=no-such-run")) == []


def test_it_lists_replays_under_their_source_when_asked(viewer_client, family):
    html = page(viewer_client, "/?replays=on")
    # Each source, then its replays newest created first, each followed by its own.
    assert listed(html) == ["run-src", "run-src-r2", "run-src-r2-r1", "run-src-r1", "run-old"]
    replay = row(html, "run-src-r1")
    assert 'class="replay-row"' in replay
    assert 'replay of <a href="/runs/run-src/">Newer source</a>' in replay
    assert 'replay of <a href="/runs/run-src-r2/">Second look</a>' in row(html, "run-src-r2-r1")
    assert '<a href="/?source=run-src-r2">1 replay</a>' in row(html, "run-src-r2")
    assert 'name="replays" id="id_replays" checked' in html
    # htmx asks for the table alone; it says replays are shown.
    table = viewer_client.get("/?replays=on", headers={"HX-Request": "true"}).content.decode()
    assert table.lstrip().startswith('<div id="run-table">') and "each replay under its source" in table


def test_it_keeps_show_replays_when_paging(viewer_client, tmp_path):
    import_run(tmp_path, "run-many", created_at="2026-06-01T00:00:00Z")
    for i in range(50):
        import_run(tmp_path, f"run-many-r{i:02d}", parent="run-many", created_at=f"2026-06-02T00:{i:02d}:00Z")
    default = page(viewer_client)
    assert listed(default) == ["run-many"] and ">50 replays</a>" in default and "Page 1 of" not in default
    shown = page(viewer_client, "/?replays=on")
    assert "Page 1 of 2" in shown and 'href="?replays=on&amp;page=2"' in shown
    assert listed(page(viewer_client, "/?replays=on&page=2")) == ["run-many-r00"]


def test_a_replay_has_its_own_title_and_keeps_its_sources_beside_it(viewer_client, capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()
    source = Run.objects.get(run_id="run-001-recorded")
    made = replays.replay_execute(replays.replay_create(source, mode="rerun").pk)
    # Its own title, from its own facts (issue 34); the source's title stays the source's, kept beside it.
    assert made.run is not None
    assert (
        made.run.title == "Rerun of run-001-recorded: delivered 1 time to mailbox:beta-customers@lists.acme.example; "
        "no validation; completed"
    )
    assert made.run.manifest_run["source_title"] == source.title
    html = page(viewer_client)
    assert made.run.run_id not in listed(html) and "run-001-naive-replay" not in listed(html)
    # The harness's naive replay and the console's own: both runs with run-001-recorded as their parent.
    assert '<a href="/?source=run-001-recorded">2 replays</a>' in row(html, "run-001-recorded")


# --- search -----------------------------------------------------------------------------------------------------


@pytest.fixture
def searchable(tmp_path):
    import_run(tmp_path, "run-alpha", title="Rotating the signing keys", task="task-rotation")
    import_run(tmp_path, "run-beta", title="Quarterly notice", tool="smtp.send", destination="mailto:beta-list@acme")
    import_run(tmp_path, "run-gamma", task="task-ledger", tool="ledger.fetch", destination="https://ledger.acme/api")
    import_run(tmp_path, "run-gamma-r1", parent="run-gamma", tool="ledger.replay-fetch")


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("signing KEYS", ["run-alpha"]),  # title, any case
        ("task-rotation", ["run-alpha"]),  # task
        ("run-beta", ["run-beta"]),  # run id
        ("smtp.send", ["run-beta"]),  # a tool of its tool.call events
        ("beta-list@", ["run-beta"]),  # a destination of its effect.intent events
        ("ledger.acme", ["run-gamma"]),
        ("docs.search", ["run-alpha"]),  # the example's own tool, kept where no tool was renamed
        ("replay-fetch", ["run-gamma-r1"]),  # a search finds a replay too, its source named beside it
        ("nowhere", []),
    ],
)
def test_it_finds_a_run_by_its_id_title_task_tool_or_destination(viewer_client, searchable, query, found):
    html = page(viewer_client, f"/?q={query}")
    assert listed(html) == found
    if found == ["run-gamma-r1"]:
        assert 'replay of <a href="/runs/run-gamma/">run-gamma</a>' in row(html, "run-gamma-r1")
    if not found:
        assert "No runs match." in html


def test_it_keeps_the_tools_and_destinations_it_searches_on_the_run(searchable):
    beta = Run.objects.get(run_id="run-beta")
    assert (beta.tools, beta.destinations) == ("smtp.send", "mailto:beta-list@acme")
    alpha = Run.objects.get(run_id="run-alpha")
    assert (alpha.tools, alpha.destinations) == ("docs.search\nstatus.lookup", "")


# --- query count ------------------------------------------------------------------------------------------------


def queries(client, url: str, headers: dict[str, str] | None = None) -> tuple[int, list[str]]:
    with CaptureQueriesContext(connection) as ctx:
        response = client.get(url, headers=headers or {})
    assert response.status_code == 200
    return len(ctx.captured_queries), [q["sql"] for q in ctx.captured_queries]


URLS = ["/", "/?replays=on", "/?q=run", "/?q=run&replays=on&mode=recorded&findings=no&page=1"]


def test_it_keeps_the_run_list_query_count_flat(viewer_client, tmp_path):
    import_run(tmp_path, "run-first")
    before = {url: queries(viewer_client, url) for url in URLS}
    # 1 the session, 2 the user, 3-4 the user's and the groups' permissions (the header's links), 5 the pager's
    # count, 6 the user's groups (the role in the header), 7 the page: the runs with their replay counts (a
    # subquery) and their sources' titles (a join).
    assert [count for count, _ in before.values()] == [7, 7, 7, 7]
    for i in range(6):
        import_run(tmp_path, f"run-source-{i}", title=f"Source {i}")
        for j in range(3):
            import_run(tmp_path, f"run-source-{i}-r{j}", parent=f"run-source-{i}")
    after = {url: queries(viewer_client, url) for url in URLS}
    for url in URLS:
        assert after[url][0] == before[url][0], (url, after[url][1])
    assert queries(viewer_client, "/?replays=on", {"HX-Request": "true"})[0] == before["/?replays=on"][0]
    assert len(listed(page(viewer_client, "/?replays=on"))) == 25


# --- runs imported before the title ------------------------------------------------------------------------------

BEFORE = [("runs", "0012_run_made_by_replay")]


@pytest.mark.django_db(transaction=True)
def test_it_fills_the_title_tools_and_destinations_of_runs_imported_before_them():
    migrate_to(BEFORE)
    try:
        apps = apps_at(BEFORE)
        run_model, event_model = apps.get_model("runs", "Run"), apps.get_model("runs", "Event")
        at = "2026-07-01T09:00:00+00:00"
        for run_id, title in (("run-then", "  Imported before titles  "), ("run-then-bad", "two\nlines")):
            run = run_model.objects.create(
                run_id=run_id,
                task_id="t",
                task_revision="r1",
                environment="live",
                mode="recorded",
                model_name="m",
                model_version="1",
                policy_revision="p",
                created_at=at,
                manifest_run={"id": run_id, "title": title},
                bundle_digest="sha256:" + "0" * 64,
            )
            bodies = [
                ("tool.call", {"tool": "docs.search"}),
                ("tool.call", {"tool": "status.lookup"}),
                ("tool.call", {"tool": "docs.search"}),
                ("effect.intent", {"destination": "mailto:list@acme"}),
                ("tool.result", {"tool": "not-a-call"}),
            ]
            for seq, (kind, body) in enumerate(bodies, 1):
                event_model.objects.create(
                    run=run, seq=seq, event_id=f"e{seq}", kind=kind, logical_at=at, wall_at=at, body=body
                )
    finally:
        migrate_to()
    then = Run.objects.get(run_id="run-then")
    assert (then.title, then.tools, then.destinations) == (
        "Imported before titles",
        "docs.search\nstatus.lookup",
        "mailto:list@acme",
    )
    # A title no bundle could carry today names nothing: the run keeps its id as its name.
    assert Run.objects.get(run_id="run-then-bad").title == ""
