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
import secrets
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from n17q_demo import seed_scenarios, stories
from n17q_engine.agent.decider import AgentSession
from n17q_engine.agent.entry import run_agent_replay
from n17q_engine.agent.model import MODEL_CONTRACT, MODEL_TOOL, completion, model_fixture
from n17q_engine.agent.spec import AgentError, AgentSpec, folder_digest
from n17q_engine.canonical import canonical_json
from n17q_engine.package import Package, build_replay, build_scenario
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


def agent_package(
    agent: AgentSpec,
    run_id: str,
    scenario: Package,
    checkpoint: str | None = None,
    *,
    replay_id: str = "replay-1",
    launched_at: str = "2026-12-02T12:00:00Z",
) -> Package:
    """A counterfactual whose decider is the agent, from the run's start or from a recorded checkpoint (the branch
    restores the history before it, then the agent decides)."""
    b = BUNDLES[run_id]
    return build_replay(
        replay_id=replay_id,
        run_id=f"{run_id}~{replay_id}",
        mode="counterfactual",
        vary={"decider": agent.decider_name},
        decider="recorded",
        launched_at=launched_at,
        scenario=scenario,
        source_manifest=b.manifest,
        source_events=b"".join(canonical_json(e) + b"\n" for e in b.events),
        source_blobs=b.blobs,
        checkpoint=checkpoint,
    )


def replay_with(
    agent: AgentSpec, run_id: str, scenario: Package, checkpoint: str | None = None, **package: str
) -> tuple[ReplayOutput, list[dict], Any]:
    pkg = agent_package(agent, run_id, scenario, checkpoint, **package)
    result = run_agent_replay(pkg, agent, timeout_s=120, allow_test_entries=True)
    assert result.returncode == 0 and result.output, (result.returncode, result.stderr[-3000:], result.events[-5:])
    out = ReplayOutput.from_wire(result.output)
    return out, list(iter_output_events(out)), result


def kinds(log: list[dict], kind: str) -> list[dict]:
    return [e for e in log if e["kind"] == kind]


def final(log: list[dict]) -> dict:
    return kinds(log, "run.state")[-1]


def author(
    agent: AgentSpec,
    run_id: str,
    scenario: str,
    script: list[tuple[str | None, str | None, dict | None]],
    checkpoint: str | None = None,
):
    """Model fixtures for `script` (one (content, tool, arguments) per model turn), authored run by run."""
    fixtures: list[dict] = []
    for turn in range(len(script) + 1):
        _out, log, _result = replay_with(agent, run_id, with_model(scenario, fixtures), checkpoint)
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


