"""Two runs side by side (issue 38 §3): the compare page reached from the run list's checkboxes, its layers from the
fact layer and the search summary, refusals as a 400 with one line, read-only, a pinned query count."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from n17q_engine.pricing import price_table
from runs.compare import runs_compare
from runs.models import Run, RunSummary
from tests.runs.test_run_search import PRICES, make

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def prices(settings):
    settings.N17Q_MODEL_PRICES = price_table(PRICES)


@pytest.fixture
def viewer_client(client, role_user):
    client.force_login(role_user("viewer"))
    return client


@pytest.fixture
def pair(tmp_path):
    a = make(tmp_path, "run-a", model="gpt-4o-mini", tokens=(1000, 200), title="Run A")
    b = make(tmp_path, "run-b", tool="smtp.send", dangling=True, title="Run B")
    return a, b


def lines(html: str, layer: str) -> dict[str, tuple[str, str, bool]]:
    section = re.search(rf'<h2 id="layer-\d+">{re.escape(layer)}.*?</section>', html, re.S)
    assert section, layer
    found = {}
    for tr in re.findall(r"<tr[^>]*>.*?</tr>", section.group(0), re.S):
        m = re.search(r'<th scope="row">([^<]*)(?:<span class="differs-mark">)?.*?<td>([^<]*)</td><td>([^<]*)</td>', tr)
        if m:
            found[m.group(1).strip()] = (m.group(2), m.group(3), 'class="differs"' in tr)
    return found


def test_it_sets_two_runs_side_by_side_layer_by_layer(viewer_client, pair):
    html = viewer_client.get("/compare/?run=run-a&run=run-b").content.decode()
    assert "Compare two runs" in html
    tools = lines(html, "Tool calls")
    assert tools["docs.search"] == ("1", "0", True)
    assert tools["smtp.send"] == ("0", "1", True)
    assert tools["status.lookup"] == ("1", "1", False)
    findings = lines(html, "Findings")
    code = RunSummary.objects.get(run__run_id="run-b").code_list[0]
    assert findings[code] == ("0", "1", True)
    tokens = lines(html, "Model calls, tokens and cost")
    assert tokens["Models"] == ("gpt-4o-mini", "example-model", True)
    assert tokens["Tokens in"] == ("1,000", "not known", True)
    assert tokens["Cost"] == ("0.000270 USD", "not known", True)
    outcome = lines(html, "Outcome")
    assert outcome["Final state"] == ("completed", "completed", False)
    assert "Effects" in html


def test_the_comparison_reads_the_facts_every_page_reads(pair):
    a, b = pair
    comparison = runs_compare(a, b)
    effects = {line.label: (line.a, line.b) for line in comparison.layers[2].lines}
    assert effects["Summary"] == (a.facts["headline"]["effects"], b.facts["headline"]["effects"])
    assert comparison.differences == sum(line.differs for layer in comparison.layers for line in layer.lines)


def test_the_run_list_links_to_it_with_checkboxes(viewer_client, pair):
    for url in ("/", "/?tool=status"):
        html = viewer_client.get(url).content.decode()
        assert '<form id="compare" method="get" action="/compare/"' in html
        assert re.findall(r'<input type="checkbox" name="run" value="([^"]+)" form="compare"', html) == [
            "run-b",
            "run-a",
        ]


@pytest.mark.parametrize("query", ["", "?run=run-a", "?run=run-a&run=run-a", "?run=run-a&run=run-b&run=run-c"])
def test_it_refuses_anything_but_two_runs_in_one_line(viewer_client, pair, query):
    response = viewer_client.get(f"/compare/{query}")
    assert response.status_code == 400
    assert "choose two different runs to compare" in response.content.decode()


def test_an_unknown_run_is_a_404(viewer_client, pair):
    assert viewer_client.get("/compare/?run=run-a&run=run-nope").status_code == 404


def test_it_writes_nothing_and_its_queries_are_pinned(viewer_client, pair, tmp_path):
    before = Run.objects.count(), RunSummary.objects.count()
    with CaptureQueriesContext(connection) as ctx:
        assert viewer_client.get("/compare/?run=run-a&run=run-b").status_code == 200
    assert not [q for q in ctx.captured_queries if q["sql"].lstrip().upper().startswith(("INSERT", "UPDATE"))]
    assert (Run.objects.count(), RunSummary.objects.count()) == before
    count = len(ctx.captured_queries)
    make(tmp_path, "run-c", model="gpt-4o-mini", tokens=(5, 5))
    with CaptureQueriesContext(connection) as ctx:
        assert viewer_client.get("/compare/?run=run-a&run=run-c").status_code == 200
    assert len(ctx.captured_queries) == count


def test_a_run_stored_without_a_summary_is_compared_all_the_same(viewer_client, pair):
    RunSummary.objects.filter(run__run_id="run-b").delete()
    html = viewer_client.get("/compare/?run=run-a&run=run-b").content.decode()
    assert lines(html, "Model calls, tokens and cost")["Model calls"] == ("1", "1", False)
