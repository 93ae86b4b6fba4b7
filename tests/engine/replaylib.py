"""Small scenario packages and source runs for replay tests (and the replay benchmark)."""

from __future__ import annotations

from typing import Any

from n17q_engine.canonical import canonical_json, digest_json
from n17q_engine.package import Package, build_replay, build_scenario
from n17q_engine.world import SNAPSHOT_FORMAT

T0 = "2026-07-01T09:00:00Z"
SEARCH: dict[str, Any] = {
    "tool": "docs.search",
    "revision": 1,
    "effect_class": "read",
    "fields": {
        "query": {"type": "string", "canonical": ["strip"]},
        "corpus": {"type": "string", "default": "public-docs"},
        "limit": {"type": "integer", "default": 5},
    },
    "transport": ["attempt_id", "trace_id"],
    "fault_stages": ["before_send", "during_response"],
    "outcomes": ["ok", "empty", "error", "timeout", "not_found"],
}


def fixture(
    fid: str,
    request: dict,
    body: Any = None,
    *,
    tool: str = "docs.search",
    rev: int = 1,
    outcome: str = "ok",
    condition: Any = None,
) -> dict:
    out = {
        "id": fid,
        "tool": tool,
        "contract_revision": rev,
        "request": request,
        "response": {"outcome": outcome, "body": body if body is not None else {"hits": [fid]}},
        "provenance": {
            "recorded_at": T0,
            "source_revision": None,
            "connection": "docs-api",
            "synthetic": False,
            "fidelity_note": None,
        },
    }
    if condition is not None:
        out["condition"] = condition
    return out


def search_request(query: str, limit: int = 5) -> dict:
    return {"query": query, "corpus": "public-docs", "limit": limit}


def scenario(
    *,
    contracts: list[dict] | None = None,
    fixtures: list[dict],
    resources: dict | None = None,
    name: str = "test-scenario",
    version: int = 1,
    bodies: dict[str, bytes] | None = None,
    expired_bodies: dict[str, dict[str, Any]] | None = None,
    **meta: Any,
) -> Package:
    world: dict[str, Any] = {
        "format": SNAPSHOT_FORMAT,
        "name": f"{name}-w{version}",
        "parent": None,
        "revision": 0,
        "resources": {r: {"revision": rev, "state": st} for r, (rev, st) in (resources or {}).items()},
        "deleted": {},
        "pending": [],
    }
    return build_scenario(
        {
            "scenario.json": {
                "name": name,
                "version": version,
                "seed": f"{name}/{version}",
                "clock_start": T0,
                "scope": "scenario",
                "source_runs": [],
                "recorded_between": [T0, T0],
                **meta,
            },
            "contracts.json": contracts if contracts is not None else [SEARCH],
            "fixtures.json": fixtures,
            "world.json": world,
            "workspaces.json": {},
            "policy.json": {
                "current": "p@1",
                "revisions": {"p@1": {"rules": [], "require_all": True, "lineage_gate": True}},
            },
        },
        bodies=bodies,
        expired_bodies=expired_bodies,
    )


def source_run(calls: list[tuple[str, int, dict]], *, run_id: str = "run-src") -> tuple[dict, bytes]:
    """A recorded run making `calls` [(tool, contract revision, request)], one proposal, call and result each."""
    events: list[dict] = []

    def add(kind: str, **fields: Any) -> str:
        n = len(events) + 1
        eid = f"e{n}"
        events.append({"seq": n, "id": eid, "kind": kind, "at": {"logical": T0, "wall": T0}, "attempt": "a1", **fields})
        return eid

    add("attempt.started", number=1, reason="test", parent_attempt_id=None)
    for tool, rev, request in calls:
        p = add(
            "model.proposal",
            context_digest=digest_json(len(events)),
            proposal={"type": "tool_call", "tool": tool},
            accepted=True,
        )
        c = add(
            "tool.call",
            tool=tool,
            contract_revision=rev,
            request=request,
            request_digest=digest_json(request),
            proposal_id=p,
            workspace_id=None,
        )
        add("tool.result", call_id=c, origin="historical", outcome="ok", blob=None, absent={})
    add("run.state", state="completed", reason="done")
    add("attempt.ended", outcome="completed")
    manifest = {
        "format": "n17q.run-bundle/1",
        "blobs": {},
        "run": {
            "id": run_id,
            "task": {"id": "task-1", "revision": "r1"},
            "environment": "live",
            "mode": "recorded",
            "scenario": None,
            "model": {"name": "m", "version": "1"},
            "policy_revision": "p@1",
            "created_at": T0,
            "parent_run": None,
        },
    }
    return manifest, b"".join(canonical_json(e) + b"\n" for e in events)


def replay_package(
    scenario_pkg: Package | None,
    manifest: dict,
    events: bytes,
    *,
    blobs: dict | None = None,
    mode: str = "rerun",
    vary: dict | None = None,
    replay_id: str = "replay-1",
    fixture_bodies: dict[str, bytes] | None = None,
    expired_fixture_bodies: dict[str, dict[str, Any]] | None = None,
) -> Package:
    return build_replay(
        replay_id=replay_id,
        run_id=f"{manifest['run']['id']}~{mode}",
        mode=mode,
        vary=vary or {},
        decider="recorded",
        launched_at="2026-12-02T12:00:00Z",
        scenario=scenario_pkg,
        source_manifest=manifest,
        source_events=events,
        source_blobs=blobs or {},
        fixture_bodies=fixture_bodies,
        expired_fixture_bodies=expired_fixture_bodies,
    )
