"""Make the trace and HAR files of real producers (issue 37), from the real packages, never by hand.

    python scripts/make_producer_traces.py OUTDIR [--only NAME ...] [--mitmdump PATH | --no-mitmproxy]

Runs examples/traced_agent (agent.py, langchain_agent.py) against its scripted model (scripted_model.py, on
loopback, in this process) and writes to OUTDIR:

- genai-openai.otlp.json, genai-openai.otlp.pb: opentelemetry-instrumentation-openai-v2 (GenAI conventions, content
  on the spans) with the agent's own `execute_tool` and `invoke_agent` spans;
- openinference-openai.otlp.json: openinference-instrumentation-openai with the agent's TOOL and AGENT spans;
- openinference-langchain.otlp.json: openinference-instrumentation-langchain over langchain-openai's ChatOpenAI;
- playwright-chromium.har: Playwright's `record_har_path` in /usr/bin/chromium, a page fetching JSON from loopback;
- mitmproxy.har: mitmdump as a reverse proxy in front of the scripted model (`--set hardump=...`, mitmproxy 11's
  savehar addon), the agent sending through it. mitmproxy's pins conflict with this project's environment (it would
  downgrade h11, cryptography, zstandard...), so it runs from a throwaway venv made in a temporary folder
  (`pip install mitmproxy==11.0.2`), or from `--mitmdump PATH`; `--no-mitmproxy` leaves it out.
- manifest.json: for each file, what the producer did, counted at the scripted server (model calls, the tool calls
  its answers asked for, the tool messages that reported an error; requests served for a HAR), the package versions
  and the date. The tests (tests/engine/test_producer_traces.py) check the converter's counts against it.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
AGENT_DIR = ROOT / "examples" / "traced_agent"
sys.path.insert(0, str(AGENT_DIR))

import scripted_model  # noqa: E402

MITMPROXY = "mitmproxy==11.0.2"
PACKAGES = (
    "openai",
    "opentelemetry-sdk",
    "opentelemetry-exporter-otlp-proto-common",
    "opentelemetry-instrumentation-openai-v2",
    "opentelemetry-util-genai",
    "openinference-instrumentation",
    "openinference-instrumentation-openai",
    "openinference-instrumentation-langchain",
    "langchain-core",
    "langchain-openai",
    "playwright",
)
NAMES = ("genai-openai", "openinference-openai", "openinference-langchain", "playwright-chromium", "mitmproxy")
DEADLINE = 120.0


def _env(base_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "OPENAI_", "N17Q_"))}
    env.update(OPENAI_BASE_URL=base_url, OPENAI_API_KEY="scripted-model-needs-no-key", PYTHONHASHSEED="0")
    return env


def _did(server: scripted_model.ScriptedModel, first: int) -> dict[str, int]:
    """What an agent run did, as the scripted server saw it: its chat requests from index `first` on."""
    requests = server.requests[first:]
    if not requests:
        raise SystemExit("the agent sent no chat request")
    calls = sum(len(scripted_model.answer_for(r["messages"]).get("tool_calls") or []) for r in requests)
    last = requests[-1]["messages"]
    results = [m for m in last if m.get("role") == "tool"]
    errors = 0
    for m in results:
        with contextlib.suppress(ValueError, TypeError):
            errors += isinstance(json.loads(m["content"]), dict) and "error" in json.loads(m["content"])
    return {"model_calls": len(requests), "tool_calls": calls, "tool_results": len(results), "tool_errors": errors}


def _run(argv: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=DEADLINE)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv[1:3])} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")


def agent_traces(out: Path, server: scripted_model.ScriptedModel, only: set[str]) -> dict[str, Any]:
    made: dict[str, Any] = {}
    env = _env(server.base_url)
    py = sys.executable
    runs = {
        "genai-openai": (
            [py, str(AGENT_DIR / "agent.py"), "--instrumentation", "genai"],
            ["genai-openai.otlp.json", "genai-openai.otlp.pb"],
            "opentelemetry-instrumentation-openai-v2",
        ),
        "openinference-openai": (
            [py, str(AGENT_DIR / "agent.py"), "--instrumentation", "openinference"],
            ["openinference-openai.otlp.json"],
            "openinference-instrumentation-openai",
        ),
        "openinference-langchain": (
            [py, str(AGENT_DIR / "langchain_agent.py")],
            ["openinference-langchain.otlp.json"],
            "openinference-instrumentation-langchain",
        ),
    }
    for name, (argv, files, producer) in runs.items():
        if name not in only:
            continue
        first = len(server.requests)
        outputs = [f for pair in zip(["--otlp-json", "--otlp-protobuf"], files, strict=False) for f in pair]
        _run(argv + [str(out / f) if f.endswith((".json", ".pb")) else f for f in outputs], env)
        did = _did(server, first)
        for f in files:
            made[f] = {"producer": producer, **did}
    return made


def playwright_har(out: Path, server: scripted_model.ScriptedModel) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    path = out / "playwright-chromium.har"
    first = len(server.served)
    base = server.base_url.removesuffix("/v1")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium")
        chromium = browser.version
        context = browser.new_context(record_har_path=str(path))
        page = context.new_page()
        page.goto(f"{base}/page")
        page.wait_for_function("document.title === 'Forecast loaded'", timeout=DEADLINE * 1000)
        context.close()  # the HAR is written here
        browser.close()
    return {path.name: {"producer": f"playwright, chromium {chromium}", "entries": len(server.served) - first}}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _mitmdump(given: str | None, work: Path) -> tuple[str, str]:
    if given:
        version = subprocess.run([given, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
        return given, version
    venv = work / "mitmproxy-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = subprocess.run(
        [str(venv / "bin" / "pip"), "install", "-q", MITMPROXY], capture_output=True, text=True, timeout=900
    )
    if pip.returncode != 0:
        raise SystemExit(f"pip install {MITMPROXY} failed: {pip.stderr.strip()[-1000:]}")
    return str(venv / "bin" / "mitmdump"), MITMPROXY.replace("==", " ")


def mitmproxy_har(out: Path, server: scripted_model.ScriptedModel, given: str | None) -> dict[str, Any]:
    path = out / "mitmproxy.har"
    with tempfile.TemporaryDirectory(prefix="n17q-mitm-") as work:
        mitmdump, version = _mitmdump(given, Path(work))
        port = _free_port()
        target = server.base_url.removesuffix("/v1")
        proxy = subprocess.Popen(
            [
                mitmdump,
                "--mode",
                f"reverse:{target}",
                "--listen-host",
                "127.0.0.1",
                "--listen-port",
                str(port),
                "--set",
                f"hardump={path}",
                "--set",
                f"confdir={work}/conf",
                "-q",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            deadline = time.monotonic() + DEADLINE
            while True:
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
                if proxy.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"mitmdump did not start: {proxy.stderr.read() if proxy.stderr else ''}")
                time.sleep(0.2)
            first = len(server.requests)
            _run([sys.executable, str(AGENT_DIR / "agent.py")], _env(f"http://127.0.0.1:{port}/v1"))
            did = _did(server, first)
        finally:
            proxy.send_signal(signal.SIGINT)  # savehar writes the HAR when mitmdump shuts down
            proxy.wait(timeout=DEADLINE)
    if not path.exists():
        raise SystemExit("mitmdump wrote no HAR")
    return {path.name: {"producer": version, "entries": did["model_calls"], **did}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", type=Path)
    parser.add_argument("--only", nargs="+", choices=NAMES, help="make only these (default: all)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--mitmdump", help="a mitmdump to use instead of a throwaway venv's")
    group.add_argument("--no-mitmproxy", action="store_true", help="leave the mitmproxy HAR out")
    args = parser.parse_args(argv)
    only = set(args.only or NAMES)
    if args.no_mitmproxy:
        only.discard("mitmproxy")
    args.outdir.mkdir(parents=True, exist_ok=True)
    server = scripted_model.start()
    try:
        files = agent_traces(args.outdir, server, only)
        if "playwright-chromium" in only:
            files.update(playwright_har(args.outdir, server))
        if "mitmproxy" in only:
            files.update(mitmproxy_har(args.outdir, server, args.mitmdump))
    finally:
        server.shutdown()
    versions = {name: metadata.version(name) for name in PACKAGES}
    manifest = {
        "made_by": "scripts/make_producer_traces.py",
        "date": datetime.date.today().isoformat(),
        "python": sys.version.split()[0],
        "versions": versions,
        "files": dict(sorted(files.items())),
    }
    (args.outdir / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    for name, what in sorted(files.items()):
        print(f"{name}: {what}")
    return 0


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):
        sys.exit(main())