def test_a_stopped_replay_ends_the_agents_input_so_an_mcp_client_ends_by_itself():
    """An MCP client reads its stdin until end of file (the `mcp` SDK's stdio transport does, in a thread no
    cancellation reaches). Once the run has stopped, the session closes the agent's input: an agent that reads to the
    end and exits with its own status is not killed at the end of the grace period (it was, after ten seconds each
    time a replay stopped)."""
    from types import SimpleNamespace

    session = AgentSession(SimpleNamespace(name="reader"), SimpleNamespace(workspaces=[], contracts=[]))  # type: ignore[arg-type]
    session.proc = subprocess.Popen(
        [sys.executable, "-c", "import sys; sys.stdin.buffer.read(); sys.exit(7)"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    try:
        session.close()
        assert session.proc.returncode == 7  # its own status, not -9 (killed)
    finally:
        if session.proc.poll() is None:
            session.proc.kill()
        for pipe in (session.proc.stdout, session.proc.stderr):
            assert pipe is not None
            pipe.close()


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


STORY_001 = "run-001-recorded"


def story_001_script() -> list[tuple[str | None, str | None, dict | None]]:
    run = STORY_001
    return [
        (None, "email.draft_create", _recorded_request(run, "e-001-call-draft-create")),
        (None, "email.draft_update", _recorded_request(run, "e-001-call-draft-update")),
        (None, "email.send", {"draft_id": "dr-5501"}),
        ("Sent the notice once to the narrowed audience.", None, None),
    ]


@pytest.fixture(scope="module")
def story_001_authored(real_agent) -> tuple[list[dict], list[dict]]:
    """Story 001's model fixtures authored run by run for the real agent, and the last run's log: authored once for
    the tests that read them (five sandboxed replays), never changed by them."""
    return author(real_agent, STORY_001, "email-delivery", story_001_script())


def test_story_001_the_agent_sends_exactly_once_in_the_replay_namespace(real_agent, story_001_authored):
    run = STORY_001
    fixtures, log = story_001_authored
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


# What names a replay itself, and nothing else differs between two replays of one branch with the same decisions
# (docs/agents.md "Determinism"): the manifest's run id, its created_at (the launch instant), replay.id and
# replay.package (the digest of a package that holds the other three), every event's at.wall (the launch instant), the
# replay.scope note's package (that digest again) and a simulated approval.recorded's run (the replay's run id).
REPLAY_OWN_RUN_FIELDS = ("id", "created_at")
REPLAY_OWN_REPLAY_FIELDS = ("id", "package")


def _without_replay_own(out: ReplayOutput) -> tuple[dict, list[dict]]:
    manifest = json.loads(json.dumps(out.manifest))
    run = manifest["run"]
    for key in REPLAY_OWN_RUN_FIELDS:
        run.pop(key)
    for key in REPLAY_OWN_REPLAY_FIELDS:
        run["replay"].pop(key)
    events = []
    for event in iter_output_events(out):
        del event["at"]["wall"]
        if event["kind"] == "replay.scope":
            del event["package"]
        if event["kind"] == "approval.recorded" and event["origin"] == "simulated":
            assert event.pop("run") == out.manifest["run"]["id"]
        events.append(event)
    return manifest, events


def test_story_001_with_its_send_replayed_twice_by_two_replays_completes_both_times_with_identical_requests(
    real_agent, story_001_authored
):
    """Issue 36 point 1: the send's result hands the agent the execution's id and idempotency key, and the agent's next
    model request carries them. Fixtures authored from one replay must answer the next one: every value a replay
    generates derives from the recorded run, the branch point, what the replay varies and the position in it, never
    from the replay's own id (which the console makes new for every launch). Red before: the second replay stopped
    `incomplete_test_world` at the model request after the send."""
    run, script = STORY_001, story_001_script()
    fixtures, authored = story_001_authored
    assert final(authored)["state"] == "completed", final(authored)["reason"]
    scenario = with_model("email-delivery", fixtures)
    outs = [
        replay_with(real_agent, run, scenario, replay_id=replay_id, launched_at=launched)[0]
        for replay_id, launched in (("replay-41", "2026-12-05T08:00:00Z"), ("replay-42", "2026-12-06T09:30:00.5Z"))
    ]
    requests = []
    for out in outs:
        log = list(iter_output_events(out))
        assert final(log)["state"] == "completed", final(log)["reason"]
        (execution,) = kinds(log, "effect.execution")
        asked = [c["request"] for c in kinds(log, "tool.call") if c["tool"] == MODEL_TOOL]
        assert len(asked) == len(script)
        # the request after the send carries what the send answered: the execution's id and idempotency key
        after_send = canonical_json(asked[3])
        assert execution["id"].encode() in after_send and execution["idempotency_key"].encode() in after_send
        requests.append([canonical_json(r) for r in asked])
    assert requests[0] == requests[1]  # byte for byte
    assert requests[0] == [canonical_json(f["request"]) for f in fixtures]
    first, second = (_without_replay_own(out) for out in outs)
    assert len(first[1]) == len(second[1])
    for a, b in zip(first[1], second[1], strict=True):
        assert a == b, {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    assert first[0] == second[0]
    # and the fields left out are the replay's own: they differ
    assert outs[0].manifest["run"]["id"] != outs[1].manifest["run"]["id"]
    assert outs[0].events != outs[1].events  # at.wall only (the launch instants differ)
    assert outs[0].blobs == outs[1].blobs


def test_what_the_sandbox_hands_an_agent_is_the_same_in_two_replays_of_one_branch(tmp_path):
    """HOME, TMPDIR, the model endpoint's URL (its port no longer the kernel's pick), the working folder: the agent
    puts them in its model request, which two replays with their own ids, run ids and launch instants make alike."""
    agent = register(agent_folder(tmp_path, "env_agent.py"), ("python", "env_agent.py"), name="env-agent")
    asked = []
    for replay_id, launched in (("replay-51", "2026-12-05T08:00:00Z"), ("replay-52", "2026-12-06T09:00:00Z")):
        _out, log, _result = replay_with(
            agent, "run-001-recorded", with_model("email-delivery", []), replay_id=replay_id, launched_at=launched
        )
        (call,) = [c for c in kinds(log, "tool.call") if c["tool"] == MODEL_TOOL]
        assert final(log)["state"] == "incomplete_test_world"
        asked.append(canonical_json(call["request"]))
    assert asked[0] == asked[1]
    seen = json.loads(json.loads(asked[0])["messages"][0]["content"])
    assert seen["OPENAI_BASE_URL"] == "http://198.18.0.1:8400/v1" and seen["HOME"] == seen["TMPDIR"]


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


def test_story_003_from_the_checkpoint_before_the_broad_suite_the_agent_reruns_validation_in_workspace_two_and_stops(
    real_agent,
):
    """The acceptance story: a new agent started from the checkpoint before the broad suite (seed 003's second
    mode). The history up to it is restored as recorded; the agent decides from there."""
    run, checkpoint = "run-003-review-request", "e-003-a1-checkpoint"
    req = lambda call: _recorded_request(run, call)  # noqa: E731
    script = [
        (None, "shell.run", {**req("e-003-a1-call-broad"), "workspace": "ws-1"}),
        (None, "repo.apply_patch", {**req("e-003-a2-call-apply-patch"), "workspace": "ws-2"}),
        (None, "shell.run", {**req("e-003-a1-call-broad"), "workspace": "ws-2"}),
        ("The broad suite fails in ws-2 (test_adapter_roundtrip_preserves_cursor): no review request.", None, None),
    ]
    fixtures, log = author(real_agent, run, "coding-review-request", script, checkpoint)
    assert len(fixtures) == len(script)

    scope = log[0]
    assert scope["kind"] == "replay.scope" and scope["segment"]["from_checkpoint"] == checkpoint
    assert "agent:test-agent" in scope["segment"]["evaluated"]
    restored = scope["segment"]["restored"]
    at = next(i for i, e in enumerate(log) if e["id"] == restored["checkpoint"])
    history, segment = log[: at + 1], log[at + 1 :]
    # the history is the recording's, restored before the agent ran: no model call, the focused run in ws-1 only
    assert [c for c in kinds(history, "tool.call") if c["tool"] == MODEL_TOOL] == []
    assert all(p["origin"] == "recorded" for p in kinds(history, "model.proposal"))
    assert [r["command"] for r in kinds(history, "command.receipt")] == ["pytest -q tests/test_adapter.py"]
    assert restored["workspaces"] == next(e for e in BUNDLES[run].events if e["id"] == checkpoint)["workspaces"]
    # from the checkpoint the agent decides: its model calls, then validation rerun in workspace two, which fails
    assert len([c for c in kinds(segment, "tool.call") if c["tool"] == MODEL_TOOL]) == len(script)
    ws2 = [r for r in kinds(segment, "command.receipt") if r["workspace_id"] == "ws-2"]
    assert [r["command"] for r in ws2] == ["pytest -q tests"]
    assert ws2[0]["results"]["failed"] == 1
    assert kinds(log, "effect.intent") == [] and kinds(log, "effect.execution") == []
    assert "review.create_request" not in [c["tool"] for c in kinds(log, "tool.call")]
    assert [t for t in kinds(log, "world.transition") if t["resource"].startswith("review-service:")] == []
    state = final(log)
    assert state["state"] == "stopped"
    assert "review.create_request" in state["reason"] and "fails in ws-2" in state["reason"]
    # the same package twice: byte-identical logs
    scenario = with_model("coding-review-request", fixtures)
    first = replay_with(real_agent, run, scenario, checkpoint)[0]
    second = replay_with(real_agent, run, scenario, checkpoint)[0]
    assert first.to_wire() == second.to_wire()


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
        self.loops = {"tcp": 0, "udp": 0, "unix": 0}  # each listener's turns: one per accept/recv tried
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
                self.loops[name] += 1
                continue
            except OSError:
                return
            self.hits.append(name)
            self.loops[name] += 1

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


def _settle(canaries: Canaries, expect: frozenset[str] = frozenset()) -> list[str]:
    """What reached the host listeners, once each listener has tried to take something at least twice since now (a
    connection or datagram that arrived is in the kernel's queue by then, so it is taken), and every expected one
    has arrived; a poll under a generous deadline, never a fixed wait."""
    import time

    start = dict(canaries.loops)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        turned = all(canaries.loops[name] >= start[name] + 2 for name in start)
        if turned and set(canaries.hits) >= expect:
            break
        time.sleep(0.05)
    return list(canaries.hits)


def _channel(result: Any) -> list[dict]:
    return [v for v in result.events if v.get("event") == "sandbox.violation"]


def _watched(result: Any) -> dict[str, dict]:
    """The attempts the network watch saw (the kernel route), by target."""
    return {v["target"]: v for v in _channel(result) if "network watch" in v.get("observed", "")}


def test_a_python_agent_cannot_reach_out_and_its_attempts_stop_the_run(canaries, tmp_path):
    targets = canaries.targets()
    folder = agent_folder(tmp_path, "probe_agent.py", extra={"targets.json": json.dumps(targets)})
    agent = register(folder, ("python", "probe_agent.py"), name="probe-py")
    # Positive control: the same program outside the sandbox reaches every target.
    outside = subprocess.run([sys.executable, str(folder / "probe_agent.py")], capture_output=True, timeout=30)
    report = json.loads(outside.stderr.decode().split("n17q.sandbox.attempt ", 1)[1])
    controls = {a["target"]: a["result"] for a in report["attempts"]}
    assert all(r.startswith("reached") for t, r in controls.items() if "write" not in t), controls
    assert sorted(set(_settle(canaries, frozenset({"tcp", "udp", "unix"})))) == ["tcp", "udp", "unix"]
    (folder / "written-by-agent.txt").unlink()
    canaries.hits.clear()

    log, result = _probe_run(agent)
    assert _settle(canaries) == [], "nothing from inside the sandbox reached a host listener"
    tcp, udp = f"tcp 127.0.0.1:{targets['tcp_port']}", f"udp 127.0.0.1:{targets['udp_port']}"
    # the kernel route saw the network attempts: 127.0.0.1 is not local inside, it leads into the watch's TUN
    watched = _watched(result)
    assert {tcp, udp, "localhost"} <= set(watched), watched
    assert watched["localhost"]["attempted"] == "dns" and all(v["stopped"] for v in watched.values())
    # the run stopped at the first of them, recorded in its own log as a sandbox.violation
    state = final(log)
    assert state["state"] == "stopped" and state["reason"].startswith("sandbox.violation: agent probe-py attempted")
    in_log = kinds(log, "sandbox.violation")
    assert in_log and {v["target"] for v in in_log} <= set(watched) and all(v["stopped"] for v in in_log)
    # what never leaves through a network device is denied by the mount and PID namespaces; the agent's own report
    # of it (written after the stop) is still on the sandbox's channel
    reported = {v["target"]: v["observed"] for v in _channel(result) if "reported by agent" in v["observed"]}
    assert "denied:FileNotFoundError" in reported[f"read {targets['host_file']}"]
    assert "denied:OSError:30" in reported["write into its own (read-only) folder"]  # EROFS
    assert "denied:ProcessLookupError" in reported[f"pid {os.getpid()}"]
    assert "denied:FileNotFoundError" in reported[f"unix {targets['unix_path']}"]
    assert not (folder / "written-by-agent.txt").exists()
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
    assert sorted(set(_settle(canaries, frozenset({"tcp", "udp"})))) == ["tcp", "udp"]
    canaries.hits.clear()

    log, result = _probe_run(agent)
    assert _settle(canaries) == []
    assert {f"tcp 127.0.0.1:{t['tcp_port']}", f"udp 127.0.0.1:{t['udp_port']}"} <= set(_watched(result))
    reported = {v["target"].split(" ")[0]: v["observed"] for v in _channel(result) if "reported" in v["observed"]}
    assert "denied" in reported["tcp"] and "denied" in reported["read"] and "denied" in reported["pid"]
    assert final(log)["state"] == "stopped"


def test_a_quiet_agent_that_exits_0_is_stopped_by_what_the_kernel_route_saw(canaries, tmp_path):
    """A bash agent (no Python, no audit hook) tries TCP, UDP and DNS, reports nothing and exits 0: the network
    watch saw each attempt, the run stops with them recorded as sandbox.violation, and no host listener heard it."""
    t = canaries.targets()
    shell = f"TCP_PORT={t['tcp_port']}\nUDP_PORT={t['udp_port']}\nDNS_NAME=localhost\n"
    folder = agent_folder(tmp_path, "quiet_probe.sh", extra={"targets.sh": shell})
    agent = register(folder, ("quiet_probe.sh",), name="quiet-sh")
    # Positive control: outside, the same program reaches both host listeners (and resolves the name), exit 0.
    outside = subprocess.run([str(folder / "quiet_probe.sh")], capture_output=True, timeout=30)
    assert outside.returncode == 0 and outside.stderr == b""
    assert sorted(set(_settle(canaries, frozenset({"tcp", "udp"})))) == ["tcp", "udp"]
    canaries.hits.clear()

    log, result = _probe_run(agent)
    assert _settle(canaries) == [], "nothing from inside the sandbox reached a host listener"
    tcp, udp = f"tcp 127.0.0.1:{t['tcp_port']}", f"udp 127.0.0.1:{t['udp_port']}"
    watched = _watched(result)
    assert set(watched) == {tcp, udp, "localhost"}, watched
    assert [watched[x]["attempted"] for x in (tcp, udp, "localhost")] == ["socket", "socket", "dns"]
    assert not [v for v in _channel(result) if "reported" in v["observed"]]  # it said nothing itself
    state = final(log)
    assert state["state"] == "stopped" and state["reason"].startswith("sandbox.violation: agent quiet-sh attempted")
    assert "seen by the network watch" in state["reason"]
    in_log = kinds(log, "sandbox.violation")
    assert in_log and {v["target"] for v in in_log} <= {tcp, udp, "localhost"}
    assert kinds(log, "effect.intent") == [] and not result.ok


# --- the live model relay: a loopback OpenAI-compatible server stands in for a provider ----------------------------

# Made when the tests run, never written in a file: the sandbox binds the checkout read-only (the engine and the
# worker's environment live there), so an agent walking what it can read sees these tests' own source; a secret or a
# variable name spelled out in it would be "found" there although no credential reached the sandbox.
SECRET = "sk-n17q-test-" + secrets.token_hex(16)
# In the model-credential namespace (fixtures_review.model_endpoints): the only names a model connection may use.
CREDENTIAL_NAME = "N17Q_MODEL_CREDENTIAL_TEST_" + secrets.token_hex(4).upper()


class Provider:
    """A tiny OpenAI-compatible provider on the host's loopback: it records what it was sent and answers a chat
    completion. No hosted model is reachable here; this is the relay's far end."""

    def __init__(self) -> None:
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                received.append({"path": self.path, "headers": dict(self.headers), "body": body})
                answer = completion(f"live answer {len(received)}", model=body["model"], number=len(received))
                data = json.dumps(answer).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def endpoint(self, credential: str = CREDENTIAL_NAME) -> Any:
        """This provider as an approved model connection names it (replays.relay.ModelEndpoint)."""
        from fixtures_review.model_endpoints import ModelEndpoint

        return ModelEndpoint(scheme="http", host="127.0.0.1", port=self.port, path_prefix="/v1", credential=credential)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def provider(monkeypatch):
    monkeypatch.setenv(CREDENTIAL_NAME, SECRET)  # the worker's environment: the credential lives here only
    p = Provider()
    yield p
    p.close()


def _live_probe_replay(tmp_path):
    """The live-probe agent registered, and story 001 packaged as a counterfactual with it as the decider."""
    folder = agent_folder(tmp_path, "live_probe_agent.py")
    agent = register(folder, ("python", "live_probe_agent.py"), name="live-probe")
    b = BUNDLES["run-001-recorded"]
    pkg = rl.replay_package(
        SEEDS["email-delivery"],
        b.manifest,
        b"".join(canonical_json(e) + b"\n" for e in b.events),
        blobs=b.blobs,
        mode="counterfactual",
        vary={"decider": agent.decider_name},
    )
    return agent, pkg


def test_live_relay_sends_the_agents_model_calls_through_the_worker_and_the_credential_never_enters(provider, tmp_path):
    from replays.relay import ModelRelay

    agent, pkg = _live_probe_replay(tmp_path)
    result = run_agent_replay(
        pkg,
        agent,
        timeout_s=120,
        allow_test_entries=True,
        relay=ModelRelay(provider.endpoint(), max_calls=10),
        live_connection="loopback-provider",
    )
    assert result.returncode == 0 and result.output, (result.returncode, result.stderr[-3000:])
    out = ReplayOutput.from_wire(result.output)
    log = list(iter_output_events(out))

    # the provider got both calls, with the credential the worker added (positive control)
    assert [r["path"] for r in provider.received] == ["/v1/chat/completions"] * 2
    assert all(r["headers"]["Authorization"] == f"Bearer {SECRET}" for r in provider.received)
    # everything the agent could see (its environment, every file it could read) went to the provider in its
    # second request: the credential is not in it, nor anywhere in the run's log or the sandbox's output
    dump = json.loads(provider.received[1]["body"]["messages"][-1]["content"])
    assert dump["environ"]["OPENAI_API_KEY"] == "n17q-sandbox-no-credential"
    assert CREDENTIAL_NAME not in dump["environ"]
    assert any(p.endswith("/environ") and not v.startswith("unreadable") for p, v in dump["files"].items())
    assert SECRET not in json.dumps(dump) and CREDENTIAL_NAME not in json.dumps(dump["files"])
    assert SECRET.encode() not in result.output and SECRET not in result.stderr
    # each relayed call is recorded, its result with origin `live`; the run names its model source as live
    calls = [c for c in kinds(log, "tool.call") if c["tool"] == MODEL_TOOL]
    results = [r for r in kinds(log, "tool.result") if r["call_id"] in {c["id"] for c in calls}]
    assert len(calls) == 2 and [r["origin"] for r in results] == ["live", "live"]
    assert {r["connection"] for r in results} == {"live:loopback-provider"}
    assert all("fixture" not in r for r in results) and kinds(log, "fixture.missing") == []
    assert out.manifest["run"]["model"]["source"] == "live:loopback-provider"
    state = final(log)
    assert state["state"] == "stopped" and "live answer 2" in state["reason"]


def test_a_live_relay_that_fails_stops_the_run_with_the_reason(monkeypatch, tmp_path):
    from fixtures_review.model_endpoints import ModelEndpoint
    from replays.relay import ModelRelay

    monkeypatch.delenv(CREDENTIAL_NAME, raising=False)
    agent, pkg = _live_probe_replay(tmp_path)
    result = run_agent_replay(
        pkg,
        agent,
        allow_test_entries=True,
        relay=ModelRelay(ModelEndpoint("http", "127.0.0.1", 9, "/v1", CREDENTIAL_NAME), max_calls=10),
    )
    log = list(iter_output_events(ReplayOutput.from_wire(result.output)))
    (relayed,) = [r for r in kinds(log, "tool.result") if r["origin"] == "live"]
    assert relayed["outcome"] == "error"
    state = final(log)
    assert state["state"] == "stopped"
    assert f"the worker's environment holds no {CREDENTIAL_NAME}" in state["reason"]


def test_a_relay_whose_replay_already_used_its_cap_stops_the_run_saying_so(monkeypatch, tmp_path):
    """The count is the replay's, not the relay's (issue 33): a relay built for a replay claimed again continues the
    count its earlier claim left. At the cap, the agent's first call is refused, reaches no endpoint, and the run
    stops with a reason that says the cap was reached and how many calls were made."""
    from replays.relay import LocalCount, ModelRelay

    provider = Provider()
    monkeypatch.setenv(CREDENTIAL_NAME, SECRET)
    try:
        count = LocalCount()  # the replay's count (in the console: its row, replays.relay_count)
        earlier = ModelRelay(provider.endpoint(), max_calls=1, count=count)  # the claim whose worker died
        assert "body" in json.loads(earlier(json.dumps({"model": "probe", "messages": []}).encode()))
        agent, pkg = _live_probe_replay(tmp_path)
        result = run_agent_replay(
            pkg,
            agent,
            timeout_s=120,
            allow_test_entries=True,
            relay=ModelRelay(provider.endpoint(), max_calls=1, count=count),
            live_connection="loopback-provider",
        )
    finally:
        provider.close()
    log = list(iter_output_events(ReplayOutput.from_wire(result.output)))
    assert len(provider.received) == 1  # only the earlier claim's call
    state = final(log)
    assert state["state"] == "stopped"
    assert "cap of 1 model calls for this replay is reached (1 made, counting every claim of it)" in state["reason"]


def test_the_agent_holds_no_descriptor_of_the_watch_and_cannot_reach_the_engines(tmp_path):
    """The TUN's descriptor stays the engine's: the agent inherits only its stdio, and no process of the engine's is
    in its /proc at all (its PID namespace's own: only its own tree; the engine is also non-dumpable, so even named
    it would refuse /proc/<pid>/fd and pidfd_getfd)."""
    script = (
        "#!/bin/bash\n"
        'echo "own: $(ls -l /proc/$$/fd | tail -n +2 | sed "s/.* \\([0-9]*\\) -> /\\1>/" | tr "\\n" " ")" >&2\n'
        'echo "procs: $$ $(for p in /proc/[0-9]*; do echo -n "$(cat $p/comm 2>&1) "; done)" >&2\n'
        'echo "tun: $(ls /dev/net/tun 2>&1 | head -c 120)" >&2\n'
        "exit 5\n"
    )
    folder = agent_folder(tmp_path, extra={"fds.sh": script})
    (folder / "fds.sh").chmod(0o755)
    agent = register(folder, ("fds.sh",), name="fds")
    log, _result = _probe_run(agent)
    reason = final(log)["reason"]
    assert final(log)["state"] == "failed" and "exited with status 5" in reason
    own = reason.split("own: ", 1)[1].split(" | ", 1)[0].split()
    # its stdio (pipes to the engine), bash's script and its own command-substitution pipe: nothing else
    assert [f.split(">")[0] for f in own][:3] == ["0", "1", "2"], reason
    assert all(f.split(">", 1)[1].startswith("pipe:") or f.endswith("/fds.sh") for f in own), reason
    procs = reason.split("procs: ", 1)[1].split(" | ", 1)[0].split()
    # the script is pid 1 of its own namespace, and its /proc holds its own tree only (no engine, no starter)
    assert procs[0] == "1" and procs[1:] and set(procs[1:]) == {"fds.sh"}, reason
    assert "No such file or directory" in reason.split("tun: ", 1)[1]


# --- issue 33: the agent cannot stop its own replay's record ------------------------------------------------------


def test_an_agent_that_signals_its_parent_pid_1_and_every_pid_cannot_stop_the_engine(tmp_path):
    """Attack: the agent sends SIGINT, SIGTERM, SIGHUP, SIGUSR1/2, SIGPIPE, SIGQUIT, SIGALRM, SIGSTOP and SIGKILL to
    its parent, pid 1, its process group and every pid it may signal (`kill(-1)`), SIGIO through an O_ASYNC pipe, and
    SIGKILL through a descriptor of every /proc entry outside its own tree (pidfd_send_signal). The agent is the first
    process of a PID namespace of its own (the agent starter's), leading its own session: it has no parent it can name
    (getppid() is 0), pid 1 and its group are itself, `kill(-1)` finds nobody (ESRCH), and its /proc, the namespace's
    own, holds no entry of the engine's or the starter's. The replay ends with a run that
    records what the agent did (its exit status and its last stderr lines): the engine wrote it after the agent had
    gone."""
    folder = agent_folder(tmp_path, "signal_agent.py")
    agent = register(folder, ("python", "signal_agent.py"), name="signaller")
    _out, log, result = replay_with(agent, "run-001-recorded", with_model("email-delivery", []))
    state = final(log)
    assert state["state"] == "failed" and "agent signaller exited with status 3" in state["reason"], state
    reason = state["reason"]
    assert "ppid=0 pid=1 | " in reason, reason  # pid 1 of its own namespace, no parent in it
    sent = dict(t.split(":", 1) for t in reason.split("signals ", 1)[1].split())
    assert sent["-1"] == "ESRCH", reason  # nothing outside its own tree to signal
    assert sent["0"] == sent["1"] == "sent", reason  # its own group and itself (it ignores what it can)
    # its /proc is its own namespace's: no entry of the engine's or the starter's to signal through
    assert not [t for t in sent if t.startswith("proc")], reason
    assert result.returncode == 0 and not result.violations


def test_an_agent_that_leaves_a_grandchild_sleeping_forever_does_not_keep_the_replay_alive(tmp_path):
    """Attack: the agent forks a grandchild that holds its stderr and sleeps forever, then exits. The agent was its
    PID namespace's first process, so the kernel ends the namespace with it: the stderr pipe closes, the engine sees
    the agent's exit at once and the replay ends well within its timeout (before, the grandchild held the pipe open
    until the engine gave up waiting, and the launcher's timeout left no run)."""
    script = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n"
        "    while True:\n"
        "        time.sleep(3600)\n"
        "print('left a grandchild behind', file=sys.stderr, flush=True)\n"
        "sys.exit(5)\n"
    )
    folder = agent_folder(tmp_path, extra={"forker.py": script})
    agent = register(folder, ("python", "forker.py"), name="forker")
    pkg = agent_package(agent, "run-001-recorded", with_model("email-delivery", []))
    result = run_agent_replay(pkg, agent, timeout_s=60, allow_test_entries=True)
    assert result.returncode == 0 and not result.timed_out and result.output, (result.returncode, result.stderr)
    state = final(list(iter_output_events(ReplayOutput.from_wire(result.output))))
    assert (
        state["state"] == "failed" and "agent forker exited with status 5: left a grandchild behind" in state["reason"]
    )


def test_an_agent_that_forks_until_the_kernel_refuses_still_leaves_a_run_and_its_processes_end_with_it(tmp_path):
    """Attack: a fork bomb. RLIMIT_NPROC counts the uid's processes and threads, the engine's included, so an agent
    that took them all would leave the engine unable to start the threads that end its run. The agent's limit is the
    engine's less a reserve (`agent_starter.ENGINE_PROCESS_RESERVE`): the agent's forks stop there, its children stay
    asleep holding their slots, and the engine still ends the run with the agent's exit and words; the children end
    with the agent's namespace. (Not red before the reserve: the engine's threads all start with the agent, before its
    first fork can run, and none was found that it makes later; the reserve keeps that true of any it will.)"""
    script = (
        "import os, sys, time\n"
        "forked = 0\n"
        "while True:\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError as exc:\n"
        "        refused = type(exc).__name__\n"
        "        break\n"
        "    if pid == 0:\n"
        "        while True:\n"
        "            time.sleep(3600)\n"
        "    forked += 1\n"
        "print(f'forked {forked} then {refused}', file=sys.stderr, flush=True)\n"
        "sys.exit(6)\n"
    )
    folder = agent_folder(tmp_path, extra={"bomb.py": script})
    agent = register(folder, ("python", "bomb.py"), name="bomb")
    pkg = agent_package(agent, "run-001-recorded", with_model("email-delivery", []))
    result = run_agent_replay(pkg, agent, timeout_s=120, allow_test_entries=True)
    assert result.returncode == 0 and not result.timed_out and result.output, (result.returncode, result.stderr)
    state = final(list(iter_output_events(ReplayOutput.from_wire(result.output))))
    assert state["state"] == "failed" and "agent bomb exited with status 6: forked " in state["reason"], state
    assert "then BlockingIOError" in state["reason"] or "then PermissionError" in state["reason"], state


def _probes(reason: str, label: str) -> dict[str, dict[str, str]]:
    """`label: <pid>:probe=result,...` from the ptrace agent's stderr line in the run's reason, by pid."""
    line = reason.split(f"{label}: ", 1)[1].split(" | ", 1)[0]
    out = {}
    for group in line.split():
        pid, _, probes = group.partition(":")
        if pid.isdigit():
            out[pid] = dict(p.split("=", 1) for p in probes.split(","))
    return out


def test_an_agent_cannot_ptrace_the_engine_or_read_its_memory_environment_descriptors_or_maps(tmp_path):
    """Attack: the agent, the engine's uid, tries PTRACE_ATTACH and PTRACE_SEIZE on every pid it can name that is not
    its own (its parent, pid 1) and opens /proc/<pid>/mem, environ, fd/ and maps of every /proc entry outside its own
    tree (and signals 0 through it). There is none: it is pid 1 of its own PID namespace, with no parent there, and
    its /proc is that namespace's (the engine and the starter, non-dumpable besides, are in neither). The positive
    control: the same probes against the agent's own child all succeed. The run records the agent's exit and words."""
    folder = agent_folder(tmp_path, "ptrace_agent.py")
    agent = register(folder, ("python", "ptrace_agent.py"), name="tracer")
    _out, log, result = replay_with(agent, "run-001-recorded", with_model("email-delivery", []))
    state = final(log)
    assert state["state"] == "failed" and "agent tracer exited with status 4" in state["reason"], state
    reason = state["reason"]
    own = dict(p.split("=", 1) for p in reason.split("own child: ", 1)[1].split(" | ", 1)[0].split(","))
    assert own == dict.fromkeys(("attach", "seize", "mem", "environ", "fd", "maps", "signal"), "ok"), reason
    assert "ppid=0" in reason and _probes(reason, "by pid") == {}, reason  # no pid outside its tree to name
    assert _probes(reason, "by proc") == {}, reason  # and no /proc entry outside it
    assert result.returncode == 0 and not result.violations


def test_an_agent_that_sleeps_past_the_timeout_still_leaves_a_stopped_run_naming_it(tmp_path):
    """An agent that says one line and then sleeps forever, under a short timeout. The engine's own deadline comes a
    margin before the launcher's (`deadline_margin`): it stops the agent (killed at once, no grace period) and ends
    the run `stopped`, naming the timeout and the agent's last stderr line; the launcher never has to kill the engine
    (before, the launcher's SIGKILL at the timeout left no run at all)."""
    script = (
        "import sys, time\n"
        "print('thinking very hard', file=sys.stderr, flush=True)\n"
        "while True:\n"
        "    time.sleep(3600)\n"
    )
    folder = agent_folder(tmp_path, extra={"sleeper.py": script})
    agent = register(folder, ("python", "sleeper.py"), name="sleeper")
    pkg = agent_package(agent, "run-001-recorded", with_model("email-delivery", []))
    result = run_agent_replay(pkg, agent, timeout_s=20, allow_test_entries=True)
    assert result.returncode == 0 and not result.timed_out and result.output, (result.returncode, result.stderr)
    state = final(list(iter_output_events(ReplayOutput.from_wire(result.output))))
    assert state["state"] == "stopped", state
    assert state["reason"].startswith("sandbox timeout: agent sleeper was still running"), state
    assert "the sandbox's 20 s timeout" in state["reason"] and "thinking very hard" in state["reason"], state


def test_an_isolated_engine_without_its_agent_starter_refuses_to_start_the_agent(monkeypatch, tmp_path):
    """Fail closed: inside the kernel boundary the agent is started only by the starter, in its own PID namespace. A
    sandbox made without one (`agent_starter=False`) does not fall back to starting the agent in the engine's
    namespace: the replay fails, saying so, and the agent never runs."""
    from n17q_engine.agent import entry

    def without_starter(*args: Any, **kw: Any) -> Any:
        return run_sandboxed(*args, **{**kw, "agent_starter": False})

    monkeypatch.setattr(entry, "run_sandboxed", without_starter)
    folder = agent_folder(tmp_path, "signal_agent.py")
    agent = register(folder, ("python", "signal_agent.py"), name="signaller")
    pkg = agent_package(agent, "run-001-recorded", with_model("email-delivery", []))
    result = run_agent_replay(pkg, agent, timeout_s=60, allow_test_entries=True)
    assert result.returncode != 0 and not result.output
    errors = [e for e in result.events if e.get("event") == "sandbox.error"]
    assert errors and "the sandbox made no agent starter" in errors[-1]["message"], result.events


# --- issue 36, point 4: a crash ends the replay at once, naming the agent's last stderr lines ------------------------


@pytest.mark.parametrize("mode", ["start", "after-call"])
def test_a_crashing_agent_ends_the_run_at_once_as_failed_with_its_exceptions_last_line(mode, tmp_path):
    """`start` raises before it speaks MCP; `after-call` raises inside its `ClientSession` after one tool call, where
    the `mcp` SDK's stdin thread would keep the process alive and silent (it used to end as "sent nothing for 120 s"
    with none of its stderr). The engine pings a quiet agent that spoke MCP: the crashed one unwinds and exits."""
    run = "run-001-recorded"
    call = {"tool": "email.draft_create", "arguments": _recorded_request(run, "e-001-call-draft-create")}
    folder = agent_folder(tmp_path, "crash_agent.py", extra={"call.json": json.dumps(call)})
    agent = register(folder, ("python", "crash_agent.py", mode), name="crasher")
    _out, log, _result = replay_with(agent, run, with_model("email-delivery", []))
    state = final(log)
    assert state["state"] == "failed", state
    assert state["reason"].startswith("agent crasher exited with status 1: "), state["reason"]
    last = (
        "AgentCrashed: crash-agent refused to start: no task for me"
        if mode == "start"
        else "AgentCrashed: crash-agent gave up after calling email.draft_create"
    )
    assert state["reason"].endswith(last), state["reason"]
    assert "sent nothing" not in state["reason"] and "timeout" not in state["reason"]
    if mode == "after-call":  # its one call was served before it crashed
        assert [c["tool"] for c in kinds(log, "tool.call")] == ["email.draft_create"]


def test_a_stop_reason_keeps_the_newest_stderr_line_whole_within_its_bound():
    from types import SimpleNamespace

    session = AgentSession(SimpleNamespace(name="t"), SimpleNamespace(workspaces=[], contracts=[]))  # type: ignore[arg-type]
    session.stderr_tail = ["x" * 500, "  | +---------------- 1 ----", "  | ValueError: the last line"]
    tail = session.tail(120)
    assert tail.endswith("xxx | ValueError: the last line") and len(tail) <= 120 and tail.startswith("\u2026")
    session.stderr_tail = []
    assert session.tail(100) == "(nothing on its stderr)"


# --- issue 36, point 5: an environment reached through symlinks runs inside as outside ------------------------------


def test_an_agent_whose_environment_is_a_symlink_to_a_venv_runs(tmp_path):
    """The worker's venv reached through a link (`/srv/app/.venv -> /data/venvs/app`): the sandbox binds only real
    paths, so the agent's interpreter is named by its real path (every agent replay failed before)."""
    folder = agent_folder(tmp_path, "mcp_openai_agent.py")
    linked = tmp_path / "venv-link"
    linked.symlink_to(os.path.realpath(sys.prefix))
    agent = AgentSpec("linked", str(folder), ("python", "mcp_openai_agent.py"), folder_digest(folder), str(linked))
    _out, log, result = replay_with(agent, "run-001-recorded", with_model("email-delivery", []))
    (asked,) = [c for c in kinds(log, "tool.call") if c["tool"] == MODEL_TOOL]  # it ran, with mcp and openai
    assert asked["request"]["model"] == "n17q-test-model"
    assert final(log)["state"] == "incomplete_test_world" and result.isolation == "netns"


def test_an_agent_whose_venv_python_is_a_symlink_chain_through_linked_folders_runs(tmp_path):
    """A venv (itself reached through a link) whose `bin/python` goes through a linked folder and a link outside
    every bound folder to the base interpreter: each link on the way is made inside the sandbox."""
    real = tmp_path / "store" / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(real)], check=True, timeout=120)
    links = tmp_path / "linkstore"
    links.mkdir()
    (links / "py").symlink_to(os.path.realpath(sys.executable))
    (tmp_path / "links").symlink_to("linkstore")
    (real / "bin" / "python").unlink()
    (real / "bin" / "python").symlink_to("../../../links/py")
    env = tmp_path / "env-link"
    env.symlink_to(real)
    script = "import sys, json; print('prefix=' + sys.prefix, file=sys.stderr); sys.exit(3)\n"
    folder = agent_folder(tmp_path, extra={"where.py": script})
    for path in [tmp_path / "store", *(p for p in tmp_path.rglob("*") if not p.is_symlink())]:
        path.chmod(0o755)
    agent = AgentSpec("chained", str(folder), ("python", "where.py"), folder_digest(folder), str(env))
    _out, log, _result = replay_with(agent, "run-001-recorded", with_model("email-delivery", []))
    state = final(log)
    assert state["state"] == "failed", state
    assert state["reason"] == f"agent chained exited with status 3: prefix={real}", state["reason"]


