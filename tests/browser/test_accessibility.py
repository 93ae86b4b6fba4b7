"""Accessibility in real headless Chromium (issue 15, point 7; issue 38, point 6): axe-core run on every page a person
uses reports no serious or critical violation at 390 px and at 1400 px wide, no page is wider than its window at
either width, and the keyboard reaches the skip link first and shows where its focus is.

The pages are walked from the URL conf: every named route is either a page visited here (PAGES) or named in
NOT_PAGES with the reason it is no page, so a page added later without a case here fails the walk test. Every
page's violations, of every impact, are written to test-artifacts/axe-results.json for the record.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from axe_playwright_python.sync_playwright import Axe
from django.core.management import call_command
from django.urls import URLPattern, URLResolver, get_resolver

from fixtures_review.services import capture_stage
from n17q_demo import stories
from replays import services as replays
from replays.launch import BUTTONS
from runs.models import Run
from tests.fixtures_review.conftest import search_capture

from .conftest import ARTIFACTS

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

BLOCKING = ("serious", "critical")
IMPACTS = ("critical", "serious", "moderate", "minor")
RESULTS_FILE = ARTIFACTS / "axe-results.json"
STORY_RUNS = [b.manifest["run"]["id"] for b in stories.demo_bundles()]
GENAI_TRACE = Path(__file__).resolve().parents[1] / "data" / "producers" / "genai-openai.otlp.json"
FOCUS_RUN, FOCUS_EVENT = "run-003-review-request", "e-003-intent-review-request"
# A captured page as a reviewer sees it: sanitized HTML inside the console's own page.
CAPTURED_HTML = (
    "<!doctype html><html><head><title>Key rotation</title></head><body><h1>Key rotation</h1>"
    '<p>Rotate the signing keys every 90 days. <a href="https://docs.example/k">Read more</a></p></body></html>'
)


class Demo:
    """The demo a page needs, made in the test's own database: `load_demo`'s runs, scenario versions and staged
    recordings; replays are executed inline (no worker) only when a page asks for one."""

    def __init__(self, loaded: dict[str, Any]):
        self.staged = [s["staged"] for s in loaded["staged"]]
        self._replays: dict[str, int] = {}

    def replay(self, run_id: str) -> int:
        # run-001-recorded replays to completion; run-000-recorded stops on its missing status.lookup fixture.
        if run_id not in self._replays:
            made = replays.replay_create(Run.objects.get(run_id=run_id), mode="rerun")
            self._replays[run_id] = replays.replay_execute(made.pk).pk
        return self._replays[run_id]

    def replays_listed(self) -> str:
        """The replay list with a finished replay and one stopped on a missing fixture in it."""
        self.replay("run-001-recorded")
        self.replay("run-000-recorded")
        return "/replays/"

    def replay_page(self, run_id: str, tail: str = "") -> str:
        return f"/replays/{self.replay(run_id)}/{tail}"

    def received_trace_page(self) -> str:
        """A trace still receiving: GenAI spans from the OpenTelemetry SDK, encoded by its OTLP exporter's encoder."""
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        from otlp_receiver import services as otlp
        from otlp_receiver import wire
        from tests.otlp_receiver.conftest import agent_turn

        provider, memory = TracerProvider(), InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(memory))
        agent_turn(provider.get_tracer("n17q-tests"), end_root=False)
        split = wire.split_by_trace(encode_spans(memory.get_finished_spans()))
        otlp.spans_receive(split.batches)
        return f"/traces/{next(iter(split.batches))}/"

    def imported_model_call_page(self) -> str:
        """A real GenAI producer's trace imported, its last model call open in the detail panel: the conversation and
        the source span's JSON (a region that scrolls) beside the trace."""
        import io

        from runs.models import Event

        out = io.StringIO()
        call_command("import_run", str(GENAI_TRACE), "--json", stdout=out)
        run_id = json.loads(out.getvalue())["run"]
        last = Event.objects.filter(run__run_id=run_id, kind="model.proposal").order_by("-seq").first()
        assert last is not None
        return f"/runs/{run_id}/?event={last.event_id}"

    def recording_page(self, index: int) -> str:
        return f"/review/{self.staged[index]}/"

    def expired_fixture(self, tail: str) -> str:
        """A promoted fixture whose body the sweep removed (seed 001): the demo's status capture under the class
        "sensitive", approved by the reviewer into docs-research@2, swept past its period, and run-000-recorded
        replayed against @2 (it stops on the expired body). `tail`: "scenario", "recording" or "missing"."""
        if not hasattr(self, "_expired"):
            from datetime import timedelta

            from django.contrib.auth import get_user_model

            from fixtures_review.approval import recording_approve
            from n17q_demo.captures import demo_captures
            from runs.retention import retention_sweep

            raw = {**demo_captures()[0], "retention": "sensitive", "captured_at": "2026-07-01T09:00:06Z"}
            raw["response"] = {**raw["response"], "body": {**raw["response"]["body"], "checked": "edge-2"}}
            recording = capture_stage(raw=raw).recording
            recording = recording_approve(recording=recording, user=get_user_model().objects.get(username="reviewer"))
            assert recording.captured_at is not None and recording.scenario_version is not None
            retention_sweep(now=recording.captured_at + timedelta(days=8))
            made = replays.replay_create(
                Run.objects.get(run_id=MISSING), mode="rerun", scenario=recording.scenario_version.ref
            )
            self._expired = (recording, replays.replay_execute(made.pk).pk)
        recording, replay = self._expired
        version = recording.scenario_version
        return {
            "scenario": f"/scenarios/{version.name}@{version.version}/",
            "recording": f"/review/{recording.public_id}/",
            "missing": f"/replays/{replay}/missing/0/",
        }[tail]

    def html_recording_page(self) -> str:
        capture = search_capture()
        capture["response"]["headers"]["Content-Type"] = "text/html; charset=utf-8"
        capture["response"]["body"] = CAPTURED_HTML
        return f"/review/{capture_stage(raw=json.dumps(capture).encode()).recording.public_id}/"


