"""The search over runs (issue 38 §3): each filter of the run list and the API, URLs that keep the view, refusals in one
line, a bounded count, the cost filter's count of runs it could not judge, pinned queries, and the span search."""

from __future__ import annotations

import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils.html import escape

from runs.importer import run_import_from_path
from runs.models import Run, RunSummary
from runs.summary import summary_compute
from tests import bundles

pytestmark = pytest.mark.django_db

PRICES = {"gpt-4o-mini": {"input": "0.15", "output": "0.60", "currency": "USD"}}


@pytest.fixture
def viewer_client(client, role_user):
    client.force_login(role_user("viewer"))
    return client


@pytest.fixture(autouse=True)
def prices(settings):
    settings.N17Q_MODEL_PRICES = __import__("n17q_engine.pricing", fromlist=["price_table"]).price_table(PRICES)


def make(
    folder: Path,
    run_id: str,
    *,
    created_at: str = "2026-07-01T09:00:00Z",
    tool: str | None = None,
    model: str | None = None,
    tokens: tuple[int, int] | None = None,
    total_only: int | None = None,
    dangling: bool = False,
    parent: str | None = None,
    title: str | None = None,
) -> Run:
    """The example bundle (tools docs.search and status.lookup, model example-model, one model call) as `run_id`."""
    manifest, events, blobs = bundles.example_parts()
    run = manifest["run"]
    run.update(id=run_id, created_at=created_at)
    if title is not None:
        run["title"] = title
    if parent is not None:
        run.update(parent_run=parent, mode="rerun", environment="fixture")
    for event in events:
        if tool is not None and event["kind"] == "tool.call" and event["tool"] == "docs.search":
            event["tool"] = tool
        if model is not None and event["kind"] == "model.proposal":
            event["model"] = model
        if dangling and event["kind"] == "account.claim":
            event["supports"] = ["e-res1", "e-missing"]
    at = {"logical": "2026-07-01T09:00:08Z", "wall": "2026-07-01T09:00:08Z"}
    if tokens is not None or total_only is not None:
        charge: dict[str, Any] = {"seq": 20, "id": "e-charge", "kind": "budget.charged", "at": at, "attempt": "a1"}
        charge["resource"] = "tokens"
        if tokens is not None:
            charge.update(amount=sum(tokens), input_tokens=tokens[0], output_tokens=tokens[1])
        else:
            charge["amount"] = total_only
        if model is not None:
            charge["model"] = model
        events.append(charge)
    return run_import_from_path(bundles.write_folder(folder / run_id, manifest, events, blobs)).run


def listed(html: str) -> list[str]:
    return re.findall(r'<th scope="row" class="run-name">.*?<a href="/runs/([^/"]+)/">', html, re.S)


def get(client, url: str, status: int = 200) -> str:
    response = client.get(url)
    assert response.status_code == status, response.content[:500]
    return response.content.decode()


@pytest.fixture
def runs(tmp_path):
    make(tmp_path, "run-mini", created_at="2026-07-03T09:00:00Z", model="gpt-4o-mini", tokens=(1000, 200))
    make(tmp_path, "run-big", created_at="2026-07-02T09:00:00Z", model="gpt-4o-mini", tokens=(200_000, 50_000))
    make(tmp_path, "run-claude", created_at="2026-07-01T09:00:00Z", model="claude-3-5", tokens=(10, 10))
    make(tmp_path, "run-mail", created_at="2026-06-20T09:00:00Z", tool="smtp.send", dangling=True)
    make(tmp_path, "run-native", created_at="2026-06-10T09:00:00Z", total_only=500, title="Native tokens")
    make(tmp_path, "run-mini-r1", created_at="2026-07-04T09:00:00Z", parent="run-mini", model="gpt-4o-mini")


def test_it_keeps_a_summary_per_run_at_import(runs):
    mini = RunSummary.objects.get(run__run_id="run-mini")
    assert (mini.kind, mini.model_list, mini.model_calls, mini.tokens_in, mini.tokens_out, mini.tokens) == (
        "recorded",
        ["gpt-4o-mini"],
        1,
        1000,
        200,
        1200,
    )
    # 1000 * 0.15 / 1e6 + 200 * 0.60 / 1e6
    assert (mini.cost, mini.currency) == (Decimal("0.000270"), "USD")
    assert RunSummary.objects.get(run__run_id="run-claude").cost is None  # not priced: not evaluated, never 0
    native = RunSummary.objects.get(run__run_id="run-native")
    # The run's own model, a total without the split: tokens known, in and out not, so no cost.
    assert (native.model_list, native.tokens, native.tokens_in, native.cost) == (["example-model"], 500, None, None)
    mail = RunSummary.objects.get(run__run_id="run-mail")
    assert mail.tool_list == ["smtp.send", "status.lookup"] and mail.code_list and mail.outcome != "clean"
    # No charge recorded for a model call: tokens unknown, not 0.
    assert mail.tokens is None and mail.cost is None
    assert RunSummary.objects.get(run__run_id="run-mini-r1").kind == "replay"


