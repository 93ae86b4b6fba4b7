"""Issue 18 points 2 and 5: a registered agent program as the decider, inside the sandbox and nowhere else.

The agent under test is a real program (tests/engine/agents/mcp_openai_agent.py) written with the `mcp` client SDK
and the `openai` client; its model is served from model fixtures (`model.chat`). The fixtures are authored the way
a reviewer would: run, read the request the run stopped on (`fixture.missing` for model.chat, the request in its
`tool.call`), write the completion the scripted model gives at that turn, run again.

Like the sandbox tests, these need the kernel boundary (network, mount and PID namespaces): where it cannot be made
they fail under CI=true and are skipped elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from n17q_demo import seed_scenarios, stories
from n17q_engine.agent.entry import run_agent_replay
from n17q_engine.agent.model import MODEL_CONTRACT, MODEL_TOOL, completion, model_fixture
from n17q_engine.agent.spec import AgentError, AgentSpec, folder_digest
from n17q_engine.canonical import canonical_json
from n17q_engine.package import Package, build_scenario
from n17q_engine.replay import ReplayOutput, iter_output_events
from n17q_engine.sandbox import IsolationUnavailable, Limits, run_sandboxed
from tests.engine import replaylib as rl

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")

AGENTS = Path(__file__).parent / "agents"
SEEDS = {p.manifest["scenario"]["name"]: p for p in seed_scenarios.seed_packages()}
BUNDLES = {b.manifest["run"]["id"]: b for b in stories.demo_bundles()}
ENV = sys.prefix  # the agent's Python environment: this one, bound read-only (it holds mcp and openai)


def _isolation_or_skip() -> None:
    try:
        result = run_sandboxed(
            "n17q_engine.sandbox_child:echo", b"x", allow_degraded=False, limits=Limits(), timeout_s=30
        )
    except IsolationUnavailable:
        if os.environ.get("CI") == "true":
            pytest.fail("the sandbox's namespaces cannot be made on this CI machine; agent replays need them")
        pytest.skip("no namespaces on this machine")
    assert result.ok and result.isolation == "netns"


@pytest.fixture(scope="module", autouse=True)
def _boundary() -> None:
    _isolation_or_skip()


def agent_folder(tmp: Path, *files: str, extra: dict[str, str] | None = None) -> Path:
    """A copy of the agent's files in a folder the sandbox's unprivileged uid can read (the registration)."""
    folder = tmp / "agent"
    folder.mkdir()
    for name in files:
        shutil.copy2(AGENTS / name, folder / name)
    for name, text in (extra or {}).items():
        (folder / name).write_text(text)
    for path in [tmp, folder, *folder.iterdir()]:
        path.chmod(0o755)
    return folder


def register(folder: Path, command: tuple[str, ...], name: str = "test-agent") -> AgentSpec:
    return AgentSpec(name, str(folder), command, folder_digest(folder), ENV)


def with_model(scenario: str, fixtures: list[dict]) -> Package:
    files = {n: json.loads(d) for n, d in SEEDS[scenario].files.items()}
    files["contracts.json"] = [*files["contracts.json"], MODEL_CONTRACT]
    files["fixtures.json"] = [*files["fixtures.json"], *fixtures]
    return build_scenario(files)


def replay_with(agent: AgentSpec, run_id: str, scenario: Package) -> tuple[ReplayOutput, list[dict], Any]:
    b = BUNDLES[run_id]
    events = b"".join(canonical_json(e) + b"\n" for e in b.events)
    pkg = rl.replay_package(
        scenario, b.manifest, events, blobs=b.blobs, mode="counterfactual", vary={"decider": agent.decider_name}
    )
    result = run_agent_replay(pkg, agent, timeout_s=120, allow_test_entries=True)
    assert result.returncode == 0 and result.output, (result.returncode, result.stderr[-3000:], result.events[-5:])
    out = ReplayOutput.from_wire(result.output)
    return out, list(iter_output_events(out)), result


def kinds(log: list[dict], kind: str) -> list[dict]:
    return [e for e in log if e["kind"] == kind]


def final(log: list[dict]) -> dict:
    return kinds(log, "run.state")[-1]


def author(agent: AgentSpec, run_id: str, scenario: str, script: list[tuple[str | None, str | None, dict | None]]):
    """Model fixtures for `script` (one (content, tool, arguments) per model turn), authored run by run."""
    fixtures: list[dict] = []
    for turn in range(len(script) + 1):
        _out, log, _result = replay_with(agent, run_id, with_model(scenario, fixtures))
        state = final(log)
        missing = state["missing"]
        if state["state"] != "incomplete_test_world" or not missing or missing[0]["tool"] != MODEL_TOOL:
            return fixtures, log
        assert turn < len(script), f"the agent asked its model more than the script holds: {state['reason']}"
        request = [c for c in kinds(log, "tool.call") if c["tool"] == MODEL_TOOL][-1]["request"]
        content, tool, arguments = script[turn]
        calls = [(f"call-{turn}", tool, json.dumps(arguments, sort_keys=True))] if tool else None
        body = completion(content, calls, model=request["model"], number=turn)
        fixtures.append(
            model_fixture(
                f"model-{run_id}-{turn}",
                request,
                body,
                recorded_at=rl.T0,
                synthetic=True,
                fidelity_note="scripted model for the agent-decider tests",
            )
        )
    raise AssertionError("the agent kept asking its model after the script ended")


def _recorded_request(run_id: str, call_id: str) -> dict:
    return next(e for e in BUNDLES[run_id].events if e["id"] == call_id)["request"]


@pytest.fixture(scope="module")
def real_agent(tmp_path_factory: pytest.TempPathFactory) -> AgentSpec:
    folder = agent_folder(tmp_path_factory.mktemp("real"), "mcp_openai_agent.py")
    return register(folder, ("python", "mcp_openai_agent.py"))


def test_a_missing_model_response_stops_the_run_precisely(real_agent):
    _out, log, result = replay_with(real_agent, "run-001-recorded", with_model("email-delivery", []))
    (missing,) = kinds(log, "fixture.missing")
    (asked,) = [c for c in kinds(log, "tool.call") if c["tool"] == MODEL_TOOL]
    assert missing["tool"] == MODEL_TOOL and missing["call_id"] == asked["id"]
    assert missing["request_digest"] == asked["request_digest"]
    assert asked["request"]["model"] == "n17q-test-model" and asked["request"]["temperature"] == 0
    assert [m["role"] for m in asked["request"]["messages"]] == ["system", "user"]
    assert {t["function"]["name"] for t in asked["request"]["tools"]} >= {"email.draft_create", "email.send"}
    assert MODEL_TOOL not in {t["function"]["name"] for t in asked["request"]["tools"]}
    state = final(log)
    assert state["state"] == "incomplete_test_world" and "model.chat revision 1" in state["reason"]
    assert kinds(log, "effect.intent") == [] and result.isolation == "netns"


def test_story_001_the_agent_sends_exactly_once_in_the_replay_namespace(real_agent):
    run = "run-001-recorded"
    script = [
        (None, "email.draft_create", _recorded_request(run, "e-001-call-draft-create")),
        (None, "email.draft_update", _recorded_request(run, "e-001-call-draft-update")),
        (None, "email.send", {"draft_id": "dr-5501"}),
        ("Sent the notice once to the narrowed audience.", None, None),
    ]
    fixtures, log = author(real_agent, run, "email-delivery", script)
    assert len(fixtures) == 4
    (intent,) = kinds(log, "effect.intent")
    (execution,) = kinds(log, "effect.execution")
    assert intent["namespace"].startswith("replay:") and intent["idempotency_key"].startswith("replay:")
    assert execution["outcome"] == "acknowledged" and execution["connection"].startswith("fixture:")
    deliveries = [t for t in kinds(log, "world.transition") if t["resource"].startswith("mailbox:")]
    assert len(deliveries) == 1
    agent_calls = [c["tool"] for c in kinds(log, "tool.call") if c["tool"] != MODEL_TOOL]
    assert agent_calls[:2] == ["email.draft_create", "email.draft_update"]
    proposals = [p["proposal"] for p in kinds(log, "model.proposal")]
    assert proposals[2] == {"type": "tool_call", "tool": "email.send", "draft_id": "dr-5501"}
    assert len([c for c in kinds(log, "tool.call") if c["tool"] == MODEL_TOOL]) == 4
    state = final(log)
    assert state["state"] == "completed", state["reason"]
    assert {i["id"]: i["held"] for i in state["invariants"]}.get("one-delivery", True) is True
    # the same package and fixtures again: byte-identical log
    again = replay_with(real_agent, run, with_model("email-delivery", fixtures))[0]
    first = replay_with(real_agent, run, with_model("email-delivery", fixtures))[0]
    assert again.events == first.events


def test_story_003_the_agent_reruns_validation_in_workspace_two_sees_the_failure_and_stops_without_a_request(
    real_agent,
):
    run = "run-003-review-request"
    req = lambda call: _recorded_request(run, call)  # noqa: E731
    script = [
        (None, "repo.read_file", {**req("e-003-a1-call-read-adapter"), "workspace": "ws-1"}),
        (None, "repo.read_file", {**req("e-003-a1-call-read-migration"), "workspace": "ws-1"}),
        (None, "repo.apply_patch", {**req("e-003-a1-call-apply-patch"), "workspace": "ws-1"}),
        (None, "shell.run", {**req("e-003-a1-call-focused"), "workspace": "ws-1"}),
        (None, "shell.run", {**req("e-003-a1-call-broad"), "workspace": "ws-1"}),
        (None, "repo.apply_patch", {**req("e-003-a2-call-apply-patch"), "workspace": "ws-2"}),
        (None, "shell.run", {**req("e-003-a1-call-broad"), "workspace": "ws-2"}),
        ("The broad suite fails in ws-2 (test_adapter_roundtrip_preserves_cursor): no review request.", None, None),
    ]
    fixtures, log = author(real_agent, run, "coding-review-request", script)
    assert len(fixtures) == len(script)
    ws2 = [r for r in kinds(log, "command.receipt") if r["workspace_id"] == "ws-2"]
    assert [r["command"] for r in ws2] == ["pytest -q tests"]
    assert ws2[0]["results"]["failed"] == 1
    assert kinds(log, "effect.intent") == [] and kinds(log, "effect.execution") == []
    assert "review.create_request" not in [c["tool"] for c in kinds(log, "tool.call")]
    state = final(log)
    assert state["state"] == "stopped"
    assert "review.create_request" in state["reason"] and "fails in ws-2" in state["reason"]


def test_an_agent_whose_folder_changed_since_registration_is_refused(real_agent, tmp_path):
    folder = agent_folder(tmp_path, "mcp_openai_agent.py")
    spec = register(folder, ("python", "mcp_openai_agent.py"))
    (folder / "mcp_openai_agent.py").write_text("print('changed')\n")
    b = BUNDLES["run-001-recorded"]
    pkg = rl.replay_package(SEEDS["email-delivery"], b.manifest, b"".join(canonical_json(e) + b"\n" for e in b.events))
    with pytest.raises(AgentError, match="changed since registration"):
        run_agent_replay(pkg, spec)


# --- the boundary (point 5): probes from inside the agent, with positive controls ---------------------------------


class Canaries:
    """Host-side listeners the probes aim at: TCP and UDP on the host's loopback, a host unix socket, a host file."""

    def __init__(self, tmp: Path) -> None:
        self.hits: list[str] = []
        self.tcp = socket.socket()
        self.tcp.bind(("127.0.0.1", 0))
        self.tcp.listen()
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", 0))
        self.unix_path = str(tmp / "host.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.unix_path)
        self.unix.listen()
        self.host_file = tmp / "host-secret.txt"
        self.host_file.write_text("host secret: never inside")
        self.host_file.chmod(0o644)
        for name, sock in (("tcp", self.tcp), ("udp", self.udp), ("unix", self.unix)):
            sock.settimeout(0.2)
            threading.Thread(target=self._listen, args=(name, sock), daemon=True).start()

    def _listen(self, name: str, sock: socket.socket) -> None:
        while True:
            try:
                if name == "udp":
                    sock.recvfrom(64)
                else:
                    conn, _ = sock.accept()
                    conn.close()
            except TimeoutError:
                continue
            except OSError:
                return
            self.hits.append(name)

    def targets(self) -> dict[str, Any]:
        return {
            "tcp_port": self.tcp.getsockname()[1],
            "udp_port": self.udp.getsockname()[1],
            "dns_name": "localhost",
            "unix_path": self.unix_path,
            "host_file": str(self.host_file),
            "host_pid": os.getpid(),
        }

    def close(self) -> None:
        for sock in (self.tcp, self.udp, self.unix):
            sock.close()


@pytest.fixture
def canaries(tmp_path):
    c = Canaries(tmp_path)
    yield c
    c.close()


def _probe_run(agent: AgentSpec) -> tuple[list[dict], Any]:
    _out, log, result = replay_with(agent, "run-001-recorded", with_model("email-delivery", []))
    return log, result


def _settle(canaries: Canaries) -> list[str]:
    import time

    time.sleep(0.5)  # let the canaries' threads take what arrived (nothing should have)
    return list(canaries.hits)


def test_a_python_agent_cannot_reach_out_and_its_attempts_stop_the_run(canaries, tmp_path):
    targets = canaries.targets()
    folder = agent_folder(tmp_path, "probe_agent.py", extra={"targets.json": json.dumps(targets)})
    agent = register(folder, ("python", "probe_agent.py"), name="probe-py")
    # Positive control: the same program outside the sandbox reaches every target.
    outside = subprocess.run([sys.executable, str(folder / "probe_agent.py")], capture_output=True, timeout=30)
    report = json.loads(outside.stderr.decode().split("n17q.sandbox.attempt ", 1)[1])
    controls = {a["target"]: a["result"] for a in report["attempts"]}
    assert all(r.startswith("reached") for t, r in controls.items() if "write" not in t), controls
    assert sorted(set(_settle(canaries))) == ["tcp", "udp", "unix"]
    (folder / "written-by-agent.txt").unlink()
    canaries.hits.clear()

    log, result = _probe_run(agent)
    assert _settle(canaries) == [], "nothing from inside the sandbox reached a host listener"
    seen = {v["target"]: v for v in result.events if v.get("event") == "sandbox.violation"}
    assert len(seen) == 7
    udp = f"udp 127.0.0.1:{targets['udp_port']}"
    for target, violation in seen.items():
        # A datagram to 127.0.0.1 leaves without an error inside: it lands on the namespace's own loopback, never
        # on the host's (the canary heard nothing), so the agent cannot tell; every other attempt fails outright.
        assert violation["stopped"] is (target != udp), (target, violation)
    observed = {t: v["observed"] for t, v in seen.items()}
    assert "denied:FileNotFoundError" in observed[f"read {targets['host_file']}"]
    assert "denied:OSError:30" in observed["write into its own (read-only) folder"]  # EROFS
    assert "denied:ProcessLookupError" in observed[f"pid {os.getpid()}"]
    assert not (folder / "written-by-agent.txt").exists()
    state = final(log)
    assert state["state"] == "stopped" and state["reason"].startswith("sandbox.violation: agent probe-py attempted")
    assert result.violations and not result.ok


def test_a_non_python_agent_cannot_reach_out_either(canaries, tmp_path):
    t = canaries.targets()
    shell = (
        f"TCP_PORT={t['tcp_port']}\nUDP_PORT={t['udp_port']}\nHOST_FILE={t['host_file']}\nHOST_PID={t['host_pid']}\n"
    )
    folder = agent_folder(tmp_path, "probe_agent.sh", extra={"targets.sh": shell})
    agent = register(folder, ("probe_agent.sh",), name="probe-sh")
    outside = subprocess.run([str(folder / "probe_agent.sh")], capture_output=True, timeout=30)
    report = json.loads(outside.stderr.decode().split("n17q.sandbox.attempt ", 1)[1])
    assert [a["result"] for a in report["attempts"]] == ["reached"] * 4  # positive control
    assert sorted(set(_settle(canaries))) == ["tcp", "udp"]
    canaries.hits.clear()

    log, result = _probe_run(agent)
    assert _settle(canaries) == []
    violations = [v for v in result.events if v.get("event") == "sandbox.violation"]
    results = {v["target"].split(" ")[0]: v["observed"] for v in violations}
    assert len(violations) == 4
    assert "denied" in results["tcp"] and "denied" in results["read"] and "denied" in results["pid"]
    # UDP to 127.0.0.1 "succeeds" inside: it lands on the namespace's own loopback, never on the host's (the
    # canary above heard nothing), so the agent reports it reached what it could not tell apart.
    assert final(log)["state"] == "stopped"
