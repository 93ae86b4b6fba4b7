"""Launch an agent replay: the launcher (`run_agent_replay`, outside) and the sandbox entry (`sandbox_main`, inside).

The payload is one JSON header line ({"agent": spec, "engine_site": folder}) followed by the replay package in
wire form. Inside, the engine adds the read-only `engine_site` (where the `mcp` SDK lives) to its path, registers
the agent's decider under `agent:<name>` and runs the replay; the package must name that decider
(`vary.decider` of a counterfactual). An agent replay refuses degraded isolation: the agent is not bound by the
audit hook, so without the kernel boundary nothing would hold it.
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig

from ..deciders import DECIDERS
from ..package import REPLAY_FORMAT, Package, load_replay
from ..replay import ISOLATION_ENV, ReplayError, run_replay
from ..sandbox import Limits, SandboxResult, run_sandboxed
from .spec import AgentError, AgentSpec

ENTRY = "n17q_engine.agent.entry:sandbox_main"


def run_agent_replay(
    package: Package,
    agent: AgentSpec,
    *,
    limits: Limits | None = None,
    timeout_s: float = 120,
    allow_test_entries: bool = False,
) -> SandboxResult:
    """Run `package` (a replay whose decider is `agent.decider_name`) with the agent inside the sandbox.

    Raises AgentError when the agent's folder no longer has its registered digest, and IsolationUnavailable
    when no namespace can be made (never degraded: see the module docstring)."""
    agent.check()
    engine_site = sysconfig.get_paths()["purelib"]
    header = json.dumps({"agent": agent.to_dict(), "engine_site": engine_site}, sort_keys=True).encode()
    return run_sandboxed(
        ENTRY,
        header + b"\n" + package.to_wire(),
        allow_degraded=False,
        limits=limits or Limits(cpu_s=120, memory_bytes=4 << 30, open_files=256, processes=256),
        timeout_s=timeout_s,
        allow_test_entries=allow_test_entries,
        extra_read_only=(agent.folder, agent.environment, engine_site),
        loopback=True,
    )


def sandbox_main(payload: bytes) -> bytes:
    """The sandbox entry: header line + replay package in, a replay output (wire form) out."""
    if os.environ.get(ISOLATION_ENV) != "netns":
        raise ReplayError("an agent replay runs only inside the kernel boundary (netns), never degraded")
    head, _, wire = payload.partition(b"\n")
    try:
        header = json.loads(head)
        agent = AgentSpec.from_dict(header["agent"])
        engine_site = str(header["engine_site"])
    except (ValueError, KeyError, TypeError, AgentError) as exc:
        raise ReplayError(f"agent replay header: {exc}") from None
    if engine_site not in sys.path:
        sys.path.append(engine_site)
    from .decider import agent_decider

    package = load_replay(Package.from_wire(wire, REPLAY_FORMAT))
    if package.scenario is None:
        raise ReplayError("an agent replay needs a scenario (its tools and model fixtures)")
    decider = agent_decider(agent, package.scenario)
    DECIDERS[decider.name] = decider
    return run_replay(package, isolation="netns").to_wire()