def test_the_stored_summary_is_what_the_events_say(runs):
    for summary in RunSummary.objects.select_related("run"):
        again = summary_compute(summary.run)
        for name in ("kind", "outcome", "tools", "model_names", "codes", "model_calls", "tokens", "tokens_in", "cost"):
            assert getattr(again, name) == getattr(summary, name), (summary.run.run_id, name)


@pytest.mark.parametrize(
    ("query", "found"),
    [
        ("tool=smtp", ["run-mail"]),
        ("tool=status.lookup", ["run-mini-r1", "run-mini", "run-big", "run-claude", "run-mail", "run-native"]),
        ("model=gpt-4o", ["run-mini-r1", "run-mini", "run-big"]),
        ("model=claude", ["run-claude"]),
        ("kind=replay", ["run-mini-r1"]),
        ("kind=recorded&model=gpt", ["run-mini", "run-big"]),
        ("outcome=clean&tool=smtp", []),
        ("created_from=2026-07-02&created_to=2026-07-03", ["run-mini", "run-big"]),
        ("created_to=2026-06-30", ["run-mail", "run-native"]),
        ("started_from=2026-07-01&tool=smtp", ["run-mail"]),
        ("tokens_min=1000", ["run-mini", "run-big"]),
        ("tokens_max=600", ["run-claude", "run-native"]),
        ("tokens_min=100&tokens_max=2000", ["run-mini", "run-native"]),
        ("cost_min=0.01", ["run-big"]),
        ("cost_max=0.001", ["run-mini"]),
        ("q=native+TOKENS", ["run-native"]),
        ("q=gpt-4o-mini&kind=recorded", ["run-mini", "run-big"]),
        ("q=e-missing", ["run-mail"]),  # a finding's message
        ("state=completed&model=claude", ["run-claude"]),
        ("mode=rerun&model=gpt", ["run-mini-r1"]),
    ],
)
def test_each_filter_finds_its_runs(viewer_client, runs, query, found):
    html = get(viewer_client, f"/?{query}")
    assert listed(html) == found


def test_a_finding_code_finds_the_runs_holding_it(viewer_client, runs):
    code = RunSummary.objects.get(run__run_id="run-mail").code_list[0]
    assert listed(get(viewer_client, f"/?code={code}")) == ["run-mail"]
    assert listed(get(viewer_client, f"/?code={code.lower()}")) == ["run-mail"]
    assert listed(get(viewer_client, "/?code=LIN999")) == []


def test_the_cost_filter_says_how_many_runs_it_could_not_judge(viewer_client, runs):
    html = get(viewer_client, "/?cost_min=0")
    assert listed(html) == ["run-mini", "run-big"]
    # claude (not priced), mail (no charge), native (no split), the replay (no charge): never matched, counted.
    assert "4 runs that the other filters match have no evaluated cost" in html
    html = get(viewer_client, "/?cost_min=0&kind=replay")
    assert listed(html) == [] and "1 run that the other filters match has no evaluated cost" in html


def test_the_form_shows_the_filter_and_the_links_keep_it(viewer_client, runs):
    html = get(viewer_client, "/?model=gpt&tokens_min=1000&kind=recorded")
    assert 'name="model" value="gpt"' in html
    assert 'name="tokens_min" value="1000"' in html
    assert '<option value="recorded" selected>' in html
    assert "2 runs match." in html


def test_keyset_pages_keep_the_filters(viewer_client, runs, monkeypatch):
    from runs import search

    monkeypatch.setattr(search, "PAGE", 2)
    html = get(viewer_client, "/?model=gpt")
    assert listed(html) == ["run-mini-r1", "run-mini"]
    older = re.search(r'<a href="(\?[^"]*after=[^"]*)">Older runs</a>', html)
    assert older and "model=gpt" in older.group(1)
    html = get(viewer_client, "/" + older.group(1).replace("&amp;", "&"))
    assert listed(html) == ["run-big"]
    assert "Older runs" not in html and "Newest runs" in html