@dataclass(frozen=True)
class Page:
    route: str  # the URL name, namespaced ("runs:run-detail"); "" for the error pages, which have none
    label: str  # the test id
    path: str | Callable[[Demo], str]  # the address, or how to make what it shows and answer its address
    role: str | None = "admin"  # the role that sees every page and every control on it; None: signed out
    status: int = 200
    ready: str | None = None  # a selector that shows the page has finished rendering


FINISHED, MISSING = "run-001-recorded", "run-000-recorded"
PAGES = [
    Page("runs:run-list", "run-list", "/"),
    # The cross-run search (issue 38 §3): filtered, with a cost filter's count of runs it could not judge.
    Page("runs:run-list", "run-list[search]", "/?kind=recorded&cost_min=0&q=run"),
    Page("runs:run-list", "run-list[refused]", "/?tokens_min=ten", status=400),
    Page("runs:run-compare", "run-compare", "/compare/?run=run-000-recorded&run=run-001-recorded"),
    Page("runs:run-compare", "run-compare[refused]", "/compare/?run=run-000-recorded", status=400),
    Page("runs:event-search", "event-search", "/search/events/?kind=tool.call"),
    *(Page("runs:run-detail", f"run-detail[{run}]", f"/runs/{run}/") for run in STORY_RUNS),
    Page("runs:run-detail", "run-detail[focus]", f"/runs/{FOCUS_RUN}/?focus={FOCUS_EVENT}"),
    Page("runs:run-detail", "run-detail[tree]", f"/runs/{FOCUS_RUN}/?view=tree&focus={FOCUS_EVENT}"),
    # A retried attempt focused (issue 39): what carried forward into it and what became stale.
    Page("runs:run-detail", "run-detail[retry]", "/runs/run-003-review-request/?focus=a2"),
    # An imported OpenTelemetry GenAI trace with a model call open: its conversation and its source span's JSON.
    Page("runs:run-detail", "run-detail[imported-model-call]", Demo.imported_model_call_page),
    # Without htmx an event's address is the run page with the event open in the detail panel.
    Page("runs:event-detail", "event-detail", f"/runs/{FOCUS_RUN}/events/{FOCUS_EVENT}/"),
    Page("runs:run-import", "run-import", "/runs/import/"),
    # Issue 39: an approval's review surface (seed 003's corrected view), a replay's copied historical approval shown
    # as read-only evidence, a decision waiting on a person, and the list of those.
    Page("runs:approval-surface", "approval-surface", "/runs/run-003-review-request/approvals/e-003-approval/"),
    Page("runs:approval-surface", "approval-surface[replay]", "/runs/run-001-naive-replay/approvals/e-001-approval/"),
    Page(
        "runs:approval-surface",
        "approval-surface[waiting]",
        "/runs/run-001-naive-replay/approvals/e-001-policy-needs-approval/",
    ),
    Page("runs:approvals-pending", "approvals-pending", "/approvals/pending/"),
    Page("runs:glossary", "glossary", "/glossary/"),
    Page("otlp:trace-list", "trace-list", "/traces/"),
    Page("otlp:trace-detail", "trace-detail", Demo.received_trace_page),
    Page("replays:replay-list", "replay-list", Demo.replays_listed),
    *(Page("replays:replay-new", f"replay-new[{slug}]", f"/runs/{MISSING}/launch/{slug}/") for slug in BUTTONS),
    Page("replays:regression-new", "regression-new", f"/runs/{FINISHED}/regression/"),
    # Scenario from a trace (issue 37 point 3): its four steps, the agent chosen, so the launch summary shows too.
    Page("replays:run-scenario", "run-scenario", f"/runs/{FINISHED}/scenario/?agent=recorded"),
    Page("replays:replay-detail", "replay-detail[finished]", partial(Demo.replay_page, run_id=FINISHED)),
    Page("replays:replay-detail", "replay-detail[missing]", partial(Demo.replay_page, run_id=MISSING)),
    Page(
        "replays:replay-comparison", "replay-comparison", partial(Demo.replay_page, run_id=FINISHED, tail="comparison/")
    ),
    Page("replays:missing-fixture", "missing-fixture", partial(Demo.replay_page, run_id=MISSING, tail="missing/0/")),
    Page("fixtures:queue", "review-queue", "/review/"),
    *(Page("fixtures:recording", f"recording[{i}]", partial(Demo.recording_page, index=i)) for i in range(2)),
    Page("fixtures:recording", "recording[html]", Demo.html_recording_page),
    Page("fixtures:record-policy", "record-policy", "/review/record-policy/"),
    Page("fixtures:scenarios", "scenario-list", "/scenarios/"),
    Page("fixtures:scenario", "scenario-detail", "/scenarios/docs-research@1/"),
    # Seed 001: a promoted fixture whose body retention removed, said on the three pages that name it.
    Page("fixtures:scenario", "scenario-detail[expired-body]", partial(Demo.expired_fixture, tail="scenario")),
    Page("fixtures:recording", "recording[expired-fixture-body]", partial(Demo.expired_fixture, tail="recording")),
    Page("replays:missing-fixture", "missing-fixture[expired-body]", partial(Demo.expired_fixture, tail="missing")),
    Page("login", "login", "/login/", role=None),
    Page("api-docs", "api-docs", "/api/v1/docs/", ready=".swagger-ui .opblock-summary-path"),
    Page("admin:accounts_auditentry_changelist", "audit-log", "/admin/accounts/auditentry/"),
    Page("", "403", "/runs/import/", role="viewer", status=403),
    Page("", "404", "/runs/no-such-run/", status=404),
]