# --- issue 36, points 1 and 3: what the agent receives; tools by their OpenAI function names -----------------------


def _received(log: list[dict]) -> dict:
    first = next(c for c in kinds(log, "tool.call") if c["tool"] == MODEL_TOOL)["request"]
    return json.loads(first["messages"][0]["content"])


def test_the_agent_reads_its_task_as_a_resource_a_prompt_variables_and_a_file_and_calls_tools_by_openai_names(
    tmp_path,
):
    from n17q_engine.agent.names import OPENAI_NAME

    folder = agent_folder(tmp_path, "context_agent.py")
    agent = register(folder, ("python", "context_agent.py"), name="reader")
    run = "run-001-recorded"
    script = [
        (None, "email--draft_create", _recorded_request(run, "e-001-call-draft-create")),
        ("Drafted.", None, None),
    ]
    fixtures, log = author(agent, run, "email-delivery", script)
    assert len(fixtures) == 2
    received = _received(log)
    assert received["resources"] == ["n17q://task"] and received["prompts"] == ["n17q-task"]
    task = json.loads(received["resource"])
    assert received["file"] == received["resource"]  # the same document both ways
    assert task["format"] == "n17q.agent-task/1"
    assert task["task"] == {
        "id": "task-maintenance-notice",
        "revision": "r1",
        "title": BUNDLES[run].manifest["run"]["title"],
        "instructions": "task: announce the billing API maintenance window",
    }
    assert task["branch"] == {"from": "start", "history_events": 0} and task["before_the_branch"] == []
    assert task["scenario"] == {"name": "email-delivery"}  # not its version: a minted answer must still match
    env = received["env"]
    assert env["N17Q_TASK_ID"] == "task-maintenance-notice" and env["N17Q_TASK_URI"] == "n17q://task"
    assert env["N17Q_TASK_TITLE"] == task["task"]["title"] and env["N17Q_TASK_FILE"].endswith("/n17q-task.json")
    assert received["prompt"].startswith("Task task-maintenance-notice (revision r1): Maintenance notice")
    assert "task: announce the billing API maintenance window" in received["prompt"]
    # the tools were offered to the model under OpenAI-valid names, and the call by that name reached the contract
    first = next(c for c in kinds(log, "tool.call") if c["tool"] == MODEL_TOOL)["request"]
    offered = [t["function"]["name"] for t in first["tools"]]
    assert "email--draft_create" in offered and all(OPENAI_NAME.match(n) for n in offered)
    assert {t["openai_name"] for t in task["tools"]} == set(offered)
    assert [c["tool"] for c in kinds(log, "tool.call") if c["tool"] != MODEL_TOOL] == ["email.draft_create"]
    assert final(log)["state"] == "stopped"  # it stopped before the recording's next step, as told
    # deterministic: the same package twice gives the same bytes (the task file's path and contents included)
    scenario = with_model("email-delivery", fixtures)
    assert replay_with(agent, run, scenario)[0].to_wire() == replay_with(agent, run, scenario)[0].to_wire()


