"""Files made by real producers (issue 37), read by N17Q's converters with the counts the producers' runs had.

tests/data/producers/ holds what scripts/make_producer_traces.py made from the real packages (ORIGIN.md: versions,
date, how to regenerate): the traced agent of examples/traced_agent under opentelemetry-instrumentation-openai-v2 and
openinference-instrumentation-openai, its LangChain form under openinference-instrumentation-langchain, a HAR from
mitmproxy (reverse proxy in front of the scripted model) and one from Playwright in Chromium. manifest.json says
what each producer did, counted at the scripted model server (model calls, tool calls, failed tool calls, requests).

Also: the script run again in a temporary folder gives the same counts (not the same bytes: ids and times differ),
and the agent in N17Q's replay mode (tools over MCP) sends byte-identical chat requests to those of its production
run, given the same tool answers.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from fixtures_review import recordings
from n17q_engine.agent.bridge import Bridge
from n17q_engine.formats.otlp import convert_otlp

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data" / "producers"
MANIFEST = json.loads((DATA / "manifest.json").read_text())
TRACES = sorted(name for name in MANIFEST["files"] if ".otlp." in name)
HARS = sorted(name for name in MANIFEST["files"] if name.endswith(".har"))
sys.path.insert(0, str(ROOT / "examples" / "traced_agent"))

import agent  # noqa: E402
import scripted_model  # noqa: E402


def _media(name: str) -> str:
    return "application/x-protobuf" if name.endswith(".pb") else "application/json"


def _counts(raw: bytes, name: str) -> dict[str, int]:
    [run] = convert_otlp(raw, content_type=_media(name))
    kinds = Counter(e["kind"] for e in run.events)
    results = [e for e in run.events if e["kind"] == "tool.result"]
    return {
        "model_calls": kinds["model.proposal"],
        "tool_calls": kinds["tool.call"],
        "tool_results": kinds["tool.result"],
        "tool_errors": sum(1 for e in results if e["outcome"] != "ok"),
    }


def _did(entry: dict[str, Any]) -> dict[str, int]:
    return {k: entry[k] for k in ("model_calls", "tool_calls", "tool_results", "tool_errors")}


def test_every_producer_is_here_with_its_origin():
    assert TRACES == [
        "genai-openai.otlp.json",
        "genai-openai.otlp.pb",
        "openinference-langchain.otlp.json",
        "openinference-openai.otlp.json",
    ]
    assert HARS == ["mitmproxy.har", "playwright-chromium.har"]
    origin = (DATA / "ORIGIN.md").read_text()
    assert all(name in origin for name in MANIFEST["files"]) and "scripts/make_producer_traces.py" in origin


@pytest.mark.parametrize("name", TRACES)
def test_each_trace_converts_with_the_model_calls_tool_calls_and_tool_errors_its_producer_made(name):
    expected = _did(MANIFEST["files"][name])
    assert expected == {"model_calls": 3, "tool_calls": 3, "tool_results": 3, "tool_errors": 1}
    assert _counts((DATA / name).read_bytes(), name) == expected


@pytest.mark.parametrize(
    "name", ["genai-openai.otlp.json", "openinference-openai.otlp.json", "openinference-langchain.otlp.json"]
)
def test_the_traces_carry_the_tools_arguments_and_the_failed_calls_error(name):
    """The LangChain trace records a one-argument tool's input as the bare value (`Oslo`): its requests are the
    arguments the model proposed (tests/engine/test_otlp_tool_inputs.py)."""
    [run] = convert_otlp((DATA / name).read_bytes(), content_type=_media(name))
    calls = [(e["tool"], e["request"]) for e in run.events if e["kind"] == "tool.call"]
    assert calls == [
        ("get_forecast", {"city": "Oslo"}),
        ("get_forecast", {"city": "Atlantis"}),
        ("list_alerts", {"region": "north"}),
    ]
    failed = [e for e in run.events if e["kind"] == "tool.result" and e["outcome"] != "ok"]
    assert [f["error"]["message"] for f in failed] == ["no forecast for 'Atlantis'"]


@pytest.mark.parametrize("name", HARS)
def test_each_har_reads_as_a_recording_with_the_requests_its_producer_made(name):
    source = recordings.load((DATA / name).read_bytes())
    assert source is not None and source.kind == "har"
    exchanges = recordings.exchanges(source)
    assert len(exchanges) == MANIFEST["files"][name]["entries"]
    if name == "mitmproxy.har":
        assert [(e.method, e.status) for e in exchanges] == [("POST", 200)] * 3
        assert all(e.url.endswith("/v1/chat/completions") for e in exchanges)
    else:
        assert [(e.method, e.url.split("/", 3)[-1], e.status) for e in exchanges] == [
            ("GET", "page", 200),
            ("GET", "forecast/oslo", 200),
        ]


def test_the_script_made_again_gives_the_same_counts(tmp_path):
    """The producers run again (the packages are dev dependencies: nothing is skipped). mitmproxy is left out: it
    needs a venv of its own installed from the registry (its pins conflict with this environment's)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "make_producer_traces.py"), str(tmp_path), "--no-mitmproxy"],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    again = json.loads((tmp_path / "manifest.json").read_text())
    assert set(again["files"]) == set(MANIFEST["files"]) - {"mitmproxy.har"}
    for name in TRACES:
        assert _did(again["files"][name]) == _did(MANIFEST["files"][name]), name
        assert _counts((tmp_path / name).read_bytes(), name) == _did(MANIFEST["files"][name]), name
    har = recordings.load((tmp_path / "playwright-chromium.har").read_bytes())
    assert har is not None and len(recordings.exchanges(har)) == MANIFEST["files"]["playwright-chromium.har"]["entries"]


def _answers_from(trace: bytes) -> dict[tuple[str, str], dict[str, Any]]:
    """The tool answers N17Q serves for a recorded run's calls: each result's body, a failed call as an error."""
    [run] = convert_otlp(trace, content_type="application/json")
    calls = {e["id"]: e for e in run.events if e["kind"] == "tool.call"}
    answers: dict[tuple[str, str], dict[str, Any]] = {}
    for result in (e for e in run.events if e["kind"] == "tool.result"):
        call = calls[result["call_id"]]
        key = (call["tool"], json.dumps(call["request"], sort_keys=True))
        ok = result["outcome"] == "ok"
        answers[key] = (
            {"outcome": "ok", "body": json.loads(run.blobs[result["blob"]][0])}
            if ok
            else {
                "outcome": "error",
                "body": None,
            }
        )
    return answers


def test_in_replay_mode_the_agent_sends_byte_identical_chat_requests_given_the_same_answers(tmp_path):
    """The agent run as N17Q's sandbox runs it (N17Q_MCP=stdio), its tools served by N17Q's own MCP server (the
    sandbox's Bridge, n17q_engine/agent/bridge.py) answering what the production trace recorded."""
    server = scripted_model.start()
    bridge = Bridge(
        [
            {"name": t["function"]["name"], "description": t["function"]["description"],
             "input_schema": t["function"]["parameters"], "openai_name": t["function"]["name"]}
            for t in agent.TOOLS
        ]
    )  # fmt: skip
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_", "N17Q_"))}
        env.update(OPENAI_BASE_URL=server.base_url, OPENAI_API_KEY="scripted-model-needs-no-key")
        out = tmp_path / "t.json"
        argv = [sys.executable, str(ROOT / "examples/traced_agent/agent.py")]
        done = subprocess.run(
            [*argv, "--instrumentation", "genai", "--otlp-json", str(out)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        production = list(server.raw)
        answers = _answers_from(out.read_bytes())
        server.raw.clear()

        called: list[str] = []
        replay = subprocess.Popen(
            argv,
            env={**env, "N17Q_MCP": "stdio"},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        bridge.thread.start()
        assert replay.stdout is not None and replay.stdin is not None
        bridge.serve_tools(replay.stdout, replay.stdin)
        deadline = time.monotonic() + 120
        while replay.poll() is None and time.monotonic() < deadline:
            try:
                request = bridge.requests.get(timeout=0.2)
            except queue.Empty:
                continue
            assert request.kind == "tool", request.kind
            called.append(request.body["name"])
            key = (request.body["name"], json.dumps(request.body["arguments"], sort_keys=True))
            request.reply.set_result(answers[key])
        assert replay.wait(timeout=30) == 0, replay.stderr.read() if replay.stderr else ""
    finally:
        bridge.close()
        server.shutdown()
    assert len(production) == 3 and called == ["get_forecast", "get_forecast", "list_alerts"]
    assert server.raw == production