@pytest.mark.parametrize(
    ("query", "says"),
    [
        ("tokens_min=-1", "tokens_min"),
        ("tokens_min=ten", "tokens_min"),
        ("cost_min=abc", "cost_min"),
        ("created_from=2026-13-40", "created_from"),
        ("tokens_min=10&tokens_max=5", "the tokens range ends before it starts"),
        ("code=XYZ", "a lineage code is LIN and three digits"),
        ("after=nonsense", "not a cursor this list gave"),
        ("kind=bogus", "kind"),
    ],
)
def test_a_bad_value_is_a_400_with_one_line(viewer_client, runs, query, says):
    html = get(viewer_client, f"/?{query}", status=400)
    error = re.search(r'<p class="error" role="alert">Not filtered: ([^<]*)</p>', html)
    assert error and escape(says) in error.group(1) and "\n" not in error.group(1)
    assert listed(html) == []


def queries(client, url: str) -> int:
    with CaptureQueriesContext(connection) as ctx:
        assert client.get(url).status_code == 200
    return len(ctx.captured_queries)


SEARCHES = ["/?model=gpt", "/?q=run&tokens_min=1", "/?cost_min=0&tool=status", "/?code=LIN011&created_from=2026-01-01"]


def test_the_search_costs_the_same_queries_however_many_runs(viewer_client, tmp_path):
    make(tmp_path, "run-first", model="gpt-4o-mini", tokens=(1, 1))
    before = {url: queries(viewer_client, url) for url in SEARCHES}
    # The session, the user, two permission reads, the groups (the header), the page (the summaries joined with their
    # runs and sources), the bounded count; with a cost filter, the bounded count of runs not evaluated.
    assert before == {SEARCHES[0]: 7, SEARCHES[1]: 7, SEARCHES[2]: 8, SEARCHES[3]: 7}
    for i in range(8):
        make(tmp_path, f"run-more-{i}", model="gpt-4o-mini", tokens=(i, i), created_at=f"2026-07-0{i + 1}T00:00:00Z")
        make(tmp_path, f"run-more-{i}-r", parent=f"run-more-{i}", model="gpt-4o-mini")
    assert {url: queries(viewer_client, url) for url in SEARCHES} == before


def test_the_count_is_bounded(viewer_client, runs, monkeypatch):
    from runs import search

    monkeypatch.setattr(search, "COUNT_CAP", 3)
    assert "3 or more runs match" in get(viewer_client, "/?tool=status")


# --- the API ------------------------------------------------------------------------------------------------------


@pytest.fixture
def api(client, role_user):
    client.force_login(role_user("viewer"))
    return client


def test_the_api_filters_the_same_way(api, runs):
    answer = api.get("/api/v1/runs/?model=gpt&tokens_min=1000").json()
    assert [r["id"] for r in answer["results"]] == ["run-mini", "run-big"]
    assert answer["count"] == 2 and answer["next"] is None
    first = answer["results"][0]["summary"]
    assert first["models"] == ["gpt-4o-mini"] and first["tokens_in"] == 1000 and first["cost"] == "0.000270"
    answer = api.get("/api/v1/runs/?cost_max=1").json()
    assert [r["id"] for r in answer["results"]] == ["run-mini", "run-big"]
    assert answer["cost_not_evaluated"] == 4


def test_the_api_pages_by_cursor(api, runs):
    answer = api.get("/api/v1/runs/?model=gpt&limit=2").json()
    assert [r["id"] for r in answer["results"]] == ["run-mini-r1", "run-mini"]
    nxt = api.get(answer["next"]).json()
    assert [r["id"] for r in nxt["results"]] == ["run-big"] and nxt["next"] is None


@pytest.mark.parametrize("query", ["tokens_min=x", "code=LIN1", "cost_min=1&cost_max=0", "limit=0&model=x"])
def test_the_api_refuses_a_bad_value_in_one_line(api, runs, query):
    response = api.get(f"/api/v1/runs/?{query}")
    assert response.status_code == 400
    assert "\n" not in response.json()["error"]


# --- events across runs -------------------------------------------------------------------------------------------


