"""The lineage picture as Chromium draws it (issue 15, point 4): the boxes the browser really gives every label,
lane name, number badge and node shape never meet; a broken edge's number selects its finding and its two ends;
the nodes are links the keyboard reaches. A screenshot of each demo run's picture goes to test-artifacts/."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe

from n17q_demo import stories
from runs.importer import run_import_from_path
from runs.lineage_picture import PICTURE_WINDOW
from runs.models import Finding
from tests.runs.test_lineage_picture import DENSE, dense_bundle

from .conftest import ARTIFACTS, shot

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]
STORY_RUNS = [b.manifest["run"]["id"] for b in stories.demo_bundles()]

# Every box in the SVG's own units (no element of the picture is transformed), as the browser laid it out.
BOXES = """() => {
  const svg = document.querySelector('#picture svg.lineage');
  const box = (el, kind) => {
    const b = el.getBBox();
    const name = el.textContent.trim() || el.closest('[data-event]')?.dataset.event || '';
    return {kind, name, x0: b.x, y0: b.y, x1: b.x + b.width, y1: b.y + b.height};
  };
  return {
    texts: [...svg.querySelectorAll('.node-label, .lane-label, .lane-note')].map(el => box(el, 'text'))
      .concat([...svg.querySelectorAll('a.edge-badge')].map(el => box(el, 'badge'))),
    shapes: [...svg.querySelectorAll('.node .shape')].map(el => box(el, 'node')),
    size: [svg.viewBox.baseVal.width, svg.viewBox.baseVal.height],
  };
}"""


def _meet(a: dict, b: dict) -> bool:
    return a["x0"] < b["x1"] and b["x0"] < a["x1"] and a["y0"] < b["y1"] and b["y0"] < a["y1"]


def assert_rendered_boxes_apart(page, where: str) -> int:
    found = page.evaluate(BOXES)
    texts, shapes = found["texts"], found["shapes"]
    assert texts and shapes, where
    for i, a in enumerate(texts):
        for b in texts[i + 1 :] + shapes:
            assert not _meet(a, b), (where, a, b)
    width, height = found["size"]
    for b in texts + shapes:
        assert b["x0"] >= 0 and b["y0"] >= 0 and b["x1"] <= width and b["y1"] <= height, (where, b)
    return len(texts)


def picture_shot(page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator("#picture").screenshot(path=str(ARTIFACTS / f"{name}.png"))


def _import(run_id: str, tmp_path) -> None:
    story = next(b for b in stories.demo_bundles() if b.manifest["run"]["id"] == run_id)
    run_import_from_path(stories.write_bundle(story, tmp_path / run_id))


@pytest.mark.parametrize("run_id", STORY_RUNS)
def test_it_draws_each_demo_runs_picture_with_nothing_over_anything(page, login, live_server, tmp_path, run_id):
    for story in stories.demo_bundles():  # the replays name their source runs: import every one
        _import(story.manifest["run"]["id"], tmp_path)
    login("viewer")
    page.goto(f"{live_server.url}/runs/{run_id}/")
    assert_rendered_boxes_apart(page, run_id)
    # Every finding's picture too: a selected edge is drawn thicker, its ends' labels bold.
    for finding in Finding.objects.filter(run__run_id=run_id).order_by("id"):
        page.goto(f"{live_server.url}/runs/{run_id}/?finding={finding.pk}")
        assert_rendered_boxes_apart(page, f"{run_id} finding {finding.pk}")
    page.goto(f"{live_server.url}/runs/{run_id}/")
    picture_shot(page, f"picture-{run_id}")


def test_story_000_selects_the_live_results_edge_from_its_number(page, login, live_server, tmp_path):
    _import("run-000-recorded", tmp_path)
    _import("run-000-fail-open-replay", tmp_path)
    login("viewer")
    page.goto(f"{live_server.url}/runs/run-000-fail-open-replay/")
    picture = page.locator("#picture")
    edge = picture.locator('.broken-edge[data-code="LIN014"]')
    assert edge.count() == 1
    assert picture.locator('.node[data-event="e-000r-res-status"] .node-label').text_content() == "result: live"
    assert picture.locator('.node[data-event="e-000r-call-status"] .node-label').text_content() == "status.lookup"
    legend = picture.locator("li.picture-finding")
    assert legend.count() == 1
    assert "From e-000r-res-status to e-000r-call-status." in legend.inner_text()
    assert legend.locator('a[href="/glossary/#LIN014"]').count() == 1
    picture.locator("a.edge-badge").click()
    page.wait_for_url("**finding=**")
    assert picture.locator(".broken-edge.selected").get_attribute("data-code") == "LIN014"
    ends = sorted(picture.locator(".node.selected").evaluate_all("els => els.map(e => e.dataset.event)"))
    assert ends == ["e-000r-call-status", "e-000r-res-status"]
    assert picture.locator("li.picture-finding.selected a.legend-badge").get_attribute("aria-current") == "true"
    # The selection is drawn, not only named: the selected end's outline is thick and red.
    stroke = picture.locator('.node.selected[data-event="e-000r-res-status"] .shape').evaluate(
        "el => [getComputedStyle(el).strokeWidth, getComputedStyle(el).stroke]"
    )
    assert stroke[0] == "4.5px" and stroke[1] == "rgb(155, 28, 28)"
    picture_shot(page, "picture-000-lin014-selected")


def test_story_003_selects_one_finding_from_the_legend_and_nothing_else(page, login, live_server, tmp_path):
    _import("run-003-review-request", tmp_path)
    login("viewer")
    page.goto(f"{live_server.url}/runs/run-003-review-request/?facet=evidence")
    picture = page.locator("#picture")
    assert picture.locator(".broken-edge").count() == 6
    # Issue 38's tour: the legend showed 3 of its 6 rows in a box of its own; every row is on the page now, and the
    # lanes that start further right than the pane first shows say where.
    legend = picture.locator("ol.picture-findings")
    assert legend.evaluate("el => el.scrollHeight <= el.clientHeight + 1")
    assert picture.locator("li.picture-finding").count() == 6
    notes = picture.locator("text.lane-note").all_text_contents()
    assert notes == ["first event: seq 28 \u2192", "first event: seq 29 \u2192"]
    row = picture.locator("li.picture-finding", has_text="From e-003-intent-review-request to e-003-focused-admitted")
    row.locator("a.legend-badge").click()
    page.wait_for_url("**finding=**")
    assert "facet=evidence" in page.url  # the other parameters are kept
    selected = picture.locator(".broken-edge.selected")
    assert selected.count() == 1 and selected.get_attribute("data-code") == "LIN001"
    ends = sorted(picture.locator(".node.selected").evaluate_all("els => els.map(e => e.dataset.event)"))
    assert ends == ["e-003-focused-admitted", "e-003-intent-review-request"]
    assert picture.locator("li.picture-finding.selected").count() == 1
    # The selection keeps the page accessible: axe-core finds nothing serious in it.
    violations = Axe().run(page).response["violations"]
    assert [v["id"] for v in violations if v["impact"] in ("serious", "critical")] == []
    picture_shot(page, "picture-003-lin001-selected")


def test_it_reaches_and_focuses_a_node_from_the_keyboard(page, login, live_server, tmp_path):
    _import("run-003-review-request", tmp_path)
    login("viewer")
    page.goto(f"{live_server.url}/runs/run-003-review-request/")
    node = page.locator('#picture .node[data-event="e-003-broad-receipt"]')
    assert node.get_attribute("aria-label") == "receipt unit +2: command.receipt e-003-broad-receipt, seq 22. Focus it"
    # Tab from the lane name before it until the node has the focus: it is in the tab order, as a link.
    page.locator("#picture a.lane-link").first.focus()
    for _ in range(60):
        if page.evaluate("document.activeElement.dataset.event") == "e-003-broad-receipt":
            break
        page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.dataset.event") == "e-003-broad-receipt"
    page.keyboard.press("Enter")
    page.wait_for_url("**focus=e-003-broad-receipt**")
    assert "focused" in page.locator('#picture .node[data-event="e-003-broad-receipt"]').get_attribute("class")
    picture_shot(page, "picture-003-focused")
    # The shapes' key and the broken edges' legend are text.
    legend = page.locator("#picture .picture-legend").inner_text()
    assert "tool call, tool result" in legend and "LIN003" in legend


def test_it_draws_a_dense_windows_picture_with_nothing_over_anything(page, login, live_server, tmp_path):
    run_import_from_path(dense_bundle(tmp_path / "dense", 2_000))
    login("viewer")
    for query in (
        "",
        "?picture_start=900",
        f"?finding={Finding.objects.filter(run__run_id=DENSE).order_by('id')[40].pk}",
    ):
        page.goto(f"{live_server.url}/runs/{DENSE}/{query}")
        assert assert_rendered_boxes_apart(page, f"dense {query}") > PICTURE_WINDOW  # labels, lanes, badges
    page.evaluate("document.getElementById('picture').scrollIntoView()")
    shot(page, "picture-dense-finding")
