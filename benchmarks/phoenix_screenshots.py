"""The same real producer traces in Arize Phoenix and in N17Q's trace reader, screenshotted (issue 38, acceptance).

    .venv/bin/python -m benchmarks.phoenix_screenshots [--out DIR] [--phoenix-venv PATH] [--width 1400]
                                                       [--traces genai,openinference,langchain]

For each committed producer trace (tests/data/producers: ORIGIN.md) it takes, in headless Chromium
(/usr/bin/chromium or $N17Q_CHROMIUM, driven by Playwright, `--width` px wide):

- `<trace>-phoenix-trace.png`: Phoenix's trace page (its span tree) with the trace's last model call selected (its
  messages in the span's Info tab), in a window 1000 px high; `<trace>-phoenix-span.png`: the same in a window 3000
  px high, so that the span's pane (which scrolls inside the page) shows all its messages and its output.
- `<trace>-n17q-tree.png`: N17Q's run page in the tree view (`?view=tree`), the whole page;
  `<trace>-n17q-tree-detail.png`: the same model call opened in the detail panel
  (`?view=tree&event=<model.proposal>#detail`), the window as a person sees it; `<trace>-n17q-conversation.png`: that
  panel alone, in a window 3000 px high (the panel scrolls within the window's height) so the whole conversation shows.

and writes `manifest.json` (versions, URLs, file names) beside them.

Phoenix is started as `compare_phoenix` starts it (its own venv, `--phoenix-venv`, made with `pip install
arize-phoenix` when missing; loopback only, telemetry and external resources off) and is sent each file over
OTLP/HTTP: the OTLP/JSON file made into the protobuf body Phoenix's `/v1/traces` accepts (opentelemetry-proto's
`ExportTraceServiceRequest`; JSON's hex ids become bytes). Its trace page is found through its GraphQL API (the
project's global id, the span's global id for `selectedSpanNodeId`). N17Q runs as `make demo` runs it (no debug,
static files collected, the example price table docs/examples/model-prices.json) on a temporary data folder: migrate,
one viewer, `manage.py import_run` of the same files, `manage.py runserver` on a free loopback port. Both servers
are stopped, and the temporary folders removed, on the way out.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from .common import REPO, child_env
from .compare_phoenix import (
    _OPENER,
    _free_port,
    _get,
    _stop,
    _wait,
    default_venv,
    ensure_phoenix,
    phoenix_counts,
    phoenix_server,
)

PRODUCERS = REPO / "tests" / "data" / "producers"
TRACES = {
    # name: (file, how its model calls are told apart)
    "genai": "genai-openai.otlp.json",
    "openinference": "openinference-openai.otlp.json",
    "langchain": "openinference-langchain.otlp.json",
}
CHROMIUM = os.environ.get("N17Q_CHROMIUM", "/usr/bin/chromium")
# As tests/browser/conftest.py: without these Chromium tries to reach Google's hosts at every start.
FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]
HEIGHT = 1000
TALL = 3000  # for the panes that scroll inside the page (Phoenix's span, N17Q's detail panel)
PAGE_DEADLINE_MS = 60_000
PRICES = REPO / "docs" / "examples" / "model-prices.json"


# ----------------------------------------------------------------------------------------------------------------------
# The traces


def load(name: str) -> dict[str, Any]:
    return json.loads((PRODUCERS / TRACES[name]).read_text())


def spans_of(trace: dict[str, Any]) -> list[dict[str, Any]]:
    return [s for rs in trace["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


def _attribute(span: dict[str, Any], key: str) -> Any:
    for a in span.get("attributes", []):
        if a["key"] == key:
            return next(iter(a["value"].values()), None)
    return None


def is_model_call(span: dict[str, Any]) -> bool:
    """An LLM span: OpenInference's `openinference.span.kind` LLM, or GenAI's `gen_ai.operation.name` chat."""
    return _attribute(span, "openinference.span.kind") == "LLM" or _attribute(span, "gen_ai.operation.name") in (
        "chat",
        "text_completion",
        "generate_content",
    )


def last_model_call(trace: dict[str, Any]) -> dict[str, Any]:
    calls = sorted((s for s in spans_of(trace) if is_model_call(s)), key=lambda s: int(s["startTimeUnixNano"]))
    if not calls:
        raise RuntimeError("the trace holds no model call (no LLM or chat span)")
    return calls[-1]


def otlp_protobuf(trace: dict[str, Any]) -> bytes:
    """The OTLP/JSON document as the protobuf body of an ExportTraceServiceRequest.

    OTLP/JSON writes trace and span ids as hex (the OTLP spec's exception to the protobuf JSON mapping, which would
    want base64 for bytes): they are turned to base64 first, then protobuf's own JSON parser reads the rest."""
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    def b64(hex_id: str) -> str:
        return base64.b64encode(bytes.fromhex(hex_id)).decode()

    doc = json.loads(json.dumps(trace))
    for span in spans_of(doc):
        for key in ("traceId", "spanId", "parentSpanId"):
            if span.get(key):
                span[key] = b64(span[key])
        for link in span.get("links", []):
            for key in ("traceId", "spanId"):
                if link.get(key):
                    link[key] = b64(link[key])
    return json_format.Parse(json.dumps(doc), ExportTraceServiceRequest()).SerializeToString()


