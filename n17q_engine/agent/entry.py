"""Launch an agent replay: the launcher (`run_agent_replay`, outside) and the sandbox entry (`sandbox_main`, inside).

The payload is one JSON header line ({"agent": spec, "engine_site": folder}) followed by the replay package in
wire form. Inside, the engine adds the read-only `engine_site` (where the `mcp` SDK lives) to its path, registers
the agent's decider under `agent:<name>` and runs the replay; the package must name that decider
(`vary.decider` of a counterfactual). An agent replay refuses degraded isolation: the agent is not bound by the
audit hook, so without the kernel boundary nothing would hold it. Nor does it run without the sandbox's network
watch (`network_watch=True`, `n17q_engine.agent.netwatch`): the agent's attempts to reach out are seen by the kernel
route they must take, not by anything the agent could leave out.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import time
from collections.abc import Callable
from typing import Any

from ..deciders import DECIDERS
from ..package import REPLAY_FORMAT, Package, load_replay
from ..replay import ISOLATION_ENV, ReplayError, run_replay
from ..sandbox import RELAY_ENV, Limits, SandboxResult, run_sandboxed
from ..sandbox_child import NETWATCH_ENV
from .model import LiveModel
from .netwatch import NetWatch
from .spec import AgentError, AgentSpec

ENTRY = "n17q_engine.agent.entry:sandbox_main"


def run_agent_replay(
    package: Package,
    agent: AgentSpec,
    *,
    limits: Limits | None = None,
    timeout_s: float = 120,
    allow_test_entries: bool = False,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    relay: Callable[[bytes], bytes] | None = None,
    live_connection: str = "",
) -> SandboxResult:
    """Run `package` (a replay whose decider is `agent.decider_name`) with the agent inside the sandbox.

    Raises AgentError when the agent's folder no longer has its registered digest, and IsolationUnavailable
    when no namespace can be made (never degraded: see the module docstring)."""
    agent.check()
    # Inside the sandbox only real paths exist (issue 36): the folder, the environment and the engine's
    # site-packages are named by their real paths, and every symlink on the way to the agent's executable (a venv's
    # `bin/python -> python3 -> <base interpreter>`) is made inside as well; the base interpreter's prefix is bound.
    inside = agent.resolved()
    engine_site = os.path.realpath(sysconfig.get_paths()["purelib"])
    home = inside.interpreter_home()
    head: dict[str, Any] = {"agent": inside.to_dict(), "engine_site": engine_site}
    if relay is not None:
        # The live model relay: the agent's chat requests leave the sandbox only through the relay pipe pair, to
        # `relay` here (which alone holds the credential); the header names the connection, never the credential.
        head["live"] = {"connection": live_connection or "model-connection"}
    # The engine's own deadline, a margin before the launcher's timeout (which kills the engine and leaves no run):
    # the agent is stopped then and the run ends `stopped`, naming the timeout (CLOCK_MONOTONIC is system-wide).
    margin = deadline_margin(timeout_s)
    head["deadline"] = {"at": time.monotonic() + timeout_s - margin, "timeout_s": timeout_s, "margin_s": margin}
    header = json.dumps(head, sort_keys=True).encode()
    return run_sandboxed(
        ENTRY,
        header + b"\n" + package.to_wire(),
        allow_degraded=False,
        limits=limits or Limits(cpu_s=120, memory_bytes=4 << 30, open_files=256, processes=256),
        timeout_s=timeout_s,
        allow_test_entries=allow_test_entries,
        extra_read_only=(inside.folder, inside.environment, engine_site, *([home] if home else [])),
        extra_links=(inside.executable(),),
        loopback=True,
        network_watch=True,
        agent_starter=True,
        on_event=on_event,
        relay=relay,
    )


def deadline_margin(timeout_s: float) -> float:
    """How long before the launcher's timeout the engine stops the agent: room to kill it and write the run."""
    return min(15.0, max(3.0, timeout_s * 0.2))


def sandbox_main(payload: bytes) -> bytes:
    """The sandbox entry: header line + replay package in, a replay output (wire form) out."""
    if os.environ.get(ISOLATION_ENV) != "netns":
        raise ReplayError("an agent replay runs only inside the kernel boundary (netns), never degraded")
    watch = NetWatch.from_env(os.environ.get(NETWATCH_ENV))
    if watch is None:
        raise ReplayError("an agent replay runs only with the sandbox's network watch (its TUN was not handed over)")
    _not_dumpable()
    head, _, wire = payload.partition(b"\n")
    try:
        header = json.loads(head)
        agent = AgentSpec.from_dict(header["agent"])
        engine_site = str(header["engine_site"])
        limit = header.get("deadline")
        deadline = (
            (float(limit["at"]), float(limit["timeout_s"]), float(limit["margin_s"]))
            if isinstance(limit, dict)
            else None
        )
    except (ValueError, KeyError, TypeError, AgentError) as exc:
        raise ReplayError(f"agent replay header: {exc}") from None
    live = None
    if isinstance(header.get("live"), dict):
        fds = os.environ.get(RELAY_ENV, "")
        try:
            read_fd, write_fd = (int(fd) for fd in fds.split(","))
        except ValueError:
            raise ReplayError("a live model connection was declared, but the launcher opened no relay") from None
        live = LiveModel(read_fd, write_fd, str(header["live"].get("connection") or "model-connection"))
    if engine_site not in sys.path:
        sys.path.append(engine_site)
    from .decider import Deadline, agent_decider

    package = load_replay(Package.from_wire(wire, REPLAY_FORMAT))
    if package.scenario is None:
        raise ReplayError("an agent replay needs a scenario (its tools and model fixtures)")
    decider = agent_decider(agent, package.scenario, live, watch, Deadline(*deadline) if deadline else None)
    DECIDERS[decider.name] = decider
    return run_replay(package, isolation="netns").to_wire()


def _not_dumpable() -> None:
    """The engine and the agent run as the same uid: without this the agent could read the engine's descriptors
    through /proc or take the watch's TUN with pidfd_getfd(2) (both need the ptrace access a non-dumpable process
    refuses to a process without CAP_SYS_PTRACE, which the agent does not hold). Reset on exec, so the agent itself
    stays an ordinary process."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(4, 0, 0, 0, 0) != 0:  # PR_SET_DUMPABLE, 0
        raise ReplayError(f"the engine could not make itself non-dumpable (errno {ctypes.get_errno()})")