# Routes that are no page: what a person reaches there is a file, JSON, or the answer to a POST (which redirects
# to a page above). Django's admin is its own; the audit log, which the console's header links to, is visited.
NOT_PAGES = {
    "logout": "POST only; redirects to the login page",
    "health": "JSON for load balancers",
    "favicon": "a redirect to the icon file",
    "api-schema": "the OpenAPI document; people read it at api-docs",
    "api-runs": "JSON API",
    "api-run": "JSON API",
    "api-run-lineage": "JSON API",
    "api-captures": "JSON API",
    "api-replay-model-answer": "JSON API",
    "api-replays": "JSON API",
    "api-replay": "JSON API",
    "api-replay-missing": "JSON API",
    "api-run-captures": "JSON API",
    "api-run-scenario": "JSON API",
    "api-run-scenario-launch": "JSON API",
    "api-run-findings": "JSON API",
    "api-run-bundle": "a file download (a run bundle, .zip)",
    "api-run-otlp": "a file download (the run as OTLP JSON)",
    "api-run-annotations": "JSON API",
    "api-run-assessments": "JSON API",
    "api-run-retries": "JSON API",
    "runs:run-annotate": "POST only (the run page's Annotate forms); redirects back to the run page",
    "runs:blob-download": "a file download",
    "runs:run-export": "a file download (a run bundle, .zip)",
    "otlp:export-traces": "OTLP/HTTP for exporters (protobuf or JSON)",
    "otlp:trace-flush": "POST only; redirects to the trace",
    "fixtures:body": "a file download",
    "fixtures:action": "POST only; redirects to the recording",
    "fixtures:run-results-stage": "POST only; redirects to the staged recordings (or back to the run)",
    "replays:missing-copy-similar": "POST only; redirects to the staged candidate",
    "replays:missing-copy-recorded": "POST only; redirects to the staged candidate",
    "replays:missing-model-answer": "POST only; redirects to the staged recording (or back to the missing fixture)",
    "replays:missing-exclude-tool": "POST only; redirects to the launch summary",
    "api-approvals-pending": "JSON API",
}