# ----------------------------------------------------------------------------------------------------------------------
# Phoenix


def phoenix_send(port: int, body: bytes) -> None:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/traces", data=body, headers={"Content-Type": "application/x-protobuf"}
    )
    with _OPENER.open(request, timeout=60) as answer:
        if answer.status != 200:
            raise RuntimeError(f"Phoenix's /v1/traces answered {answer.status}")


def graphql(port: int, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query, "variables": variables or {}}).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    with _OPENER.open(request, timeout=30) as answer:
        body = json.load(answer)
    if body.get("errors"):
        raise RuntimeError(f"Phoenix's GraphQL API answered errors: {body['errors']}")
    return dict(body["data"])


PROJECTS = "{ projects(first: 100) { edges { node { id name } } } }"
TRACE_SPANS = """
query ($project: ID!, $trace: ID!) {
  node(id: $project) {
    ... on Project {
      trace(traceId: $trace) { id spans(first: 1000) { edges { node { id name spanId spanKind } } } }
    }
  }
}"""


def phoenix_trace_url(port: int, trace_id: str, span_id: str) -> str:
    """The UI's address of the trace with one span selected: `/projects/<project>/traces/<trace id>?
    selectedSpanNodeId=<the span's global id>` (the routes of Phoenix's own front end)."""
    for edge in graphql(port, PROJECTS)["projects"]["edges"]:
        project = edge["node"]["id"]
        trace = graphql(port, TRACE_SPANS, {"project": project, "trace": trace_id})["node"].get("trace")
        if trace is None:
            continue
        for span in trace["spans"]["edges"]:
            if span["node"]["spanId"] == span_id:
                node = urllib.parse.quote(span["node"]["id"])
                return f"http://127.0.0.1:{port}/projects/{project}/traces/{trace_id}?selectedSpanNodeId={node}"
        raise RuntimeError(f"Phoenix holds trace {trace_id} but not its span {span_id}")
    raise RuntimeError(f"no Phoenix project holds trace {trace_id}")


# ----------------------------------------------------------------------------------------------------------------------
# N17Q


