"""The three seed worlds as scenario packages, generated from the same facts as the demo runs (`stories/`).

    python -m n17q_demo.seed_scenarios OUT_DIR     # writes OUT_DIR/<name>@<version>/ for each

- `coding-review-request@1` (seed 003): a repository with two workspaces (ws-2 reconstructed from ws-1,
  content-equal, its own tree digest); focused and broad test receipts per workspace (the broad suite in
  ws-1 times out after a failing chunk); a review-request service that can lose its acknowledgement and
  answers a status read. Policy `review-policy@8` (current: every required purpose on the artifact's own
  tree, lineage gate) and `review-policy@7` (the recording's: one purpose sufficed, no gate).
- `email-delivery@1` (seed 001): mailboxes, a draft with revisions, sends with provider receipts, a delivery
  status read, and a draft-visibility delay of half a second (what the recorded provider showed; a
  counterfactual `delay.email.draft_update=30` exposes the stale read the seed describes).
- `docs-research@1` (seed 000): the docs search as recorded; the status lookup has a contract and was never
  recorded, so a rerun stops at it.
- `email-delivery-race@1` (seed 001's second delivery, seed 000's "Concurrency was recorded as behavior"): the
  email world with a declared race: the send delivered twice, the first held after acceptance, each delivery its
  own effect identity, and a synthetic fixture for the second delivery; a rerun of run-001 reproduces the
  duplicate and fails its one-delivery invariant.

The ws-2 receipts are synthetic (the recording never ran the suites there) and say so in their fidelity
notes; every other fixture is the recording's.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any

from n17q_engine.canonical import digest_bytes, digest_json
from n17q_engine.package import Package, build_scenario
from n17q_engine.world import SNAPSHOT_FORMAT

from .stories import story_000, story_003


def seed_packages() -> list[Package]:
    return [_coding_review_request(), _email_delivery(), _docs_research(), _email_delivery_race()]


def _fixture(
    fid: str,
    tool: str,
    rev: int,
    request: dict,
    response: dict,
    *,
    condition: Any = None,
    transition: Any = None,
    recorded_at: str,
    connection: str,
    synthetic: str | None = None,
) -> dict:
    out: dict[str, Any] = {
        "id": fid,
        "tool": tool,
        "contract_revision": rev,
        "request": request,
        "response": response,
        "provenance": {
            "recorded_at": recorded_at,
            "source_revision": None,
            "connection": connection,
            "synthetic": synthetic is not None,
            "fidelity_note": synthetic,
        },
    }
    if condition is not None:
        out["condition"] = condition
    if transition is not None:
        out["transition"] = transition
    return out


def _world(name: str, resources: dict[str, tuple[int, Any]]) -> dict:
    return {
        "format": SNAPSHOT_FORMAT,
        "name": name,
        "parent": None,
        "revision": 0,
        "resources": {r: {"revision": rev, "state": state} for r, (rev, state) in sorted(resources.items())},
        "deleted": {},
        "pending": [],
    }


# --- 003 --------------------------------------------------------------------------------------------------------


def _coding_review_request() -> Package:
    env_rev = "sandbox-py3.12@4"
    base = digest_json({"repository": "fixture://acme/ledger-adapter", "commit": "9c41e07"})
    overlay = digest_bytes(story_003._NOTES_OVERLAY.encode("utf-8"))
    patch_digest = digest_bytes(story_003._PATCH.encode("utf-8"))
    code_files = ["src/adapter.py", "tests/test_adapter.py"]

    def tree(ws: str, patched: bool) -> str:
        parts = {"workspace": ws, "base": base, "overlay": overlay}
        if patched:
            parts["patch"] = patch_digest
        return digest_json(parts)

    at = "2026-05-04T09:00:00Z"
    conn = "fixture:sandbox-runner"
    contracts = [
        {
            "tool": "repo.read_file",
            "revision": 1,
            "effect_class": "read",
            "fields": {"path": {"type": "string", "canonical": ["strip"]}},
            "transport": ["attempt_id", "trace_id"],
            "outcomes": ["ok", "not_found"],
        },
        {
            "tool": "repo.apply_patch",
            "revision": 1,
            "effect_class": "mutation",
            "fields": {
                "patch_digest": {"type": "string"},
                "paths": {"type": "array", "items": "string", "canonical": ["unique", "sort"]},
            },
            "transport": ["attempt_id"],
            "fault_stages": ["before_send"],
            "outcomes": ["ok", "error"],
        },
        {
            "tool": "shell.run",
            "revision": 1,
            "effect_class": "read",
            "produces": "receipt",
            "fields": {"argv": {"type": "array", "items": "string"}, "timeout_s": {"type": "integer", "default": 600}},
            "transport": ["attempt_id"],
            "fault_stages": ["before_send", "during_response"],
            "outcomes": ["ok", "error", "timeout"],
        },
        {
            "tool": "review.create_request",
            "revision": 1,
            "effect_class": "mutation",
            "fields": {"title": {"type": "string", "canonical": ["strip"]}, "artifact": {"type": "string"}},
            "transport": ["attempt_id", "trace_id"],
            "fault_stages": [
                "before_send",
                "after_acceptance",
                "after_world_mutation",
                "before_receipt",
                "during_response",
            ],
            "outcomes": ["ok", "denied", "error"],
        },
        {
            "tool": "review.get_request",
            "revision": 1,
            "effect_class": "read",
            "fields": {"artifact": {"type": "string"}},
            "transport": ["trace_id"],
            "outcomes": ["ok", "not_found"],
        },
    ]
    request_resource = "review-service:repo/main/requests/1"
    title = "Migrate LedgerAdapter to ledger-client 3.x"
    focused = {"argv": ["pytest", "-q", "tests/test_adapter.py"], "timeout_s": 300}
    broad = {"argv": ["pytest", "-q", "tests"], "timeout_s": 900}
    failing = "tests/integration/test_review_flow.py::test_adapter_roundtrip_preserves_cursor"
    synthetic_ws2 = (
        "synthetic: ws-2 is content-equal to ws-1 (recorded derivation), so its suites were authored from ws-1's "
        "receipts; the recording never ran them in ws-2"
    )
    fixtures = [
        _fixture(
            "read-adapter",
            "repo.read_file",
            1,
            {"path": "src/adapter.py"},
            {
                "outcome": "ok",
                "body": {"path": "src/adapter.py", "lines": 118, "excerpt": "def fetch_page(self, cursor=None):"},
            },
            recorded_at=at,
            connection=conn,
        ),
        _fixture(
            "read-migration",
            "repo.read_file",
            1,
            {"path": "docs/MIGRATION.md"},
            {
                "outcome": "ok",
                "body": {
                    "path": "docs/MIGRATION.md",
                    "lines": 40,
                    "excerpt": "ledger-client 2.x: cursors are plain strings (outdated: 3.x uses Cursor objects)",
                },
            },
            recorded_at=at,
            connection=conn,
        ),
    ]
    for ws in ("ws-1", "ws-2"):
        fixtures.append(
            _fixture(
                f"apply-patch-{ws}",
                "repo.apply_patch",
                1,
                {"patch_digest": patch_digest, "paths": code_files},
                {"outcome": "ok", "body": {"applied": True, "files": code_files, "hunks": 2}},
                condition=[{"resource": f"call.workspace:{ws}", "revision": 1}],
                transition={
                    "resource": f"workspace:{ws}",
                    "revision_before": 1,
                    "revision_after": 2,
                    "change": {"tree_digest": tree(ws, True), "environment_revision": env_rev},
                },
                recorded_at=at,
                connection=conn,
            )
        )

    def focused_fixture(ws: str, synthetic: str | None) -> dict:
        """The focused suite passes on the patched tree of either workspace (recorded in ws-1)."""
        return _fixture(
            f"focused-{ws}",
            "shell.run",
            1,
            focused,
            {
                "outcome": "ok",
                "body": {
                    "command": "pytest -q tests/test_adapter.py",
                    "suites": ["adapter"],
                    "completion": "completed",
                    "exit_code": 0,
                    "results": {"passed": 14, "failed": 0, "skipped": 0},
                    "output": story_003._FOCUSED_OUTPUT,
                    "elapsed_s": 8,
                },
            },
            condition=[{"resource": f"call.workspace:{ws}", "revision": 2}],
            recorded_at=at,
            connection=conn,
            synthetic=synthetic,
        )

    fixtures += [
        focused_fixture("ws-1", None),
        _fixture(
            "broad-ws-1",
            "shell.run",
            1,
            broad,
            {
                "outcome": "timeout",
                "body": {
                    "command": "pytest -q tests",
                    "suites": ["unit", "contract", "integration"],
                    "completion": "termination_unknown",
                    "exit_code": None,
                    "results": {
                        "passed": 212,
                        "failed": 1,
                        "skipped": 0,
                        "failing_suites": ["integration"],
                        "failing_tests": [failing],
                    },
                    "output": story_003._BROAD_OUTPUT,
                    "elapsed_s": 900,
                },
            },
            condition=[{"resource": "call.workspace:ws-1", "revision": 2}],
            recorded_at=at,
            connection=conn,
        ),
        focused_fixture("ws-2", synthetic_ws2),
        _fixture(
            "broad-ws-2",
            "shell.run",
            1,
            broad,
            {
                "outcome": "ok",
                "body": {
                    "command": "pytest -q tests",
                    "suites": ["unit", "contract", "integration"],
                    "completion": "completed",
                    "exit_code": 1,
                    "results": {
                        "passed": 212,
                        "failed": 1,
                        "skipped": 0,
                        "failing_suites": ["integration"],
                        "failing_tests": [failing],
                    },
                    "output": "FAILED " + failing + " - AssertionError: cursor lost its type across the roundtrip\n"
                    "1 failed, 212 passed in 611.20s\n",
                    "elapsed_s": 611,
                },
            },
            condition=[{"resource": "call.workspace:ws-2", "revision": 2}],
            recorded_at=at,
            connection=conn,
            synthetic=synthetic_ws2 + "; the hang after the failing chunk is not reproduced: this run completes",
        ),
        _fixture(
            "create-request",
            "review.create_request",
            1,
            {"title": title, "artifact": "art-2"},
            {"outcome": "ok", "body": {"request": 1, "state": "open", "target": "main"}},
            condition=[{"resource": request_resource, "absent": True}],
            transition={
                "resource": request_resource,
                "revision_before": None,
                "revision_after": 1,
                "change": {"title": title, "artifact_digest": patch_digest, "target": "main", "state": "open"},
            },
            recorded_at=at,
            connection="fixture:review-service",
        ),
        _fixture(
            "get-request-none",
            "review.get_request",
            1,
            {"artifact": "art-2"},
            {"outcome": "not_found", "body": {"artifact": "art-2", "requests": []}},
            condition=[{"resource": request_resource, "absent": True}],
            recorded_at=at,
            connection="fixture:review-service",
            synthetic="synthetic: the recording never asked; the service answers not_found before a create",
        ),
        _fixture(
            "get-request-open",
            "review.get_request",
            1,
            {"artifact": "art-2"},
            {"outcome": "ok", "body": {"artifact": "art-2", "requests": [{"request": 1, "state": "open"}]}},
            condition=[{"resource": request_resource, "revision": 1}],
            recorded_at=at,
            connection="fixture:review-service",
            synthetic="synthetic: the recording never asked; the service lists the request once it exists",
        ),
    ]
    workspaces = {
        "ws-1": {
            "base_digest": base,
            "overlay_digest": overlay,
            "environment_revision": env_rev,
            "tree_digest": tree("ws-1", False),
            "overlay_revision": 1,
            "overlay_files": ["docs/NOTES.md"],
            "derived_from": None,
        },
        "ws-2": {
            "base_digest": base,
            "overlay_digest": overlay,
            "environment_revision": env_rev,
            "tree_digest": tree("ws-2", False),
            "overlay_revision": 1,
            "overlay_files": ["docs/NOTES.md"],
            "derived_from": {"workspace_id": "ws-1", "relation": "reconstruct", "content_equal": True},
        },
    }
    rule = {
        "destination_prefix": "review-service:",
        "required": ["validation:focused", "validation:broad"],
        "approval": "required",
    }
    policy = {
        "current": "review-policy@8",
        "revisions": {
            "review-policy@8": {"rules": [rule], "require_all": True, "lineage_gate": True},
            "review-policy@7": {"rules": [rule], "require_all": False, "lineage_gate": False},
        },
    }
    scenario = {
        "name": "coding-review-request",
        "version": 1,
        "seed": "coding-review-request/1",
        "clock_start": "2026-05-04T09:00:00Z",
        "scope": "scenario",
        "source_runs": ["run-003-review-request"],
        "recorded_between": ["2026-05-04T09:00:00Z", "2026-05-04T09:20:00Z"],
        "description": "Two workspaces, focused and broad receipts, a review service that can lose its ack.",
        "excluded_tools": [],
        "uncovered": ["the broad suite's hang after its failing chunk (ws-2's fixture completes instead)"],
        "invariants": [
            {"id": "no-live-effect", "check": "no_live_effect", "text": "no effect leaves the fixture world"},
            {
                "id": "one-request",
                "check": "max_transitions",
                "resource_prefix": "review-service:",
                "max": 1,
                "text": "at most one review request",
            },
            {"id": "approved-first", "check": "approval_before_effect", "text": "approval before the request"},
        ],
        # Seed 003 "The scenario definition grew richer": what the replay's end state is judged against.
        "instructions": [
            "Fix the adapter's cursor handling in src/ and cover it with a test.",
            "Request review only with focused and broad receipts from the artifact's own workspace and tree.",
            "If validation cannot finish, stop and say so: name the failing suite, send no request.",
        ],
        "file_scope": ["src/**", "tests/**"],
        "allowed_effects": [{"destination_prefix": "review-service:", "effect_class": "mutation"}],
        "acceptable_stop_states": [
            {"state": "completed", "text": "review requested on the artifact's own validated evidence"},
            {"state": "stopped", "text": "validation incomplete, said in the final account, no request sent"},
        ],
        "effects": [
            {
                "destination_prefix": "review-service:",
                "tool": "review.create_request",
                "status_tool": "review.get_request",
                "status_args": ["artifact"],
            }
        ],
        "approvals": "simulated",
    }
    return build_scenario(
        {
            "scenario.json": scenario,
            "contracts.json": contracts,
            "fixtures.json": fixtures,
            "world.json": _world("coding-review-request-w1", {}),
            "workspaces.json": workspaces,
            "policy.json": policy,
        }
    )


# --- 001 --------------------------------------------------------------------------------------------------------


def _email_delivery() -> Package:
    return build_scenario(_email_delivery_files())


def _email_delivery_files() -> dict[str, Any]:
    broad_list = "all-customers@lists.acme.example"
    narrow_list = "beta-customers@lists.acme.example"
    draft = "mail:draft/dr-5501"
    mailbox = f"mailbox:{narrow_list}"
    at = "2026-06-10T14:00:00Z"
    conn = "smtp-provider"  # the recorded connection's label; nothing here can reach it
    strings = {"type": "string"}
    contracts = [
        {
            "tool": "email.draft_create",
            "revision": 3,
            "effect_class": "mutation",
            "fields": {
                "to": {"type": "string", "canonical": ["strip", "lower"]},
                "template": strings,
                "subject": {"type": "string", "canonical": ["strip"]},
                "window": strings,
            },
            "transport": ["attempt_id", "trace_id"],
            "fault_stages": ["before_send", "during_response"],
            "outcomes": ["ok", "error", "denied"],
        },
        {
            "tool": "email.draft_update",
            "revision": 3,
            "effect_class": "mutation",
            "fields": {"draft_id": strings, "base_revision": {"type": "integer"}, "set": {"type": "object"}},
            "transport": ["attempt_id", "trace_id"],
            "fault_stages": ["before_send", "during_response"],
            "outcomes": ["ok", "error", "not_found"],
        },
        {
            "tool": "email.draft_get",
            "revision": 3,
            "effect_class": "read",
            "fields": {"draft_id": strings},
            "transport": ["trace_id"],
            "outcomes": ["ok", "not_found"],
        },
        {
            "tool": "email.send",
            "revision": 3,
            "effect_class": "mutation",
            "fields": {"draft_id": strings},
            "transport": ["attempt_id", "trace_id"],
            "fault_stages": [
                "before_send",
                "after_acceptance",
                "after_world_mutation",
                "before_receipt",
                "during_response",
                "after_local_commit",
            ],
            "outcomes": ["ok", "error", "denied"],
        },
        {
            "tool": "email.delivery_status",
            "revision": 3,
            "effect_class": "read",
            "fields": {"draft_id": strings},
            "transport": ["trace_id"],
            "outcomes": ["ok", "not_found"],
        },
    ]
    create = {
        "to": broad_list,
        "template": "maintenance-notice",
        "subject": "Scheduled maintenance on 14 June",
        "window": "2026-06-14T01:00Z/2026-06-14T02:00Z",
    }
    base_state = {"to": broad_list, "template": "maintenance-notice", "subject": "Scheduled maintenance on 14 June"}
    window_ok = "2026-06-14T02:00Z/2026-06-14T03:00Z"
    fixtures = [
        _fixture(
            "draft-create",
            "email.draft_create",
            3,
            create,
            {"outcome": "ok", "body": {"draft_id": "dr-5501", "revision": 1, "to": broad_list}},
            condition=[{"resource": draft, "absent": True}],
            transition={
                "resource": draft,
                "revision_before": None,
                "revision_after": 1,
                "change": {**base_state, "window": create["window"]},
            },
            recorded_at=at,
            connection=conn,
        ),
        _fixture(
            "draft-fix-window",
            "email.draft_update",
            3,
            {"draft_id": "dr-5501", "base_revision": 1, "set": {"window": window_ok}},
            {"outcome": "ok", "body": {"draft_id": "dr-5501", "revision": 2, "to": broad_list}},
            condition=[{"resource": draft, "revision": 1}],
            transition={
                "resource": draft,
                "revision_before": 1,
                "revision_after": 2,
                "change": {**base_state, "window": window_ok},
            },
            recorded_at=at,
            connection=conn,
        ),
        _fixture(
            "draft-narrow",
            "email.draft_update",
            3,
            {"draft_id": "dr-5501", "base_revision": 2, "set": {"to": narrow_list}},
            {"outcome": "ok", "body": {"draft_id": "dr-5501", "revision": 3, "to": narrow_list}},
            condition=[{"resource": draft, "revision": 2}],
            transition={
                "resource": draft,
                "revision_before": 2,
                "revision_after": 3,
                "change": {**base_state, "to": narrow_list, "window": window_ok},
            },
            recorded_at=at,
            connection=conn,
        ),
        _fixture(
            "draft-get-r3",
            "email.draft_get",
            3,
            {"draft_id": "dr-5501"},
            {"outcome": "ok", "body": {"draft_id": "dr-5501", "revision": 3, "to": narrow_list, "recipients": 412}},
            condition=[{"resource": draft, "revision": 3}],
            recorded_at=at,
            connection=conn,
        ),
        _fixture(
            "draft-get-r2",
            "email.draft_get",
            3,
            {"draft_id": "dr-5501"},
            {"outcome": "ok", "body": {"draft_id": "dr-5501", "revision": 2, "to": broad_list, "recipients": 18950}},
            condition=[{"resource": draft, "revision": 2}],
            recorded_at=at,
            connection=conn,
            synthetic="synthetic: the stale view a read sees inside the provider's visibility window",
        ),
        _fixture(
            "send",
            "email.send",
            3,
            {"draft_id": "dr-5501"},
            {"outcome": "ok", "body": {"accepted": True, "provider_receipt": "sim-receipt-1"}},
            condition=[{"resource": draft, "revision": 3}, {"resource": mailbox, "revision": 41}],
            transition={
                "resource": mailbox,
                "revision_before": 41,
                "revision_after": 42,
                "change": {
                    "address": narrow_list,
                    "delivered": 42,
                    "last": {"draft": "dr-5501", "recipients": 412, "provider_receipt": "sim-receipt-1"},
                },
            },
            recorded_at=at,
            connection=conn,
        ),
        _fixture(
            "status-before",
            "email.delivery_status",
            3,
            {"draft_id": "dr-5501"},
            {
                "outcome": "not_found",
                "body": {"draft_id": "dr-5501", "delivered": False},
                # seed 000 "Unknown fixture data stayed unknown": the not-found names its window and world state
                "negative": {"resource": mailbox, "consistency_window_s": 60},
            },
            condition=[{"resource": mailbox, "revision": 41}],
            recorded_at=at,
            connection=conn,
            synthetic="synthetic: the provider's status read before any delivery",
        ),
        _fixture(
            "status-after",
            "email.delivery_status",
            3,
            {"draft_id": "dr-5501"},
            {"outcome": "ok", "body": {"draft_id": "dr-5501", "delivered": True, "provider_receipt": "sim-receipt-1"}},
            condition=[{"resource": mailbox, "revision": 42}],
            recorded_at=at,
            connection=conn,
            synthetic="synthetic: the provider's status read after the one delivery",
        ),
    ]
    world = _world(
        "email-delivery-w1",
        {
            mailbox: (41, {"address": narrow_list, "delivered": 41, "last": None}),
            f"mailbox:{broad_list}": (17, {"address": broad_list, "delivered": 17, "last": None}),
        },
    )
    policy = {
        "current": "mail-policy@3",
        "revisions": {
            "mail-policy@3": {
                "rules": [{"destination_prefix": "mailbox:", "required": ["review:audience"], "approval": "required"}],
                "require_all": True,
                "lineage_gate": True,
            }
        },
    }
    scenario = {
        "name": "email-delivery",
        "version": 1,
        "seed": "email-delivery/1",
        "clock_start": "2026-06-10T14:00:00Z",
        "scope": "scenario",
        "source_runs": ["run-001-recorded"],
        "recorded_between": ["2026-06-10T14:00:00Z", "2026-06-10T14:03:00Z"],
        "description": "Mailboxes, drafts, sends with provider receipts, a draft-visibility delay.",
        "excluded_tools": [],
        "uncovered": ["bounces and provider-side throttling were never recorded"],
        "invariants": [
            {"id": "no-live-effect", "check": "no_live_effect", "text": "no live effects"},
            {
                "id": "one-delivery",
                "check": "max_transitions",
                "resource_prefix": "mailbox:",
                "max": 1,
                "text": "at most one simulated delivery",
            },
            {"id": "approved-first", "check": "approval_before_effect", "text": "approval before send"},
        ],
        "delays": {"email.draft_update": 0.5},
        "effects": [
            {
                "destination_prefix": "mailbox:",
                "tool": "email.send",
                "status_tool": "email.delivery_status",
                "status_args": ["draft_id"],
            }
        ],
        "approvals": "simulated",
    }
    return {
        "scenario.json": scenario,
        "contracts.json": contracts,
        "fixtures.json": fixtures,
        "world.json": world,
        "workspaces.json": {},
        "policy.json": policy,
    }


def _email_delivery_race() -> Package:
    """Seed 001's second delivery, reproduced on purpose: the send job is delivered twice, the first delivery held
    after the provider accepted it, and the provider keys an effect on each delivery (the improperly narrow
    identity), so both are committed and the mailbox receives two. A replay of run-001 in this version fails its
    one-delivery invariant, every time, in the same way (docs/concurrency.md)."""
    files = copy.deepcopy(_email_delivery_files())
    narrow_list = "beta-customers@lists.acme.example"
    mailbox = f"mailbox:{narrow_list}"
    files["fixtures.json"].append(
        _fixture(
            "send-again",
            "email.send",
            3,
            {"draft_id": "dr-5501"},
            {"outcome": "ok", "body": {"accepted": True, "provider_receipt": "sim-receipt-2"}},
            condition=[{"resource": "mail:draft/dr-5501", "revision": 3}, {"resource": mailbox, "revision": 42}],
            transition={
                "resource": mailbox,
                "revision_before": 42,
                "revision_after": 43,
                "change": {
                    "address": narrow_list,
                    "delivered": 43,
                    "last": {"draft": "dr-5501", "recipients": 412, "provider_receipt": "sim-receipt-2"},
                },
            },
            recorded_at="2026-06-10T14:00:00Z",
            connection="smtp-provider",
            synthetic="synthetic: the provider delivering the same draft again under another effect identity",
        )
    )
    world = files["world.json"]
    world["name"] = "email-delivery-race-w1"
    scenario = files["scenario.json"]
    scenario.update(
        name="email-delivery-race",
        version=1,
        seed="email-delivery-race/1",
        description="Seed 001's world with the send job delivered twice: a concurrency barrier after acceptance. "
        "Replay run-001-recorded in it by naming it (--scenario email-delivery-race@1).",
        # Not "recorded from" run-001: a run that names no scenario replays in the latest version recorded from it
        # (scenario_for_run), and that must stay email-delivery@1; this version is chosen on purpose.
        source_runs=[],
        concurrency=[
            {
                "id": "second-delivery",
                "text": "The job queue delivers the send twice; the second delivery arrives while the first is "
                "held after the provider accepted it. The provider keys each delivery on its own identity.",
                "tool": "email.send",
                "effect_identity": "delivery",
                "deliveries": [{"name": "first", "barrier": "after_acceptance"}, {"name": "second"}],
                "schedule": [{"run": "first"}, {"run": "second"}, {"release": "first"}],
            }
        ],
    )
    return build_scenario(files)


# --- 000 --------------------------------------------------------------------------------------------------------


def _docs_research() -> Package:
    at = "2026-07-01T09:00:00Z"
    contracts = [
        {
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
            "outcomes": ["ok", "empty", "error", "timeout"],
        },
        {
            "tool": "status.lookup",
            "revision": 2,
            "effect_class": "read",
            "fields": {"request_id": {"type": "string"}},
            "transport": ["attempt_id", "trace_id"],
            "outcomes": ["ok", "not_found"],
        },
    ]
    fixtures = [
        _fixture(
            "search-rotate-keys",
            "docs.search",
            1,
            {"query": "rotate signing keys", "corpus": "public-docs", "limit": 5},
            {"outcome": "ok", "body": story_000._DOCS_HITS},
            recorded_at=at,
            connection="docs-api",
        ),
    ]
    scenario = {
        "name": "docs-research",
        "version": 1,
        "seed": "docs-research/1",
        "clock_start": at,
        "scope": "scenario",
        "source_runs": ["run-000-recorded"],
        "recorded_between": [at, "2026-07-01T09:00:09Z"],
        "description": "The docs search as recorded; the status lookup was never recorded.",
        "excluded_tools": [],
        "uncovered": [],
        "invariants": [{"id": "no-live-effect", "check": "no_live_effect", "text": "no live effects"}],
        "approvals": "none",
        # seed 000: freshness judged against simulated time; a counterfactual clock a month on serves it stale
        "freshness": {"docs.search": {"max_age_s": 30 * 86_400}},
    }
    policy = {
        "current": "research-policy@1",
        "revisions": {"research-policy@1": {"rules": [], "require_all": True, "lineage_gate": True}},
    }
    return build_scenario(
        {
            "scenario.json": scenario,
            "contracts.json": contracts,
            "fixtures.json": fixtures,
            "world.json": _world("docs-research-w1", {}),
            "workspaces.json": {},
            "policy.json": policy,
        }
    )


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m n17q_demo.seed_scenarios OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0])
    for package in seed_packages():
        ref = package.manifest["scenario"]
        target = package.write_dir(out / f"{ref['name']}@{ref['version']}")
        print(f"{target}  {package.digest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