RESULTS: dict[str, Any] = {}


def _routes(patterns=None, namespaces: tuple[str, ...] = ()):
    for p in get_resolver().url_patterns if patterns is None else patterns:
        if isinstance(p, URLResolver):
            yield from _routes(p.url_patterns, namespaces + ((p.namespace,) if p.namespace else ()))
        elif isinstance(p, URLPattern):
            yield ":".join((*namespaces, p.name or str(p.pattern)))


def test_every_route_is_a_page_here_or_named_as_no_page():
    routes = {r for r in _routes() if not r.startswith("admin:")}
    covered = {p.route for p in PAGES} | set(NOT_PAGES)
    assert sorted(routes - covered) == [], "a route with no accessibility case: add it to PAGES or NOT_PAGES"
    gone = {r for r in covered - routes if r and not r.startswith("admin:")}
    assert sorted(gone) == [], "cases for routes the URL conf no longer has"


@pytest.fixture(scope="module", autouse=True)
def _results_file():
    """One file for the run: each page's violations by impact and by rule (rewritten by every run of this module)."""
    yield
    if RESULTS:
        ARTIFACTS.mkdir(exist_ok=True)
        pages = dict(sorted(RESULTS.items()))
        totals: Counter[str] = Counter()
        for found in pages.values():
            totals.update(found["by_impact"])
        RESULTS_FILE.write_text(json.dumps({"by_impact": dict(totals), "pages": pages}, indent=2) + "\n")


@pytest.fixture
def demo(capsys) -> Demo:
    call_command("load_demo", "--json")
    return Demo(json.loads(capsys.readouterr().out))


def axe(page) -> list[dict[str, Any]]:
    """axe-core's violations on the page as it is now. Playwright evaluates axe's script through the DevTools
    protocol, which the page's CSP does not govern, and axe itself needs neither eval nor inline script: the pages
    are checked under the same policy people get (no bypass_csp; the test asserts the policy saw nothing)."""
    blocked: list[str] = []
    page.on("console", lambda m: blocked.append(m.text) if "Content Security Policy" in m.text else None)
    violations = Axe().run(page).response["violations"]
    assert blocked == [], blocked
    return violations