def _manage(env: dict[str, str], *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if done.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed: {(done.stderr or done.stdout)[-2000:]}")
    return done.stdout


MAKE_VIEWER = """
import sys
from django.contrib.auth.models import Group
from django.contrib.auth import get_user_model
user = get_user_model().objects.create_user("viewer", password=sys.stdin.readline().strip())
user.groups.add(Group.objects.get(name="viewer"))
"""
PROPOSAL_OF_SPAN = """
import json, sys
from runs.models import Event
run, span = sys.stdin.read().split()
found = Event.objects.filter(run__run_id=run, kind="model.proposal", event_id__startswith=span).values_list(
    "event_id", flat=True
)
print("PROPOSALS", json.dumps(list(found)))
"""


@contextlib.contextmanager
def n17q_server(work: Path, password: str) -> Iterator[tuple[str, dict[str, str]]]:
    """The console on a fresh data folder, as `make demo` runs it (no debug, WhiteNoise, example prices)."""
    data = work / "n17q-data"
    data.mkdir()
    port = _free_port(set())
    env = child_env(
        data,
        None,
        extra={
            "N17Q_SSL_REDIRECT": "0",
            "N17Q_SECURE_COOKIES": "0",
            "N17Q_HSTS_SECONDS": "0",
            "N17Q_ALLOWED_HOSTS": "127.0.0.1",
            "N17Q_STATIC_ROOT": str(data / "static"),
            "N17Q_MODEL_PRICES_FILE": str(PRICES),
            "N17Q_LOG_FORMAT": "plain",
        },
    )
    env.pop("REDIS_URL", None)
    _manage(env, "collectstatic", "--noinput")
    _manage(env, "migrate", "--noinput")
    _manage(env, "shell", "-c", MAKE_VIEWER, stdin=password + "\n")
    log = work / "n17q.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"],
            cwd=REPO,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        _wait("N17Q's runserver did not answer /login/", lambda: _get(f"{url}/login/")[0] == 200, 120, log)
        yield url, env
    finally:
        _stop(proc)


def n17q_import(env: dict[str, str], name: str, span_id: str) -> tuple[str, str]:
    """(run id, the model.proposal event of `span_id`) of the file imported with `manage.py import_run`."""
    run = json.loads(_manage(env, "import_run", str(PRODUCERS / TRACES[name]), "--json"))["run"]
    # `shell` prints its own lines too (the objects it imported): the answer is the marked one.
    printed = _manage(env, "shell", "-c", PROPOSAL_OF_SPAN, stdin=f"{run} {span_id}").splitlines()
    found = json.loads(next(line for line in printed if line.startswith("PROPOSALS "))[len("PROPOSALS ") :])
    if len(found) != 1:
        raise RuntimeError(f"run {run}: {len(found)} model.proposal events for span {span_id}, expected one")
    return run, found[0]


# ----------------------------------------------------------------------------------------------------------------------
# Screenshots


def _settled(page: Any) -> None:
    """No request in flight for a while (Phoenix's front end fetches through GraphQL after its first paint)."""
    with contextlib.suppress(Exception):
        page.wait_for_load_state("networkidle", timeout=PAGE_DEADLINE_MS)


def shoot_phoenix(page: Any, url: str, span: dict[str, Any], out: Path, name: str, width: int) -> list[str]:
    files = [f"{name}-phoenix-trace.png", f"{name}-phoenix-span.png"]
    page.goto(url)
    # The trace tree lists the selected span's name; the detail pane shows it again as its title.
    page.get_by_text(span["name"], exact=True).first.wait_for(timeout=PAGE_DEADLINE_MS)
    _settled(page)
    page.wait_for_timeout(1500)  # Phoenix animates its slide-over panel open
    page.screenshot(path=str(out / files[0]), full_page=False)
    # The span's pane scrolls inside the page: a tall window shows all its messages and its output at once.
    page.set_viewport_size({"width": width, "height": TALL})
    _settled(page)
    page.wait_for_timeout(1000)
    page.screenshot(path=str(out / files[1]), full_page=False)
    page.set_viewport_size({"width": width, "height": HEIGHT})
    return files


def shoot_n17q(page: Any, url: str, run: str, event: str, out: Path, name: str, width: int) -> list[str]:
    files = [f"{name}-n17q-tree.png", f"{name}-n17q-tree-detail.png", f"{name}-n17q-conversation.png"]
    page.goto(f"{url}/runs/{run}/?view=tree")
    page.locator("ul.span-tree").wait_for(timeout=PAGE_DEADLINE_MS)
    page.screenshot(path=str(out / files[0]), full_page=True)
    page.goto(f"{url}/runs/{run}/?view=tree&event={urllib.parse.quote(event)}#detail")
    page.locator("section.conversation").wait_for(timeout=PAGE_DEADLINE_MS)
    page.screenshot(path=str(out / files[1]), full_page=False)
    # The detail panel is at most the window's height and scrolls: a tall window shows the whole conversation.
    page.set_viewport_size({"width": width, "height": TALL})
    page.locator("#detail").screenshot(path=str(out / files[2]))
    page.set_viewport_size({"width": width, "height": HEIGHT})
    return files