def test_the_event_search_finds_events_across_runs(viewer_client, runs):
    html = get(viewer_client, "/search/events/?tool=smtp")
    assert re.findall(r'href="/runs/([^/]+)/\?event=([^"#]+)#detail"', html) == [("run-mail", "e-call1")]
    html = get(viewer_client, "/search/events/?model=gpt-4o&kind=budget.charged")
    assert re.findall(r'href="/runs/([^/]+)/\?event=([^"#]+)#detail"', html) == [
        ("run-mini", "e-charge"),
        ("run-big", "e-charge"),
    ]
    # The run's own model (a native run's calls name none).
    html = get(viewer_client, "/search/events/?model=example-model")
    assert ("run-native", "e-prop1") in re.findall(r'href="/runs/([^/]+)/\?event=([^"#]+)#detail"', html)
    html = get(viewer_client, "/search/events/?text=req-7781&kind=tool.call")
    assert len(re.findall(r'\?event=e-call2#detail"', html)) == 6


def test_the_event_search_reads_a_window_of_runs_a_page(viewer_client, runs, monkeypatch):
    from runs import search

    monkeypatch.setattr(search, "SPAN_RUNS", 2)
    html = get(viewer_client, "/search/events/?kind=run.state")
    assert re.findall(r'href="/runs/([^/]+)/\?event=', html) == ["run-mini-r1", "run-mini"]
    older = re.search(r'<a href="(\?[^"]*after=[^"]*)">Older runs</a>', html)
    assert older
    html = get(viewer_client, "/search/events/" + older.group(1).replace("&amp;", "&"))
    assert re.findall(r'href="/runs/([^/]+)/\?event=', html) == ["run-big", "run-claude"]


def test_the_event_search_refuses_a_bad_value(viewer_client, runs):
    html = get(viewer_client, "/search/events/?kind=no.such", status=400)
    assert "Not searched: kind:" in html


def test_run_summaries_fills_a_run_stored_without_one(runs):
    RunSummary.objects.filter(run__run_id="run-big").delete()
    call_command("run_summaries")
    assert RunSummary.objects.get(run__run_id="run-big").tokens == 250_000


@pytest.mark.django_db(transaction=True)
def test_migration_0023_fills_the_summaries_of_runs_stored_before_it(tmp_path, settings):
    from tests.migrations_at import migrate_to

    settings.N17Q_MODEL_PRICES = __import__("n17q_engine.pricing", fromlist=["price_table"]).price_table(PRICES)
    make(tmp_path, "run-then", model="gpt-4o-mini", tokens=(1000, 200), created_at="2026-07-03T09:00:00Z")
    make(tmp_path, "run-then-mail", tool="smtp.send", dangling=True)
    written = {
        s.run.run_id: (s.kind, s.outcome, s.tools, s.model_names, s.codes, s.tokens, s.cost, s.started_at, s.text)
        for s in RunSummary.objects.select_related("run")
    }
    migrate_to([("runs", "0022_annotate_permission")])
    try:
        migrate_to()
    finally:
        migrate_to()
    filled = {
        s.run.run_id: (s.kind, s.outcome, s.tools, s.model_names, s.codes, s.tokens, s.cost, s.started_at, s.text)
        for s in RunSummary.objects.select_related("run")
    }
    assert filled == written
    assert filled["run-then"][6] == Decimal("0.000270")


def test_the_live_filter_shows_a_refusal_in_place_of_the_table(viewer_client, runs):
    # htmx swaps no 4xx answer: the partial says the refusal where the stale rows would have stayed.
    response = viewer_client.get("/?code=XYZ", headers={"HX-Request": "true"})
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="run-table">') and "Not filtered: code:" in html
    assert listed(html) == []


def test_a_token_charge_past_what_a_count_can_be_imports_with_its_tokens_unknown(tmp_path):
    """Found by the import property test on PostgreSQL: a `budget.charged` of 1e19 tokens made the summary's bigint
    insert fail (a database error). The run imports; its stored token count is unknown, as one nobody recorded."""
    manifest, events, blobs = bundles.example_parts()
    last = events[-1]
    charge = {
        "seq": last["seq"] + 1,
        "id": "e-huge-charge",
        "kind": "budget.charged",
        "at": last["at"],
        "attempt": last["attempt"],
        "resource": "tokens",
        "amount": 1e19,  # a number the reader takes (a float), a count past 64 bits
    }
    run_import_from_path(bundles.write_folder(tmp_path / "bundle", manifest, [*events, charge], blobs))
    summary = RunSummary.objects.get(run__run_id=manifest["run"]["id"])
    assert (summary.tokens, summary.cost) == (None, None)