@pytest.mark.seed("003", "The fix worked without a better model")
def test_from_a_checkpoint_the_agent_is_told_the_branch_point_and_what_the_run_did_before_it(tmp_path):
    """Also (seed 003): where it stands, and what it was told is on the record as an `agent.context` (the task
    document's digest and a blob holding it with the prompt's words), read by a reviewer as the agent read it."""
    from n17q_engine.canonical import digest_json

    folder = agent_folder(tmp_path, "context_agent.py")
    agent = register(folder, ("python", "context_agent.py"), name="reader")
    run, checkpoint = "run-003-review-request", "e-003-a1-checkpoint"
    out, log, _result = replay_with(agent, run, with_model("coding-review-request", []), checkpoint)
    task = json.loads(_received(log)["resource"])
    assert task["branch"]["from"] == checkpoint
    assert task["workspaces"] == {"offered": ["ws-1", "ws-2"], "created_before_the_branch": ["ws-1"]}
    steps = task["before_the_branch"]
    calls = [s["tool"] for s in steps if s["step"] == "tool_call"]
    assert calls == ["repo.read_file", "repo.read_file", "repo.apply_patch", "shell.run"]
    (command,) = [s for s in steps if s["step"] == "command_result"]
    assert command["command"] == "pytest -q tests/test_adapter.py" and command["workspace"] == "ws-1"
    assert steps[-1] == {"step": "checkpoint", "id": checkpoint}
    # nothing after the branch point is told: the broad suite's run is the agent's to decide
    assert "pytest -q tests" not in [s.get("command") for s in steps]
    assert f"from its checkpoint {checkpoint}" in _received(log)["prompt"]
    received = _received(log)
    (told,) = kinds(log, "agent.context")
    assert told["format"] == "n17q.agent-task/1" and told["context_digest"] == digest_json(task)
    recorded = json.loads(out.blobs[told["blob"]])
    assert recorded == {"format": "n17q.agent-task/1", "context": task, "prompt": received["prompt"]}
    assert task["evidence"]["workspace_to_work_in"] == "ws-1"
    assert [r["suites"] for r in task["evidence"]["receipts"]] == [["adapter"]]
    assert "Where you stand, from the record:" in received["prompt"]
    assert told["seq"] < next(c for c in kinds(log, "tool.call") if c["tool"] == MODEL_TOOL)["seq"]
