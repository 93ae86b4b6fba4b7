"""Budgets (DESIGN §9): sandbox start median under 150 ms from spawn to the first engine instruction;
10,000 tool calls replayed in under 2 s inside the sandbox, and the same package twice gives byte-identical logs.

- Sandbox start: `run_sandboxed` on the trivial engine entry `n17q_engine.sandbox_child:echo`: the launcher
  measures spawn -> the
  child's first statement (the `sandbox.started` marker, CLOCK_MONOTONIC on both sides), 20 spawns, median.
- Replay: a scenario of 10,000 docs.search fixtures and a recorded run of 10,000 calls to them (a proposal,
  a call and a result each, 30,002 events), packaged as a worker would (`build_replay`, wire form), replayed
  with the `recorded` decider by `run_sandboxed("n17q_engine.replay:sandbox_main", ...)` in its own network
  namespace. Timed: spawn to exit, i.e. package verification, contract normalization and digest of every
  request, every lookup, every event and blob written, the output serialized. Median of the repeats; the
  two logs of the first repeats are compared byte for byte.
"""

from __future__ import annotations

import time
from typing import Any

from n17q_engine.package import build_replay
from n17q_engine.replay import ReplayOutput
from n17q_engine.sandbox import Limits, run_sandboxed

from .common import Config, median, row

CALLS = 10_000
REPLAY_BUDGET_S = 2.0
START_BUDGET_S = 0.150
STARTS = 20


def _package(calls: int) -> Any:
    from tests.engine import replaylib as rl

    fixtures = [rl.fixture(f"f{i}", rl.search_request(f"query {i}"), {"hits": [f"doc {i}"]}) for i in range(calls)]
    scenario = rl.scenario(fixtures=fixtures)
    manifest, events = rl.source_run([("docs.search", 1, {"query": f"query {i}"}) for i in range(calls)])
    return build_replay(
        replay_id="bench",
        run_id="run-bench~rerun",
        mode="rerun",
        vary={},
        decider="recorded",
        launched_at="2026-12-02T12:00:00Z",
        scenario=scenario,
        source_manifest=manifest,
        source_events=events,
        source_blobs={},
    )


def run(config: Config) -> dict[str, Any]:
    repeat = config.repeat or 5
    starts = []
    for _ in range(STARTS):
        result = run_sandboxed(
            "n17q_engine.sandbox_child:echo", b"ping", allow_degraded=False, limits=Limits(), timeout_s=30
        )
        if result.start_s is not None:
            starts.append(result.start_s)
    t0 = time.perf_counter()
    package = _package(CALLS)
    wire = package.to_wire()
    build_s = time.perf_counter() - t0
    walls: list[float] = []
    logs: list[Any] = []
    isolation = None
    for _ in range(repeat):
        result = run_sandboxed(
            "n17q_engine.replay:sandbox_main", wire, allow_degraded=False, limits=Limits(), timeout_s=120
        )
        if not result.ok:
            raise RuntimeError(f"replay failed in the sandbox: {result.returncode} {result.stderr[-500:]}")
        walls.append(result.wall_s)
        isolation = result.isolation
        if len(logs) < 2:
            logs.append(ReplayOutput.from_wire(result.output).events)
    identical = len(logs) == 2 and logs[0] == logs[1]
    events = logs[0].count(b"\n")
    replay_s = median(walls)
    start_s = median(starts)
    rows = [
        row(
            "sandbox start (spawn -> first engine instruction)",
            f"median < {START_BUDGET_S * 1e3:g} ms",
            f"{start_s * 1e3:.1f} ms median of {len(starts)} spawns (range {min(starts) * 1e3:.1f}-"
            f"{max(starts) * 1e3:.1f} ms), isolation {isolation}",
            start_s < START_BUDGET_S,
            config,
        ),
        row(
            f"replay of {CALLS:,} tool calls in the sandbox",
            f"< {REPLAY_BUDGET_S:g} s",
            f"{replay_s:.2f} s median of {repeat} (range {min(walls):.2f}-{max(walls):.2f} s; {events:,} events "
            f"written; package {len(wire) / 1e6:.1f} MB)",
            replay_s < REPLAY_BUDGET_S,
            config,
        ),
        row(
            "same package twice: byte-identical logs",
            "identical",
            "identical" if identical else "DIFFERENT",
            identical,
            config,
        ),
    ]
    return {
        "rows": rows,
        "details": {
            "starts_s": starts,
            "replay_walls_s": walls,
            "events": events,
            "package_bytes": len(wire),
            "package_build_s": build_s,
            "isolation": isolation,
        },
        "notes": [f"package built in {build_s:.2f} s outside the sandbox (the worker's cost, not the budget's)"],
    }
