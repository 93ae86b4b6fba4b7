"""The `agent:<name>` decider: a registered agent program decides the model's steps; the recording is the harness.

How a replay asks the agent (docs/agents.md has the long form):

- The recording's orchestration steps (attempts, workspaces, artifacts, evidence, human inputs, approvals, policy
  decisions, checkpoints, budget, claims, calls the harness made without a proposal) are replayed as `recorded`
  replays them: they are the world around the agent, not its decisions.
- At each recorded model decision (an accepted `model.proposal` of a tool call) the agent is asked instead: its
  model calls are served (`model.chat` fixtures through the engine: a miss stops the run) until it calls a tool.
  - The same tool as the recording's proposal: the agent's call replaces the recorded proposal and its call (the
    events keep the recorded ids' mapping, so later harness steps refer to the agent's result). For an effect
    proposal the agent's arguments go into the recorded intent and execution; the agent's tool call is answered
    with the execution's outcome (or, when the policy denies it, an MCP error with the bounded reason).
  - Another tool: the agent's own step (a proposal and a call of its own); it is asked again.
  - The agent exits: the run stops there (`stopped`, its last words), unless the recording was done anyway.
- After the recording's last step the agent goes on alone until it exits (its own proposals and calls).
- An attempt to reach out stops the run: one the kernel route shows (`netwatch`: a TCP SYN, UDP datagram or DNS
  query arriving at the namespace's TUN, whether or not the agent says so or exits 0), or one the agent reports
  (`n17q.sandbox.attempt {json}` on its stderr); a non-zero exit stops it too. Each attempt is a `sandbox.violation`
  in the run's log (those of the vocabulary's targets) and on the sandbox's event channel. The watch is read before
  every request of the agent is served, so an attempt made before a tool or model call stops the run before it.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import select
import signal
import subprocess
import threading
import time
from collections.abc import Generator
from dataclasses import dataclass, replace
from typing import Any

from .. import canonical, sandbox_child
from ..agent_starter import STARTER_ENV, StartedAgent, start_agent, starter_from_env
from ..contracts import ContractError
from ..deciders import (
    REASON_CHARS,
    Action,
    Activate,
    CallTool,
    Decider,
    Execute,
    Propose,
    SourceRun,
    Stop,
    View,
    recorded,
)
from ..package import ScenarioPackage, refused_by
from ..replay import ISOLATION_ENV
from ..vocabulary import VIOLATION_TARGETS
from .bridge import Bridge, Refused, Request, tool_catalogue
from .model import MODEL_CONTRACT, MODEL_TOOL, LiveModel
from .netwatch import NetWatch
from .spec import AgentSpec
from .task import TASK_FILE_NAME, TASK_FORMAT, TASK_URI, task_context, task_prompt

REPORT_PREFIX = "n17q.sandbox.attempt "
IDLE_S = 120.0  # an agent that sends nothing for this long is stopped
WAKE_S = 1.0  # a quiet agent that spoke MCP is pinged this often (a crashed one then exits: `Bridge.wake`)
STDERR_SETTLE_S = 2.0  # after the agent's exit, how long its last stderr lines may take to arrive
TAIL_LINES = 3  # the agent's last stderr lines a stop reason quotes
# Once the run has stopped, the agent is given this long to end by itself (it was refused what it waited for), so
# what it does meanwhile is still recorded on the sandbox's channel; then it is killed.
GRACE_S = 10.0
DUMMY_KEY = "n17q-sandbox-no-credential"


def _bounded(text: str) -> str:
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1].rstrip() + "\u2026"


class AgentSession:
    """The agent process and its two endpoints, for one replay."""

    def __init__(
        self,
        spec: AgentSpec,
        sc: ScenarioPackage,
        watch: NetWatch | None = None,
        deadline: Deadline | None = None,
        source: SourceRun | None = None,
    ) -> None:
        self.spec, self.sc, self.watch, self.deadline = spec, sc, watch, deadline
        self.out_of_time = False  # the deadline came: the agent is killed at close, without the grace period
        self.watch_lock = threading.Lock()
        self.observed: list[dict[str, str]] = []  # attempts the watch saw that no stop has reported yet
        self.held: list[Request] = []  # requests set aside because an attempt came first (refused at close)
        workspaces = list(sc.workspaces)
        tools = tool_catalogue(sc.contracts, workspaces, MODEL_TOOL)
        # The task and the recorded run's context (issue 36): from the package only, so every replay of a branch
        # tells the agent the same bytes; a resource and a prompt of the MCP server, and a file and variables.
        self.context = task_context(source, sc, [t["name"] for t in tools]) if source is not None else None
        self.bridge = Bridge(tools, self.context, task_prompt(self.context) if self.context else "")
        self.proc: subprocess.Popen[bytes] | StartedAgent | None = None
        self.stderr_thread: threading.Thread | None = None
        self.stderr_tail: list[str] = []
        self.stderr_done = threading.Event()
        self.current: Request | None = None
        self.last_words: str | None = None

    def start(self) -> None:
        executable = self.spec.executable()
        _unsignallable_by_the_agent()
        sandbox_child.grant_agent(executable)  # one launch of exactly this program, one listener on its address
        port = self.bridge.start_model_endpoint(sandbox_child.NAMESPACE_HOST)
        home = os.path.join(os.getcwd(), "agent-home")
        os.makedirs(home, mode=0o700, exist_ok=True)
        env = {
            "PATH": "/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "HOME": home,
            "TMPDIR": home,
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            "OPENAI_BASE_URL": f"http://{sandbox_child.NAMESPACE_HOST}:{port}/v1",
            "OPENAI_API_KEY": DUMMY_KEY,
            "N17Q_AGENT_FOLDER": self.spec.folder,
            "N17Q_MCP": "stdio",
        }
        if self.context is not None:
            env.update(self._task_environment())
        argv = [executable, *self.spec.command[1:]]
        # its own files, read-only, are its working folder; HOME and TMPDIR are its writable one
        starter = starter_from_env(os.environ.get(STARTER_ENV))
        if starter is not None:  # the agent is pid 1 of a PID namespace of its own, below the engine's
            self.proc = start_agent(starter, argv, env, self.spec.folder)
        elif os.environ.get(ISOLATION_ENV) == "netns":
            raise RuntimeError("the sandbox made no agent starter: an agent never shares the engine's PID namespace")
        else:  # degraded isolation (no namespaces at all): there is no namespace to give it
            self.proc = subprocess.Popen(
                argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=self.spec.folder,
                env=env, close_fds=True,
            )  # fmt: skip
        assert self.proc.stdout is not None and self.proc.stdin is not None
        self.bridge.serve_tools(self.proc.stdout, self.proc.stdin)
        self.stderr_thread = threading.Thread(target=self._watch, name="n17q-agent-watch", daemon=True)
        self.stderr_thread.start()
        threading.Thread(target=self._wait_exit, name="n17q-agent-exit", daemon=True).start()
        if self.watch is not None:
            threading.Thread(target=self._watch_network, name="n17q-agent-netwatch", daemon=True).start()

    def _task_environment(self) -> dict[str, str]:
        """The task's variables and its file: the JSON of `n17q://task`, read-only, in the sandbox's working folder
        (nothing of the host's; the agent can read it, and changing its copy changes nothing the engine holds)."""
        assert self.context is not None
        folder = os.path.join(os.getcwd(), "agent-task")
        os.makedirs(folder, mode=0o755, exist_ok=True)
        path = os.path.join(folder, TASK_FILE_NAME)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(json.dumps(self.context, sort_keys=True, ensure_ascii=False, indent=1))
        os.chmod(path, 0o444)
        os.chmod(folder, 0o555)
        task = self.context["task"]
        return {
            "N17Q_TASK_ID": str(task.get("id") or ""),
            "N17Q_TASK_TITLE": str(task.get("title") or ""),
            "N17Q_TASK_FILE": path,
            "N17Q_TASK_URI": TASK_URI,
        }

    def _drain_network(self) -> bool:
        """Read what the watch holds now; True when attempts are waiting to be reported."""
        if self.watch is None:
            return False
        with self.watch_lock:
            self.observed.extend(self.watch.drain())
            return bool(self.observed)

    def _watch_network(self) -> None:
        """Wake the decider when a packet arrives while it waits for the agent (it drains the watch itself)."""
        assert self.watch is not None
        poller = select.poll()
        poller.register(self.watch.fd, select.POLLIN)
        while not self.bridge.closed:
            if poller.poll(200) and self._drain_network():
                self.bridge.requests.put(Request("watch", None))

    def _take_observed(self) -> list[dict[str, str]]:
        with self.watch_lock:
            taken, self.observed = self.observed, []
        return taken

    def _watch(self) -> None:
        """Read the agent's stderr to its end: reports of attempts, and the last lines (for a stop reason)."""
        proc = self.proc
        assert proc is not None and proc.stderr is not None
        try:
            for raw in proc.stderr:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                if line.startswith(REPORT_PREFIX):
                    with contextlib.suppress(ValueError):
                        report = json.loads(line[len(REPORT_PREFIX) :])
                        if isinstance(report, dict):
                            self.bridge.requests.put(Request("attempt", report))
                    continue
                self.stderr_tail = [*self.stderr_tail, line[:500]][-20:]
        except (OSError, ValueError):  # closed under us at the session's end
            pass
        finally:
            self.stderr_done.set()

    def _wait_exit(self) -> None:
        """Wait for the agent's exit itself (the starter's report, which its pidfd wakes; `wait` for a plain child),
        not for its stderr's end: a descendant holding stderr open does not keep the run waiting. Its last lines
        are given a moment to arrive first."""
        proc = self.proc
        assert proc is not None
        code = proc.wait()
        self.stderr_done.wait(timeout=STDERR_SETTLE_S)
        self.bridge.requests.put(Request("exit", {"returncode": code}))

    def next(self) -> Request:
        """The agent's next request; an attempt the watch saw first comes before it (the request is held, and refused
        when the session closes). While the agent is quiet it is pinged every WAKE_S (`Bridge.wake`): an agent that
        crashed inside its MCP session unwinds and exits, so its exit comes at once, not the idle timeout."""
        quiet_since = time.monotonic()
        while True:
            idle_left = IDLE_S - (time.monotonic() - quiet_since)
            wait = min(WAKE_S, max(0.0, idle_left))
            if self.deadline is not None:
                wait = min(wait, max(0.0, self.deadline.left()))
            try:
                request = self.bridge.requests.get(timeout=wait)
            except queue.Empty:
                if self.deadline is not None and self.deadline.left() <= 0:
                    request = Request("deadline", None)
                    self.out_of_time = True
                elif idle_left - wait <= 0:
                    request = Request("idle", None)
                else:
                    self.bridge.wake()
                    continue
            if self._drain_network():
                if request.kind not in ("watch", "idle", "deadline"):
                    self.held.append(request)
                request = Request("attempt", {"attempts": self._take_observed(), "kernel": True})
            elif request.kind == "watch":
                continue  # already reported
            self.current = request
            return request

    def tail(self, budget: int) -> str:
        """The agent's last stderr lines, newest kept whole first, within `budget` characters (the older ones are
        cut from their start): what a stop reason quotes."""
        kept: list[str] = []
        used = 0
        # an exception group's traceback frames its lines with `|` and `+---`: the words are what is quoted
        lines = [ln.strip().lstrip("| ").strip() for ln in self.stderr_tail]
        lines = [ln for ln in lines if ln and not ln.startswith("+-")]
        for line in reversed(lines[-TAIL_LINES:]):
            room = budget - used - (3 if kept else 0)
            if room <= 10:
                break
            piece = line if len(line) <= room else "\u2026" + line[-(room - 1) :]
            kept.insert(0, piece)
            used += len(piece) + (3 if len(kept) > 1 else 0)
        return " | ".join(kept) or "(nothing on its stderr)"

    def answer(self, value: Any) -> None:
        if self.current is not None and not self.current.reply.done():
            self.current.reply.set_result(value)
        self.current = None

    def refuse(self, message: str) -> None:
        if self.current is not None and not self.current.reply.done():
            self.current.reply.set_exception(Refused(message))
        self.current = None

    def close(self) -> None:
        self.refuse("the replay has stopped")
        for held in self.held:
            if not held.reply.done():
                held.reply.set_exception(Refused("the replay has stopped"))
        self.bridge.closed = True
        proc = self.proc
        if proc is not None and proc.poll() is None:
            # No tool is answered again: its input ends now. An MCP client reads its stdin until end of file (the
            # `mcp` SDK's stdio transport does, in a thread no cancellation reaches), so an agent whose model call
            # was just refused would otherwise sit out the whole grace period before it is killed.
            if proc.stdin is not None:
                with contextlib.suppress(OSError, ValueError):
                    proc.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                # the error it was just given may end it by itself (unless the replay is out of time)
                proc.wait(timeout=0 if self.out_of_time else GRACE_S)
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        # What the agent did after the run had stopped, until it was gone: recorded on the sandbox's channel (the
        # run's log is closed), so an attempt is never lost because an earlier one stopped the run: what the watch
        # saw, and what the agent reported on its stderr (read to its end).
        if self.stderr_thread is not None:
            self.stderr_thread.join(timeout=5)
        late: list[Request] = []
        while True:
            try:
                late.append(self.bridge.requests.get_nowait())
            except queue.Empty:
                break
        self.bridge.close()
        self._drain_network()
        for item in self._take_observed():
            sandbox_child.emit(_violation(item, self.spec.name, after_stop=True))
        for request in late:
            if request.kind == "attempt" and isinstance(request.body, dict):
                many = request.body.get("attempts")
                items = many if isinstance(many, list) else [request.body]
                for item in [i for i in items if isinstance(i, dict)][:32]:
                    sandbox_child.emit(_violation(item, self.spec.name, after_stop=True))
            elif not request.reply.done():
                request.reply.set_exception(Refused("the replay has stopped"))
        if self.watch is not None:
            self.watch.close()


def _exit_status(code: int | None) -> str:
    """How the agent ended, in words: its exit status, or the signal that killed it."""
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return f"was killed by {name}"
    return f"exited with status {code}"


def _unsignallable_by_the_agent() -> None:
    """Make sure nothing the agent sends can end the engine (issue 33), before the agent exists: the second line.

    The first is the agent's own PID namespace (`n17q_engine.agent_starter`): no pid it can name is the engine's. Were
    one named, what holds is the kernel's rule for a namespace's first process (the engine is pid 1 of its own): a
    signal sent from inside the namespace or below it is dropped unless the process has a handler installed for it,
    and SIGKILL and SIGSTOP are always dropped (only an ancestor namespace, the launcher outside, can force them; the
    kernel's own signals on the agent's behalf, such as SIGIO to the owner of its O_ASYNC descriptor, are dropped
    alike). The interpreter installs a handler for SIGINT (KeyboardInterrupt), so every handler goes back to the
    default here, after everything the engine imports. Refused (the run fails, the agent never starts) when the
    engine is not its namespace's first process or cannot reset them (off the main thread)."""
    if os.getpid() != 1:
        raise RuntimeError("an agent starts only from the first process of the sandbox's PID namespace")
    for number in signal.valid_signals():
        if callable(signal.getsignal(number)):
            signal.signal(number, signal.SIG_DFL)


def _violation(item: dict[str, Any], agent: str, *, after_stop: bool = False) -> dict[str, Any]:
    """The sandbox channel's `sandbox.violation` for one attempt (seen by the watch, or reported by the agent)."""
    attempted, target = str(item.get("attempted", "?"))[:100], str(item.get("target", "?"))[:300]
    if "observed" in item and "result" not in item:  # the network watch saw it
        observed = str(item["observed"])[:300] + ("; after the run had stopped" if after_stop else "")
        stopped = True
    else:
        result = str(item.get("result", "?"))[:200]
        observed, stopped = f"reported by agent {agent}: {result}", not result.startswith("reached")
        observed += "; after the run had stopped" if after_stop else ""
    return {
        "event": "sandbox.violation",
        "attempted": attempted,
        "target": target,
        "stopped": stopped,
        "by": "kernel boundary",
        "observed": observed,
    }


@dataclass(frozen=True)
class Deadline:
    """The replay's own deadline (issue 33): `at` on CLOCK_MONOTONIC (system-wide: the launcher set it), `margin_s`
    before the launcher's `timeout_s`, so a replay that runs out of time still ends with a run, not a killed
    engine."""

    at: float
    timeout_s: float
    margin_s: float

    def left(self) -> float:
        return self.at - time.monotonic()


def agent_decider(
    spec: AgentSpec,
    sc: ScenarioPackage,
    live: LiveModel | None = None,
    watch: NetWatch | None = None,
    deadline: Deadline | None = None,
) -> Decider:
    """The decider `agent:<name>`; with `live`, the agent's model calls are relayed live (a fresh comparison run,
    not a replay: its model is named `live:<connection>`), otherwise answered from model fixtures. `watch` is the
    sandbox's network watch (attempts to reach out, seen by the kernel route); at `deadline` the agent still waited
    for is stopped and killed, and the run ends `stopped` with the timeout and its last stderr lines."""
    fixtures = {f.id: f for f in sc.fixtures}

    def actions(source: SourceRun, view: View) -> Generator[Action, None, None]:
        session = AgentSession(spec, sc, watch, deadline, source)
        session.start()
        try:
            yield from _Drive(spec, sc, fixtures, source, view, session, live).run()
        finally:
            session.close()

    model = {"name": spec.name, "version": spec.digest}
    if live is not None:
        model["source"] = f"live:{live.connection}"
    return Decider(spec.decider_name, model, actions)


class _Drive:
    def __init__(
        self,
        spec: AgentSpec,
        sc: ScenarioPackage,
        fixtures: dict[str, Any],
        source: SourceRun,
        view: View,
        session: AgentSession,
        live: LiveModel | None = None,
    ) -> None:
        self.spec, self.sc, self.fixtures, self.source, self.view, self.s = spec, sc, fixtures, source, view, session
        self.live = live
        # A recorded proposal's calls, in order: one model answer may propose several (parallel tool calls), and
        # the agent's calls stand for them one by one (`_calls_left`).
        self.calls_of: dict[str, list[str]] = {}
        for e in source.events:
            if e["kind"] == "tool.call" and e.get("proposal_id"):
                self.calls_of.setdefault(e["proposal_id"], []).append(e["id"])
        self.decided: set[str] = set()  # recorded proposals the agent decided: their other calls are its to make
        self.intent_of = {p: i for i, p in source.effect_proposal.items()}
        self.replaced: set[str] = set()  # recorded call ids the agent's own calls stood in for
        self.waiting: dict[str, tuple[Request, dict[str, Any]]] = {}  # source intent -> (agent's call, its args)

    def run(self) -> Generator[Action, None, None]:
        view = self.view
        self._record_context()
        for action in recorded(self.source, view):
            if (
                isinstance(action, Propose)
                and action.ref is not None
                and action.accepted
                and action.proposal.get("type") == "tool_call"
            ):
                if not (yield from self._decide_at(action)):
                    return
                self.decided.add(action.ref)
                continue
            if isinstance(action, CallTool) and action.ref in self.replaced:
                continue
            if isinstance(action, CallTool) and action.proposal in self.decided and action.tool != MODEL_TOOL:
                # Another call of a proposal the agent decided (a model answer proposing several calls): the
                # agent's own next call of that tool stands for it, as its first call stood for the first.
                if not (yield from self._decide_at(action)):
                    return
                continue
            waiting = self.waiting.get(action.intent) if isinstance(action, Activate | Execute) else None
            if isinstance(action, Activate) and waiting is not None:
                action = replace(action, args=waiting[1])
            yield action
            if view.stopped:
                return
            if waiting is not None and isinstance(action, Activate) and view.denial(action.intent) is not None:
                denial = view.denial(action.intent) or {}
                self._reply(waiting[0], error=_bounded(str(denial.get("reason") or "the effect was denied")))
                del self.waiting[action.intent]
            elif waiting is not None and isinstance(action, Execute):
                done = view.executions(action.intent)
                last = done[-1] if done else {}
                outcome = "ok" if last.get("outcome") == "acknowledged" else str(last.get("outcome") or "not_executed")
                self._reply(
                    waiting[0],
                    value={
                        "outcome": outcome,
                        "execution": {k: last.get(k) for k in ("id", "outcome", "stage", "idempotency_key")},
                    },
                )
                del self.waiting[action.intent]
        for request, _args in self.waiting.values():
            self._reply(request, error="the recording never carried this effect out; it was not executed")
        self.waiting.clear()
        # The recording is done: the agent goes on alone until it exits.
        while True:
            request = self.s.next()
            step = yield from self._serve(request, None)
            if step is not None:
                return

    def _reply(self, request: Request, *, value: Any = None, error: str | None = None) -> None:
        if request.reply.done():
            return
        if error is not None:
            request.reply.set_exception(Refused(error))
        else:
            request.reply.set_result(value)

    def _decide_at(self, recorded_step: Propose | CallTool) -> Generator[Action, None, bool]:
        """Serve the agent until it calls a tool that stands for `recorded_step` (a recorded proposal, or another call
        of a proposal it decided), or ends. True: go on."""
        want = recorded_step.tool if isinstance(recorded_step, CallTool) else recorded_step.proposal.get("tool")
        while True:
            request = self.s.next()
            outcome = yield from self._serve(request, (recorded_step, want))
            if outcome == "matched":
                return True
            if outcome is not None:
                return False

    def _serve(
        self, request: Request, at: tuple[Propose | CallTool, Any] | None
    ) -> Generator[Action, None, str | None]:
        """One request of the agent. None: keep asking; "matched": it stood for the recorded step; else: ended."""
        view = self.view
        when = at[0].at if at else None
        if request.kind == "chat" and self.live is not None:
            return (yield from self._live_chat(request, when))
        if request.kind == "chat":
            yield CallTool(None, when, MODEL_TOOL, request.body, None, None)
            answer = self._result_of_last_call()
            if answer["outcome"] == "ok":
                self.s.answer(answer["body"])
            else:
                self.s.refuse("the model fixture did not answer with a completion")
            return None
        if request.kind == "attempt":
            # One report may carry several attempts ({"attempts": [...]}); each is a sandbox.violation, on the
            # sandbox's channel and (for the vocabulary's targets: socket, dns, subprocess, file) in the run's log.
            report = request.body
            items = report.get("attempts") if isinstance(report.get("attempts"), list) else [report]
            described = []
            log: Any = view  # the engine's own log (`emit`): a violation is derived, no recorded event stands for it
            for item in [i for i in items if isinstance(i, dict)][:32]:
                event = _violation(item, self.spec.name)
                sandbox_child.emit(event)
                if event["attempted"] in VIOLATION_TARGETS:
                    log.emit("sandbox.violation", attempted=event["attempted"], target=event["target"], stopped=True)
                how = "seen by the network watch" if report.get("kernel") else str(item.get("result", "?"))[:200]
                described.append(f"{event['attempted']} to {event['target']} ({how})")
            yield Stop(
                None,
                when,
                "stopped",
                _bounded(f"sandbox.violation: agent {self.spec.name} attempted " + "; ".join(described or ["?"])),
            )
            return "stopped"
        if request.kind == "deadline":
            deadline = self.s.deadline
            assert deadline is not None
            reason = (
                f"sandbox timeout: agent {self.spec.name} was still running at the replay's deadline, "
                f"{deadline.margin_s:g} s before the sandbox's {deadline.timeout_s:g} s timeout; it was stopped. "
                "Its last words on stderr: "
            )
            reason += self.s.tail(REASON_CHARS - len(reason))
            yield Stop(None, when, "stopped", _bounded(reason))
            return "stopped"
        if request.kind in ("exit", "idle"):
            code = (request.body or {}).get("returncode") if request.kind == "exit" else None
            if request.kind == "idle":
                reason = f"agent {self.spec.name} sent nothing for {IDLE_S:g} s; its last lines on stderr: "
                reason += self.s.tail(REASON_CHARS - len(reason))
                state = "stopped"
            elif code != 0:
                how = _exit_status(code)
                reason = f"agent {self.spec.name} {how}: "
                reason += self.s.tail(REASON_CHARS - len(reason))
                state = "failed"
            elif at is None:
                return "exited"  # the recording was done and so is the agent: the run completes
            else:
                words = _bounded(self.s.last_words or "(no final message)")[:200]
                reason = f"agent {self.spec.name} stopped before the recording's {at[1]} ({at[0].ref}): {words}"
                if not self.s.last_words:  # it said nothing to its model: what it said on stderr
                    reason += "; its last lines on stderr: " + self.s.tail(REASON_CHARS - len(reason) - 28)
                state = "stopped"
            yield Stop(None, when, state, _bounded(reason))
            return state
        # a tool call
        name = request.body.get("name")
        args = dict(request.body.get("arguments") or {})
        if name == MODEL_TOOL or name not in self.sc.contracts:
            if name != MODEL_TOOL and self._forbidden(str(name)):
                # A tool the scenario forbids (issue 19: a mode switch, an environment or configuration write, a
                # live retry): not refused here in silence but performed as a call, so the world refuses it on the
                # record and the scenario's invariant counts it; repeated attempts stop the run.
                yield Propose(None, when, {"type": "tool_call", "tool": name, **args})
                proposal = view.last("model.proposal")
                yield CallTool(None, when, str(name), args, None, proposal["id"] if proposal else None)
                self.s.answer(self._result_of_last_call())
                return None
            self.s.refuse(f"unknown tool {name!r}")
            return None
        workspace = args.pop("workspace", None)
        if workspace is not None and not isinstance(workspace, str):
            self.s.refuse("workspace: a workspace name")
            return None
        if at is not None and name == at[1] and isinstance(at[0], CallTool):
            # It stands for another recorded call of a proposal it decided: that call, with the agent's arguments.
            recorded = at[0]
            self.replaced.add(recorded.ref or "")
            yield CallTool(
                recorded.ref,
                recorded.at,
                name,
                args,
                workspace if workspace is not None else recorded.workspace,
                recorded.proposal,
            )
            self.s.answer(self._result_of_last_call())
            return "matched"
        if at is not None and name == at[1]:
            step = at[0]
            assert isinstance(step, Propose)
            intent = self.intent_of.get(step.ref or "")
            yield Propose(step.ref, step.at, {"type": "tool_call", "tool": name, **args})
            if view.stopped:
                return "stopped"
            if intent is not None:  # an effect: answered once the harness has carried it out (or refused it)
                assert self.s.current is not None
                self.waiting[intent] = (self.s.current, args)
                self.s.current = None
                return "matched"
            call_ref = self._call_standing_for(step.ref or "", str(name))
            recorded_call = self.source.by_id.get(call_ref or "") or {}
            if call_ref is not None:
                self.replaced.add(call_ref)
            yield CallTool(
                call_ref,
                step.at,
                name,
                args,
                workspace if workspace is not None else recorded_call.get("workspace_id"),
                step.ref,
            )
            self.s.answer(self._result_of_last_call())
            return "matched"
        yield Propose(None, when, {"type": "tool_call", "tool": name, **args})
        proposal = view.last("model.proposal")
        yield CallTool(None, when, name, args, workspace, proposal["id"] if proposal else None)
        self.s.answer(self._result_of_last_call())
        return None

    def _record_context(self) -> None:
        """What the agent is told, on the run's record (seed 003 "The fix worked without a better model"): an
        `agent.context` naming the task document's digest, and a blob holding the document and the prompt's text."""
        context = self.s.context
        if context is None:
            return
        log: Any = self.view  # the engine's own log (`emit`, `log.blob`): the context is the engine's, not recorded
        told = {"format": TASK_FORMAT, "context": context, "prompt": self.s.bridge.prompt}
        blob = log.log.blob(canonical.canonical_json(told), "application/json", "agent-context")
        log.emit("agent.context", format=TASK_FORMAT, context_digest=canonical.digest_json(context), blob=blob)

    def _call_standing_for(self, proposal: str, tool: str) -> str | None:
        """The recorded call the agent's call of `tool` stands for, at `proposal`: its first call of that tool not
        yet replaced, else its first call not yet replaced (a recorded proposal names one tool, its calls may
        differ), else None."""
        left = [c for c in self.calls_of.get(proposal, []) if c not in self.replaced]
        same = [c for c in left if (self.source.by_id.get(c) or {}).get("tool") == tool]
        return next(iter(same or left), None)

    def _forbidden(self, tool: str) -> bool:
        return any(inv["check"] == "refused_tools" and refused_by(inv, tool) for inv in self.sc.invariants)

    def _live_chat(self, request: Request, when: Any) -> Generator[Action, None, str | None]:
        """A chat request relayed live (the operator declared a model connection): recorded as a `model.chat`
        call whose result has origin `live`; the run is a fresh comparison run, not a replay. A relay failure
        stops the run."""
        assert self.live is not None
        view: Any = self.view  # the engine's own log (`emit`, `log.blob`): a live result has no fixture to look up
        body = request.body if isinstance(request.body, dict) else {}
        # Recorded as a fixture of the scenario's own model.chat contract would key it (its transport fields dropped,
        # its volatile parts marked), so the request can become one; a request that contract refuses is kept whole.
        recorded, revision, digest = body, MODEL_CONTRACT["revision"], canonical.digest_json(body)
        if MODEL_TOOL in self.sc.contracts:
            contract = self.sc.contracts.get(MODEL_TOOL)
            with contextlib.suppress(ContractError):
                (recorded, digest), revision = contract.digest(body), contract.revision
        call = view.emit(
            "tool.call",
            tool=MODEL_TOOL,
            contract_revision=revision,
            request=recorded,
            request_digest=digest,
            proposal_id=None,
            workspace_id=None,
        )
        answer = self.live.ask(body)
        completion = answer.get("body")
        ok = isinstance(completion, dict) and isinstance(completion.get("choices"), list)
        blob = view.log.blob(canonical.canonical_json(completion), "application/json", "tool-output") if ok else None
        view.emit(
            "tool.result",
            call_id=call,
            origin="live",
            outcome="ok" if ok else "error",
            blob=blob,
            absent={},
            connection=f"live:{self.live.connection}",
        )
        if ok:
            assert isinstance(completion, dict)
            self._note_words(completion)
            self.s.answer(completion)
            return None
        why = str(answer.get("error") or "the provider answered no chat completion")
        self.s.refuse(f"the live model relay failed: {why}")
        yield Stop(None, when, "stopped", _bounded(f"live model relay ({self.live.connection}) failed: {why}"))
        return "stopped"

    def _result_of_last_call(self) -> dict[str, Any]:
        """What the engine answered the last call: its outcome and the body of the fixture that answered (or the
        receipt), as the agent sees it."""
        view = self.view
        call = view.last("tool.call") or {}
        for kind in ("command.receipt", "tool.result"):
            result = view.last(kind)
            if result is not None and result.get("call_id") == call.get("id"):
                break
        else:
            return {"outcome": "error", "body": None}
        fixture = self.fixtures.get(result.get("fixture") or "")
        body = fixture.response.body if fixture is not None else None
        if kind == "command.receipt":
            fields = ("command", "completion", "exit_code", "results", "workspace_id")
            out = {k: result.get(k) for k in fields}
            out["output"] = body.get("output") if isinstance(body, dict) else None
            ok = result.get("completion") == "completed" and result.get("exit_code") == 0
            return {"outcome": "ok" if ok else "failed", "body": out}
        if call.get("tool") == MODEL_TOOL:
            if result.get("outcome") != "ok" or not isinstance(body, dict):
                return {"outcome": "error", "body": {"error": {"message": "the model fixture did not answer"}}}
            self._note_words(body)
            return {"outcome": "ok", "body": body}
        outcome = result.get("outcome")
        answer: dict[str, Any] = {
            "outcome": outcome,
            "body": body if outcome not in ("timeout", "unknown", "error") else None,
        }
        # Seed 000 "Unknown fixture data stayed unknown": "The agent received the same bounded absence." What the
        # answer does not hold, and why (absent, redacted, unavailable, not_applicable), and an exclusion's reason,
        # as the run's record has them; never a placeholder in their place. Only when there is something to say, so
        # an answer without absences reads as it always did (the model fixtures key on these bytes).
        absent = result.get("absent")
        if isinstance(absent, dict) and absent:
            answer["absent"] = dict(absent)
        excluded = result.get("excluded")
        if isinstance(excluded, dict):
            answer["excluded"] = {"tool": excluded.get("tool"), "reason": excluded.get("reason"), "evaluated": False}
        return answer

    def _note_words(self, completion: dict[str, Any]) -> None:
        with contextlib.suppress(KeyError, IndexError, TypeError):
            content = completion["choices"][0]["message"].get("content")
            if isinstance(content, str) and content.strip():
                self.s.last_words = content.strip()