def summary(url: str, violations: list[dict[str, Any]]) -> dict[str, Any]:
    by_impact = Counter(v["impact"] for v in violations)
    return {
        "url": url,
        "by_impact": {i: by_impact[i] for i in IMPACTS if by_impact[i]},
        "violations": [
            {
                "rule": v["id"],
                "impact": v["impact"],
                "help": v["help"],
                "nodes": len(v["nodes"]),
                "targets": [" ".join(map(str, n["target"])) for n in v["nodes"][:5]],
            }
            for v in sorted(violations, key=lambda v: (IMPACTS.index(v["impact"]), v["id"]))
        ],
    }


def report(violations: list[dict[str, Any]]) -> str:
    return "\n".join(
        f"{v['impact']} {v['id']} ({v['help']}): " + ", ".join(" ".join(map(str, n["target"])) for n in v["nodes"][:8])
        for v in violations
    )


# Issue 38 point 6: every page at a phone's width and at a desktop's. A page is opened at the first width, then the
# window is resized to the next (the layout follows the resize; the page is not loaded twice, which keeps the module
# about a minute slower than one width, not twice as slow).
WIDTHS = (390, 1400)
HEIGHT = 900
# Wider than the window: the document scrolls sideways. The elements named are the deepest ones running past the
# window's right edge outside any box that scrolls or clips (those scroll inside their region, which is allowed).
TOO_WIDE = """() => {
  const width = window.innerWidth, doc = document.documentElement;
  if (doc.scrollWidth <= width + 1) return null;
  const clipped = (el) => {
    for (let p = el.parentElement; p && p !== doc; p = p.parentElement) {
      if (getComputedStyle(p).overflowX !== 'visible') return true;
    }
    return false;
  };
  // An element past the edge, or one whose text runs out of it past the edge (a long unbroken word).
  const runsPast = (el) => {
    const box = el.getBoundingClientRect();
    const spills = getComputedStyle(el).overflowX === 'visible' && box.left + el.scrollWidth > width + 1;
    return box.right > width + 1 || spills;
  };
  const past = [...document.body.querySelectorAll('*')].filter((el) => runsPast(el) && !clipped(el));
  const deepest = past.filter((el) => !past.some((other) => other !== el && el.contains(other)));
  const name = (el) => el.tagName.toLowerCase() + (el.id ? '#' + el.id : '')
    + (el.classList.length ? '.' + [...el.classList].join('.') : '');
  return {
    scroll_width: doc.scrollWidth, window: width,
    past: deepest.slice(0, 8).map((el) => (el.parentElement ? name(el.parentElement) + ' > ' : '') + name(el)
      + ' (to ' + Math.round(el.getBoundingClientRect().right) + ' px)'),
  };
}"""
SETTLED = "() => new Promise((done) => requestAnimationFrame(() => requestAnimationFrame(done)))"


def too_wide(page) -> str | None:
    """None when the document is no wider than the window (one pixel of rounding allowed), else what runs past it."""
    found = page.evaluate(TOO_WIDE)
    if found is None:
        return None
    return f"{found['scroll_width']} px wide in a {found['window']} px window: " + "; ".join(found["past"])


@pytest.mark.parametrize("case", PAGES, ids=lambda c: c.label)
def test_every_page_is_axe_clean_and_fits_the_window_at_390_and_1400_px(case, page, live_server, login, demo):
    path = case.path if isinstance(case.path, str) else case.path(demo)
    if case.role:
        login(case.role)
    problems: list[str] = []
    for width in WIDTHS:
        page.set_viewport_size({"width": width, "height": HEIGHT})
        if width == WIDTHS[0]:
            response = page.goto(f"{live_server.url}{path}")
            assert response is not None and response.status == case.status, page.url
            page.wait_for_load_state("networkidle")
            if case.ready:
                page.wait_for_selector(case.ready, timeout=15000)
        else:
            page.evaluate(SETTLED)
        violations = axe(page)
        RESULTS[f"{case.label}@{width}"] = summary(path, violations)
        blocking = [v for v in violations if v["impact"] in BLOCKING]
        if blocking:
            problems.append(f"at {width} px, axe:\n" + report(blocking))
        wide = too_wide(page)
        if wide:
            problems.append(f"at {width} px, the page is {wide}")
    assert problems == [], "\n".join(problems)


