"""Seed story 000 (shared/seeds/000_…), the fixture that failed open, as two runs: `run-000-recorded`, a live
research run (docs found, request req-7781 not found), and `run-000-fail-open-replay`, the fixture replay that
failed open (the missing status fixture was fetched live).

The docs search's hits are the seed scenario package's too (`seed_scenarios`).
"""

from __future__ import annotations

from .bundle import StoryBundle
from .recorder import _Recorder, _run

STORY_000 = "000_fbd054b208c5f58c"


_DOCS_HITS = {
    "hits": [
        {"title": "Rotating signing keys", "url": "https://docs.acme.example/keys/rotate", "revision": "2026-06-28"}
    ]
}


def _research_run(*, fail_open: bool) -> StoryBundle:
    original_id = "run-000-recorded"
    run_id = "run-000-fail-open-replay" if fail_open else original_id
    policy = "research-policy@1"
    scenario = {"name": "docs-research", "version": 1}
    if fail_open:
        r = _Recorder(
            "000r",
            task="task-key-rotation",
            logical="2026-07-01T09:00:00Z",
            wall="2026-09-15T11:30:00Z",
            wall_ratio=0.01,
            wall_overhead=0.02,
        )
        r.replay_scope(
            "replay-scope",
            scenario=scenario,
            scope="scenario",
            recorded_between=["2026-07-01T09:00:00Z", "2026-07-01T09:00:09Z"],
            synthetic=[],
            uncovered=[],
            isolation="degraded",
        )
    else:
        r = _Recorder("000", task="task-key-rotation", logical="2026-07-01T09:00:00Z", wall="2026-07-01T09:00:00.300Z")

    r.attempt_started(
        "a1-start",
        "a1",
        number=1,
        reason="rerun of run-000-recorded with its recorded decisions"
        if fail_open
        else "task: how are signing keys rotated, and is request req-7781 open?",
    )
    p = r.proposal("propose-search", {"type": "tool_call", "tool": "docs.search"}, visible=[])
    c = r.tool_call(
        "call-search",
        "docs.search",
        1,
        {"query": "rotate signing keys", "corpus": "public-docs", "limit": 5},
        proposal=p,
    )
    search = r.tool_result(
        "res-search",
        c,
        origin="fixture" if fail_open else "historical",
        outcome="ok",
        blob=r.json_blob(_DOCS_HITS, role="tool-output"),
    )
    p = r.proposal(
        "propose-status", {"type": "tool_call", "tool": "status.lookup", "request_id": "req-7781"}, visible=[search]
    )
    c = r.tool_call("call-status", "status.lookup", 2, {"request_id": "req-7781"}, proposal=p)
    if fail_open:
        # No fixture held this request; the adapter delegated it to its live client and got today's answer.
        status = r.tool_result(
            "res-status",
            c,
            origin="live",
            outcome="ok",
            blob=r.json_blob(
                {"request_id": "req-7781", "status": "open", "owner": "team-keys", "opened_at": "2026-08-20T10:12:00Z"},
                role="tool-output",
            ),
        )
        text = "The docs describe key rotation; request req-7781 is open and owned by team-keys."
    else:
        status = r.tool_result(
            "res-status",
            c,
            origin="historical",
            outcome="not_found",
            blob=r.json_blob(
                {"request_id": "req-7781", "status": "not_found", "consistency_window_s": 30}, role="tool-output"
            ),
            absent={"$.owner": "not_applicable"},
        )
        text = "The docs describe key rotation; request req-7781 does not exist yet."
    r.claim("claim", text, kind="other", supports=[search, status])
    r.run_state("run-completed", "completed", reason="answered")
    r.attempt_ended("a1-end", outcome="completed")

    if fail_open:
        run = _run(
            run_id,
            task=("task-key-rotation", "r1"),
            environment="fixture",
            mode="rerun",
            scenario=scenario,
            policy_revision=policy,
            created_at="2026-09-15T11:30:00Z",
            parent_run=original_id,
            isolation="degraded",
        )
        return r.bundle(
            story=STORY_000,
            title="Fixture replay that failed open: the status lookup went live and found req-7781",
            run=run,
            # LIN014: a live observation inside a fixture rerun.
            expected={"LIN014"},
        )
    run = _run(
        run_id,
        task=("task-key-rotation", "r1"),
        environment="live",
        mode="recorded",
        scenario=scenario,
        policy_revision=policy,
        created_at="2026-07-01T09:00:00Z",
    )
    return r.bundle(
        story=STORY_000,
        title="Key-rotation research: docs found, request req-7781 not found",
        run=run,
        expected=set(),
    )
