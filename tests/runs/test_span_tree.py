"""The trace as a tree and timeline (issue 38, point 1): real traces from real producers (the committed OpenTelemetry
GenAI, OpenInference and OpenInference-for-LangChain files, tests/data/producers/ORIGIN.md, and a real Inspect eval)
show their span nesting with wall-clock durations; a native run nests by its events' references; the tree is a
window of the trace with its context path before it, in a pinned number of queries whatever the run's size."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from benchmarks.synth import write_bundle
from runs.importer import run_import_from_path
from runs.models import Event, Run
from runs.run_page import page_build
from runs.span_tree import PARENT_FIELDS, Node, duration_text
from runs.trace import TRACE_WINDOW
from tests import bundles
from tests.runs.test_import_formats import import_run, inspect_logs  # noqa: F401 (a fixture)
from tests.runs.test_run_page import STORY_000, page_queries, story_000  # noqa: F401 (a fixture)

pytestmark = pytest.mark.django_db

PRODUCERS = Path(__file__).resolve().parents[1] / "data" / "producers"
MANIFEST = json.loads((PRODUCERS / "manifest.json").read_text())["files"]


@pytest.fixture
def viewer(client, role_user):
    client.force_login(role_user("viewer"))
    return client


def _walk(nodes: list[Node]):
    for node in nodes:
        yield node
        yield from _walk(node.children)


def _spans(node: Node) -> list[Node]:
    return [c for c in node.children if c.kind == "span"]


def _events_under(node: Node) -> list[str]:
    return [n.event.kind for n in _walk(node.children) if n.event is not None]


@pytest.mark.parametrize(
    "name", ["genai-openai.otlp.json", "openinference-openai.otlp.json", "openinference-langchain.otlp.json"]
)
def test_a_real_producers_trace_shows_its_agent_span_over_its_chat_and_tool_spans_with_durations(name, viewer):
    expected = MANIFEST[name]
    run = Run.objects.get(run_id=import_run(PRODUCERS / name)["run"])
    tree = page_build(run, view="tree").tree
    assert tree is not None and tree.by_spans and tree.timed
    (attempt,) = tree.roots
    (agent,) = _spans(attempt)  # the one root span: the agent's
    assert agent.start_ns is not None and agent.duration_ns and agent.duration_ns > 0
    below = _spans(agent)
    chats = [s for s in below if "model.proposal" in _events_under(s)]
    tools = [s for s in below if "tool.call" in _events_under(s)]
    assert (len(chats), len(tools)) == (expected["model_calls"], expected["tool_calls"])
    for span in [*chats, *tools]:
        # The span's own start and end (its `otlp` provenance), inside the agent's.
        assert span.duration_ns is not None and span.duration_ns > 0, span.label
        assert span.start_ns is not None and span.end_ns is not None and agent.end_ns is not None
        assert agent.start_ns <= span.start_ns <= span.end_ns <= agent.end_ns, span.label
        assert span.duration
    for span in tools:
        (call,) = [n for n in span.children if n.event and n.event.kind == "tool.call"]
        assert [c.event.kind for c in call.children] == ["tool.result"], span.label
    # The bars are in time order: a later span's bar starts no earlier.
    starts = [s.bar_x for s in below]
    assert starts == sorted(starts)

    html = viewer.get(f"/runs/{run.run_id}/", {"view": "tree"}).content.decode()
    assert 'class="span-tree"' in html and "wall-clock time" in html
    assert html.count('<svg class="waterfall"') == len(list(_walk(tree.roots)))
    assert f">{agent.duration}</span>" in html
    # The agent span's name, as the producer wrote it.
    assert re.search(r'<span class="node-name"><span class="kind">span</span> [^<]*</span>', html)


def test_the_genai_trace_names_its_spans_as_the_instrumentation_did(viewer):
    run = Run.objects.get(run_id=import_run(PRODUCERS / "genai-openai.otlp.json")["run"])
    tree = page_build(run, view="tree").tree
    (agent,) = _spans(tree.roots[0])
    assert agent.label == "invoke_agent weather-agent"
    assert [s.label for s in _spans(agent)] == [
        "chat gpt-4o-mini",
        "execute_tool get_forecast",
        "execute_tool get_forecast",
        "chat gpt-4o-mini",
        "execute_tool list_alerts",
        "chat gpt-4o-mini",
    ]
    # The failing tool call's result is in its span, with its outcome badge as in the list.
    failing = _spans(agent)[2]
    result = failing.children[0].children[0]
    assert result.row is not None and ("outcome", "error") in result.row.badges


@pytest.mark.parametrize(
    "name", ["genai-openai.otlp.json", "openinference-openai.otlp.json", "openinference-langchain.otlp.json"]
)
def test_a_span_row_says_its_tokens_and_its_failed_result_without_being_opened(name, viewer):
    # Seen beside Phoenix (docs/trace-reader-comparison.md): its span rows carry their tokens and their error; here
    # they were two levels down, on a budget.charged row and on the tool.result, hidden when the span is closed.
    run_id = import_run(PRODUCERS / name)["run"]
    run = Run.objects.get(run_id=run_id)
    (agent,) = _spans(page_build(run, view="tree").tree.roots[0])
    calls = [s for s in _spans(agent) if s.tokens is not None]
    assert [s.tokens for s in calls] == [168, 280, 377]  # ORIGIN.md's three model calls, as the spans charged them
    assert [s.failed for s in _spans(agent)].count("error") == 1  # the Atlantis forecast, and no other span
    assert agent.tokens is None and agent.failed == ""  # a span says its own, not its children's
    html = viewer.get(f"/runs/{run_id}/?view=tree").content.decode()
    assert html.count('<span class="tag span-tokens">377 tokens</span>') == 1
    assert re.search(r'get_forecast</span>\s*<span class="badge outcome">error</span>', html)


def test_an_inspect_log_shows_its_solver_and_tool_spans_and_the_call_under_its_proposal(inspect_logs):  # noqa: F811
    answer = import_run(inspect_logs["eval"])
    run = Run.objects.get(run_id=answer["run"])
    tree = page_build(run, view="tree").tree
    assert tree is not None and tree.by_spans and tree.timed
    spans = {n.label: n for n in _walk(tree.roots) if n.kind == "span"}
    # Inspect's "solvers" span made no event: it is shown by its name (from the events' `inspect.path`), marked.
    assert spans["solvers"].context and spans["solvers"].placeholder and not spans["generate"].context
    assert spans["generate"] in spans["solvers"].children
    generate = spans["generate"]
    assert generate.duration_ns and generate.duration_ns > 0
    proposals = [n for n in generate.children if n.event and n.event.kind == "model.proposal"]
    assert proposals
    calls = [c for p in proposals for c in p.children if c.event.kind == "tool.call"]
    assert calls and all([r.event.kind for r in c.children] == ["tool.result"] for c in calls)
    # The sandbox commands of a shell call are in the tool's own span, under the generate span.
    shells = [s for s in generate.children if s.kind == "span" and s.label == "shell"]
    assert shells and all(_events_under(s) == ["command.receipt"] for s in shells)
    assert spans["match"].children[0].event.kind == "account.claim"


def test_a_native_run_nests_by_its_references():
    run = run_import_from_path(bundles.EXAMPLE).run
    tree = page_build(run, view="tree").tree
    assert tree is not None and not tree.by_spans
    nodes = {n.event.event_id: n for n in _walk(tree.roots) if n.event is not None}
    for node in nodes.values():
        body = node.event.body
        parent = next((n for n in _walk(tree.roots) if node in n.children), None)
        if node.event.kind == "tool.result":
            assert parent is not None and parent.event.event_id == body["call_id"]
        if node.event.kind == "tool.call" and body.get("proposal_id"):
            assert parent is not None and parent.event.event_id == body["proposal_id"]
    # Every event of the window is in the tree once.
    assert sorted(nodes) == sorted(Event.objects.filter(run=run).values_list("event_id", flat=True)[:TRACE_WINDOW])


@pytest.fixture(scope="module")
def two_sizes(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("tree")
    small, large = root / "small", root / "large"
    write_bundle(small, 1_000)
    write_bundle(large, 10_000)
    return small, large


# Below 40% of the small run the two generated runs hold the same events (benchmarks/synth.py switches attempts
# at 40% and 75%): a window there has the same shape in both.
DEEP = 301


def test_a_deep_window_shows_its_context_path_and_no_more(two_sizes):
    run = run_import_from_path(two_sizes[1]).run
    page = page_build(run, view="tree", trace_from=DEEP)
    tree = page.tree
    assert tree is not None
    window = {row.event.event_id for row in page.trace.rows}
    shown = [n for n in _walk(tree.roots) if n.event is not None]
    assert {n.event.event_id for n in shown if not n.context} == window and len(window) == TRACE_WINDOW
    context = [n for n in shown if n.context]
    assert context and tree.context_events == len(context)
    # The context lies before the window, and is what the window's events refer to (or what that refers to).
    assert all(n.event.seq < DEEP for n in context)
    refs = {v for n in shown for f in PARENT_FIELDS if isinstance(v := n.event.body.get(f), str)}
    assert {n.event.event_id for n in context} <= refs


def test_the_tree_costs_the_same_queries_on_a_run_of_1000_and_of_10000_events(viewer, two_sizes):
    for folder in two_sizes:
        run_import_from_path(folder)
    cases = {
        # The list page's 15, nothing more: the first window holds its own context.
        "tree": ("/runs/{run}/?view=tree", 15),
        # + the previous window's start (16, as the list), + the ancestors before the window: one query however
        # deep they lie (a recursive walk of the references).
        "tree, deep window": (f"/runs/{{run}}/?view=tree&trace_from={DEEP}", 17),
        # The middle of each run: windows of different shapes, the same one query for their context.
        "tree, middle": ("/runs/{run}/?view=tree&trace_from={middle}", 17),
        "tree, a facet": (f"/runs/{{run}}/?view=tree&facet=evidence&trace_from={DEEP}", None),
    }
    for name, (url, expected) in cases.items():
        counts = [
            page_queries(viewer, url.format(run=run, middle=size // 2))[0]
            for run, size in (("bench-run-1000", 1000), ("bench-run-10000", 10000))
        ]
        assert counts[0] == counts[1], (name, counts)
        if expected is not None:
            assert counts[0] == expected, (name, counts)


def test_the_view_is_kept_by_every_link_and_anything_else_is_the_list(viewer, two_sizes):
    run = run_import_from_path(two_sizes[0]).run
    html = viewer.get(f"/runs/{run.run_id}/", {"view": "tree", "trace_from": DEEP}).content.decode()
    pager = re.search(r'<nav class="pager".*?</nav>', html, re.S)
    assert pager and pager.group(0).count("view=tree") == 2  # earlier and later events
    assert 'name="view" value="tree"' in html  # the filter form keeps it
    assert re.search(r'<a href="\?[^"]*view=tree[^"]*" aria-current="page">Tree and timeline</a>', html)
    for odd in ("", "TREE", "x" * 500, "list"):
        response = viewer.get(f"/runs/{run.run_id}/", {"view": odd})
        assert response.status_code == 200
        assert 'class="span-tree"' not in response.content.decode()


@pytest.mark.parametrize(
    ("ns", "text"),
    [
        (None, ""),
        (0, "0 ns"),
        (38_000, "38 µs"),
        (5_800_000, "5.8 ms"),
        (63_000_000, "63 ms"),
        (2_100_000_000, "2.10 s"),
        (153_200_000_000, "153 s"),
        (900_000_000_000, "15.0 min"),
    ],
)
def test_a_duration_reads_in_the_unit_that_suits_it(ns, text):
    assert duration_text(ns) == text


def test_findings_focus_and_facets_work_on_the_tree_as_on_the_list(viewer, story_000):  # noqa: F811
    run = Run.objects.get(run_id=STORY_000)
    tree = page_build(run, view="tree").tree
    assert tree is not None
    marked = [n for n in _walk(tree.roots) if "LIN014" in n.finding_codes]
    assert marked and all(n.event is not None for n in marked)
    html = viewer.get(f"/runs/{STORY_000}/", {"view": "tree"}).content.decode()
    assert re.search(r'<div class="trace-row tree-row[^"]*has-finding', html)
    assert 'href="/glossary/#LIN014"' in html.split('class="span-tree"', 1)[1]
    # Focused and hidden: only the neighbourhood, still a tree, still in the tree view.
    target = marked[0].event.event_id
    focused = page_build(run, view="tree", focus_ref=target, narrow="hide")
    assert focused.tree is not None and focused.trace.narrowed
    shown = {n.event.event_id for n in _walk(focused.tree.roots) if n.event is not None and not n.context}
    assert target in shown and shown == {row.event.event_id for row in focused.trace.rows}
    # A facet: only its families in the window (their parents may come as context).
    faceted = page_build(run, view="tree", facets=["calls"]).tree
    assert faceted is not None
    assert {n.event.kind for n in _walk(faceted.roots) if n.event is not None and not n.context} <= {
        "model.proposal",
        "tool.call",
        "tool.result",
    }