def test_the_width_check_finds_a_page_wider_than_the_window(page, live_server, login):
    # The width check above can fail: a 600 px box planted on a page at 390 px is named; inside a region that
    # scrolls it is not.
    login("admin")
    page.set_viewport_size({"width": 390, "height": HEIGHT})
    page.goto(f"{live_server.url}/glossary/")
    assert too_wide(page) is None
    page.evaluate(
        "() => { const d = document.createElement('div'); d.id = 'planted';"
        " d.style.width = '600px'; d.style.height = '1em'; document.querySelector('main').append(d); }"
    )
    assert "div#planted (to " in (too_wide(page) or "")
    page.evaluate(
        "() => { const s = document.createElement('div'); s.style.overflowX = 'auto';"
        " s.append(document.getElementById('planted')); document.querySelector('main').append(s); }"
    )
    assert too_wide(page) is None


def test_axe_reports_what_is_planted_on_a_page_under_its_csp(page, live_server, login):
    # The check above can fail: an image without a text alternative and a button without a name, added to a clean
    # page, are found (critical both), with the page's CSP in force.
    login("admin")
    page.goto(f"{live_server.url}/glossary/")
    page.evaluate(
        "document.querySelector('main').append(document.createElement('img'), document.createElement('button'))"
    )
    found = {v["id"]: v["impact"] for v in axe(page)}
    assert (found.get("image-alt"), found.get("button-name")) == ("critical", "critical"), found


# What the keyboard's focus looks like on the element that has it: its outline or its box shadow.
FOCUS_STYLE = """() => {
  const el = document.activeElement;
  if (!el || el === document.body) return null;
  const s = getComputedStyle(el);
  return {
    tag: el.tagName.toLowerCase(), id: el.id, cls: el.getAttribute('class') || '',
    text: (el.textContent || el.getAttribute('aria-label') || '').trim().slice(0, 40),
    visible: el.matches(':focus-visible'),
    outline: s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) > 0 && s.outlineColor !== 'rgba(0, 0, 0, 0)',
    shadow: s.boxShadow !== 'none',
  };
}"""


def test_the_keyboard_meets_the_skip_link_first_and_sees_every_focus(page, live_server, login, demo):
    login("admin")
    url = f"{live_server.url}/runs/{FOCUS_RUN}/"
    page.goto(url)
    page.keyboard.press("Tab")
    first = page.evaluate(FOCUS_STYLE)
    assert (first["cls"], first["text"]) == ("skip", "Skip to content")
    box = page.locator("a.skip").bounding_box()
    assert box is not None and box["x"] >= 0 and box["y"] >= 0, "the skip link is on screen when focused"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.id") == "main"

    # Every stop of the Tab order, from the top of the page until the focus leaves it.
    page.goto(url)
    stops: list[dict[str, Any]] = []
    for _ in range(1500):
        page.keyboard.press("Tab")
        stop = page.evaluate(FOCUS_STYLE)
        if stop is None or (stops and stop["cls"] == "skip"):
            break
        stops.append(stop)
    else:
        pytest.fail("the Tab order did not come to an end")
    unseen = [s for s in stops if not (s["visible"] and (s["outline"] or s["shadow"]))]
    assert unseen == [], "focus not shown on these stops"
    assert {"a", "button"} <= {s["tag"] for s in stops} and {"input", "select"} & {s["tag"] for s in stops}, stops