def sign_in(page: Any, url: str, password: str) -> None:
    page.goto(f"{url}/login/")
    page.fill("input[name=username]", "viewer")
    page.fill("input[name=password]", password)
    page.click("button[type=submit]")
    page.wait_for_url(f"{url}/", timeout=PAGE_DEADLINE_MS)


def take(args: argparse.Namespace) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    names = args.traces
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    venv = args.phoenix_venv.expanduser()
    phoenix_version = ensure_phoenix(venv)
    work = Path(tempfile.mkdtemp(prefix="n17q-phoenix-screenshots-"))
    password = secrets.token_urlsafe(18)
    manifest: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "arize_phoenix": phoenix_version,
        "width": args.width,
        "traces": {},
    }
    try:
        with phoenix_server(venv, work) as (port, _, _, _, _), n17q_server(work, password) as (n17q_url, env):
            sent = 0
            picked: dict[str, dict[str, Any]] = {}
            for name in names:
                trace = load(name)
                picked[name] = last_model_call(trace)
                phoenix_send(port, otlp_protobuf(trace))
                sent += len(spans_of(trace))
            _wait(
                "Phoenix did not count every span sent",
                lambda: phoenix_counts(port)[0] >= sent,
                120,
            )
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
                manifest["chromium"] = browser.version
                context = browser.new_context(viewport={"width": args.width, "height": HEIGHT})
                page = context.new_page()
                sign_in(page, n17q_url, password)
                for name in names:
                    span = picked[name]
                    phoenix_url = phoenix_trace_url(port, span["traceId"], span["spanId"])
                    run, event = n17q_import(env, name, span["spanId"])
                    print(f"{name}: Phoenix {phoenix_url}; N17Q run {run}, event {event}", file=sys.stderr)
                    files = shoot_phoenix(page, phoenix_url, span, out, name, args.width)
                    files += shoot_n17q(page, n17q_url, run, event, out, name, args.width)
                    manifest["traces"][name] = {
                        "file": f"tests/data/producers/{TRACES[name]}",
                        "trace_id": span["traceId"],
                        "model_call": {"span": span["spanId"], "name": span["name"], "n17q_event": event},
                        "n17q_run": run,
                        "phoenix_path": phoenix_url.split(f":{port}", 1)[1],
                        "screenshots": files,
                    }
                context.close()
                browser.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.phoenix_screenshots",
        description="The committed producer traces in Arize Phoenix and in N17Q, screenshotted side by side.",
    )
    parser.add_argument("--out", type=Path, default=REPO / "test-artifacts" / "phoenix-compare", help="output folder")
    parser.add_argument("--phoenix-venv", type=Path, default=default_venv(), help="Phoenix's own venv")
    parser.add_argument("--width", type=int, default=1400, help="window width in px (default 1400)")
    parser.add_argument(
        "--traces",
        type=lambda s: [n.strip() for n in s.split(",") if n.strip()],
        default=list(TRACES),
        help=f"which, comma-separated (default {','.join(TRACES)})",
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.traces if n not in TRACES]
    if unknown or not args.traces:
        parser.error(f"--traces: unknown {unknown}; choose from {', '.join(TRACES)}")
    if not Path(CHROMIUM).exists():
        parser.error(f"{CHROMIUM} missing (apt-get install chromium, or set N17Q_CHROMIUM)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started = time.monotonic()
    manifest = take(args)
    for name, trace in manifest["traces"].items():
        print(f"{name}: {', '.join(str(args.out / f) for f in trace['screenshots'])}")
    print(
        f"Arize Phoenix {manifest['arize_phoenix']}, Chromium {manifest.get('chromium')}, "
        f"{time.monotonic() - started:.0f} s; manifest {args.out / 'manifest.json'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
