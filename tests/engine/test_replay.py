"""The replay loop: fail-closed lookups, the three stories, faults, determinism, packages."""

from __future__ import annotations

import http.client
import json
import os
import smtplib
import socket
import ssl
import sys
import urllib.request
from pathlib import Path

import pytest

from n17q_demo import seed_scenarios, stories
from n17q_engine.canonical import canonical_json, digest_json
from n17q_engine.lineage import check_events
from n17q_engine.package import (
    CHECK_REVISION,
    REPLAY_FORMAT,
    SCENARIO_FORMAT,
    Package,
    PackageError,
    build_scenario,
    dump,
    load_replay,
    read_package,
)
from n17q_engine.replay import ReplayError, ReplayOutput, iter_output_events, run_replay
from n17q_engine.sandbox import Limits, run_sandboxed
from tests.engine import replaylib as rl
from tests.engine.fresh import run_fresh

SEEDS = {p.manifest["scenario"]["name"]: p for p in seed_scenarios.seed_packages()}
BUNDLES = {b.manifest["run"]["id"]: b for b in stories.demo_bundles()}


def replay(pkg: Package) -> tuple[ReplayOutput, list[dict]]:
    out = run_replay(load_replay(Package.from_wire(pkg.to_wire(), REPLAY_FORMAT)), isolation="netns")
    return out, list(iter_output_events(out))


def story(run_id: str, scenario: str | None, mode: str = "rerun", vary: dict | None = None, *, scenario_pkg=None):
    b = BUNDLES[run_id]
    events = b"".join(canonical_json(e) + b"\n" for e in b.events)
    pkg = rl.replay_package(
        scenario_pkg or (SEEDS[scenario] if scenario else None),
        b.manifest,
        events,
        blobs=b.blobs,
        mode=mode,
        vary=vary,
    )
    return replay(pkg)


def kinds(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["kind"] == kind]


def final(events: list[dict]) -> dict:
    return kinds(events, "run.state")[-1]


# --- fail closed --------------------------------------------------------------------------------------------


class LiveAccess:
    """Counts every construction of a live client, an endpoint connection or a credential lookup."""

    CREDENTIAL_HINTS = ("TOKEN", "SECRET", "PASSWORD", "KEY", "CREDENTIAL", "DATABASE_URL", "REDIS_URL")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        for owner, name in (
            (socket.socket, "__init__"),
            (socket, "create_connection"),
            (socket, "getaddrinfo"),
            (http.client.HTTPConnection, "__init__"),
            (http.client.HTTPSConnection, "__init__"),
            (smtplib.SMTP, "__init__"),
            (ssl.SSLContext, "wrap_socket"),
            (urllib.request, "urlopen"),
        ):
            monkeypatch.setattr(owner, name, self._counter(f"{getattr(owner, '__name__', owner)}.{name}"))
        real_get = os.environ.get
        real_getenv = os.getenv

        def get(key, default=None):
            if any(h in str(key).upper() for h in self.CREDENTIAL_HINTS):
                self.calls.append(f"credential {key}")
            return real_get(key, default)

        monkeypatch.setattr(os.environ, "get", get)
        monkeypatch.setattr(os, "getenv", lambda key, default=None: (get(key), real_getenv(key, default))[1])
        self.modules_before = set(sys.modules)

    def _counter(self, label: str):
        def counted(*args, **kwargs):
            self.calls.append(label)
            raise AssertionError(f"the replay constructed {label}")

        return counted

    def new_network_modules(self) -> set[str]:
        clients = ("requests", "httpx", "urllib3", "aiohttp", "boto3", "botocore", "redis", "psycopg", "kombu")
        return {m for m in set(sys.modules) - self.modules_before if m.split(".")[0] in clients}


@pytest.fixture
def live_access(monkeypatch):
    return LiveAccess(monkeypatch)


SEARCH_FIXTURES = [rl.fixture("f-rotate", rl.search_request("rotate signing keys"))]
SEARCH_REV2 = {**rl.SEARCH, "revision": 2}


@pytest.mark.parametrize(
    ("case", "calls", "contracts", "fixtures", "kind", "reason"),
    [
        (
            "unknown tool",
            [("tickets.search", 1, {"q": "x"})],
            None,
            SEARCH_FIXTURES,
            "fixture.missing",
            "unknown tool: the scenario has no contract for tickets.search",
        ),
        (
            "unseen argument",
            [("docs.search", 1, rl.search_request("rotate keys"))],
            None,
            SEARCH_FIXTURES,
            "fixture.missing",
            "unrecorded request: no fixture for this request to docs.search revision 1",
        ),
        (
            "changed default",
            [("docs.search", 1, {"query": "rotate signing keys"})],
            [{**rl.SEARCH, "fields": {**rl.SEARCH["fields"], "limit": {"type": "integer", "default": 10}}}],
            SEARCH_FIXTURES,
            "fixture.missing",
            "unrecorded request",
        ),
        (
            "unknown field",
            [("docs.search", 1, {**rl.search_request("rotate signing keys"), "colour": "red"})],
            None,
            SEARCH_FIXTURES,
            "fixture.missing",
            "request does not fit docs.search revision 1",
        ),
        (
            "ambiguous match",
            [("docs.search", 1, rl.search_request("rotate signing keys"))],
            None,
            [*SEARCH_FIXTURES, rl.fixture("f-rotate-again", rl.search_request("rotate signing keys"))],
            "fixture.ambiguous",
            "2 fixtures match this request",
        ),
        (
            "contract revision mismatch",
            [("docs.search", 1, rl.search_request("rotate signing keys"))],
            [SEARCH_REV2],
            [rl.fixture("f-rotate", rl.search_request("rotate signing keys"), rev=2)],
            "fixture.missing",
            "contract mismatch: the recorded call used docs.search revision 1, the scenario pins revision 2",
        ),
        (
            "world-state mismatch",
            [("docs.search", 1, rl.search_request("rotate signing keys"))],
            None,
            [
                rl.fixture(
                    "f-rotate",
                    rl.search_request("rotate signing keys"),
                    condition=[{"resource": "docs:index", "revision": 3}],
                )
            ],
            "fixture.missing",
            "f-rotate expects docs:index at 3, the world has 2",
        ),
    ],
)
def test_a_lookup_that_cannot_be_answered_stops_the_run_with_its_precise_record(
    live_access, case, calls, contracts, fixtures, kind, reason
):
    sc = rl.scenario(contracts=contracts, fixtures=fixtures, resources={"docs:index": (2, {"docs": 40})})
    manifest, events = rl.source_run(calls)

    _out, log = replay(rl.replay_package(sc, manifest, events))

    stopped = kinds(log, kind)
    assert len(stopped) == 1, case
    record = stopped[0]
    assert reason in record["reason"]
    assert record["scenario"] == {"name": "test-scenario", "version": 1}
    assert record["world_revision"] == 0
    assert record["checkpoint_id"] == kinds(log, "checkpoint")[-1]["id"]
    assert record["request_digest"].startswith("sha256:")
    assert final(log)["state"] == "incomplete_test_world"
    assert not kinds(log, "tool.result"), "no placeholder result, no nearby fixture"
    assert live_access.calls == []
    assert live_access.new_network_modules() == set()


def test_the_ambiguous_record_names_its_candidates(live_access):
    sc = rl.scenario(fixtures=[*SEARCH_FIXTURES, rl.fixture("f-b", rl.search_request("rotate signing keys"))])
    manifest, events = rl.source_run([("docs.search", 1, rl.search_request("rotate signing keys"))])
    _out, log = replay(rl.replay_package(sc, manifest, events))
    assert kinds(log, "fixture.ambiguous")[0]["candidates"] == ["f-b", "f-rotate"]


def test_a_matching_request_is_answered_by_its_fixture_and_the_run_completes(live_access):
    sc = rl.scenario(fixtures=SEARCH_FIXTURES)
    # transport fields vary without breaking the match; defaults are resolved before the digest
    manifest, events = rl.source_run([("docs.search", 1, {"query": " rotate signing keys ", "trace_id": "t-9"})])
    _out, log = replay(rl.replay_package(sc, manifest, events))
    (result,) = kinds(log, "tool.result")
    assert (result["origin"], result["outcome"], result["fixture"]) == ("fixture", "ok", "f-rotate")
    assert kinds(log, "tool.call")[0]["request"] == rl.search_request("rotate signing keys")
    assert final(log)["state"] == "completed"
    assert live_access.calls == []


# A scenario whose fixture was never checked: its request carries the padding the contract strips. Built around
# build_scenario (which refuses it) to stand for a package that did not come from a builder that checked it.
UNNORMALIZED = rl.fixture("f-padded", {"query": " rotate signing keys ", "corpus": "public-docs", "limit": 5})


def _unchecked_replay(record: str) -> Package:
    """A replay package around that scenario, with no check record, a forged one (naming its scenario), one of
    another check revision, or one naming another scenario."""
    files = {n: json.loads(d) for n, d in rl.scenario(fixtures=SEARCH_FIXTURES).files.items()}
    files["fixtures.json"] = [UNNORMALIZED]
    header = {"scenario": {"name": "test-scenario", "version": 1}}
    sc = Package.build(SCENARIO_FORMAT, header, {n: dump(v) for n, v in files.items()})
    manifest, events = rl.source_run([("docs.search", 1, {"query": " rotate signing keys "})])
    meta: dict = {
        "id": "replay-1",
        "run_id": "run-src~rerun",
        "mode": "rerun",
        "vary": {},
        "decider": "recorded",
        "launched_at": "2026-12-02T12:00:00Z",
    }
    records = {
        "forged": {"revision": CHECK_REVISION, "scenario": sc.digest},
        "stale": {"revision": "n17q.scenario-check/0", "scenario": sc.digest},
        "other": {"revision": CHECK_REVISION, "scenario": digest_json("another scenario")},
    }
    if record != "none":
        meta["scenario_checked"] = records[record]
    replay_files = {
        "replay.json": dump(meta),
        "source/manifest.json": dump(manifest),
        "source/events.jsonl": events,
        "scenario/package.json": dump(sc.manifest),
        **{f"scenario/{n}": d for n, d in sc.files.items()},
    }
    return Package.build(REPLAY_FORMAT, {"replay": "replay-1"}, replay_files)


def test_a_replay_package_records_that_its_builder_checked_the_scenario_in_full():
    sc = rl.scenario(fixtures=SEARCH_FIXTURES)
    manifest, events = rl.source_run([("docs.search", 1, rl.search_request("rotate signing keys"))])
    meta = rl.replay_package(sc, manifest, events).json("replay.json")
    assert meta["scenario_checked"] == {"revision": CHECK_REVISION, "scenario": sc.digest}
    with pytest.raises(PackageError, match=r"fixtures.json\[0\]: fixture 'f-padded'.request: is not normalized"):
        build_scenario({**{n: json.loads(d) for n, d in sc.files.items()}, "fixtures.json": [UNNORMALIZED]})


def test_a_package_without_the_check_record_is_checked_in_full_and_an_unnormalized_fixture_refused():
    with pytest.raises(PackageError, match=r"fixture 'f-padded'.request: is not normalized under docs.search"):
        load_replay(Package.from_wire(_unchecked_replay("none").to_wire(), REPLAY_FORMAT))
    # a record made under another check revision counts for nothing: checked in full again
    with pytest.raises(PackageError, match=r"fixture 'f-padded'.request: is not normalized"):
        load_replay(_unchecked_replay("stale"))


def test_a_check_record_naming_another_scenario_is_refused():
    with pytest.raises(PackageError, match=r"replay.json: scenario_checked names scenario .* the package holds"):
        load_replay(_unchecked_replay("other"))


def test_a_forged_check_record_cannot_make_an_unnormalized_fixture_answer(live_access):
    # The record skips re-normalizing fixture requests, nothing else: the fixture's key is still the digest
    # of its own request, which no normalized call can have, so the call misses and the run stops.
    _out, log = replay(_unchecked_replay("forged"))
    (missing,) = kinds(log, "fixture.missing")
    assert "unrecorded request" in missing["reason"]
    assert missing["request_digest"] == digest_json(rl.search_request("rotate signing keys"))
    assert kinds(log, "tool.result") == []
    assert final(log)["state"] == "incomplete_test_world"
    assert live_access.calls == []


def test_the_unrecorded_status_lookup_of_seed_000_stops_as_incomplete_test_world(live_access):
    _out, log = story("run-000-recorded", "docs-research")

    (missing,) = kinds(log, "fixture.missing")
    assert missing["tool"] == "status.lookup"
    assert missing["contract_revision"] == 2
    assert missing["request_digest"] == digest_json({"request_id": "req-7781"})
    assert missing["world_revision"] == 0
    assert missing["checkpoint_id"] in {e["id"] for e in kinds(log, "checkpoint")}
    assert "never recorded" in missing["reason"]
    assert final(log)["state"] == "incomplete_test_world"
    assert [r["outcome"] for r in kinds(log, "tool.result")] == ["ok"]  # the docs search, and nothing after
    assert live_access.calls == []


def _docs_research_excluding_status() -> Package:
    files = {name: json.loads(data) for name, data in SEEDS["docs-research"].files.items()}
    files["scenario.json"]["version"] = 2
    files["scenario.json"]["excluded_tools"] = [{"tool": "status.lookup", "reason": "status is out of scope"}]
    return build_scenario(files)


def test_it_goes_on_past_an_excluded_tool_and_leaves_the_claims_resting_on_it_unevaluated(live_access):
    out, log = story("run-000-recorded", None, scenario_pkg=_docs_research_excluding_status())

    assert kinds(log, "fixture.missing") == []
    assert final(log)["state"] == "completed"
    (scope,) = kinds(log, "replay.scope")
    assert scope["uncovered"] == ["status.lookup: excluded: status is out of scope"]  # once, not also "no fixture"
    search, status = kinds(log, "tool.result")
    assert search["outcome"] == "ok" and "excluded" not in search
    assert status["outcome"] == "unknown" and status["blob"] is None and status["evaluated"] is False
    assert status["origin"] == "fixture" and status["absent"] == {"body": "not_applicable"}
    assert status["excluded"] == {"tool": "status.lookup", "reason": "status is out of scope"}
    (call,) = [c for c in kinds(log, "tool.call") if c["tool"] == "status.lookup"]
    assert status["call_id"] == call["id"] and call["request_digest"] == digest_json({"request_id": "req-7781"})
    (claim,) = kinds(log, "account.claim")
    assert claim["supports"] == [search["id"], status["id"]]
    assert claim["unevaluated"]["tools"] == ["status.lookup"]
    assert claim["unevaluated"]["supports"] == [status["id"]]
    out_run = out.manifest["run"]
    assert [f.code for f in check_events(out_run, log)] == []  # no dangling reference, no finding
    assert live_access.calls == []


# --- the stories --------------------------------------------------------------------------------------------


def test_seed_001_rerun_delivers_once_in_the_replay_namespace_and_never_uses_the_historical_approval(live_access):
    out, log = story("run-001-recorded", "email-delivery")

    deliveries = [t for t in kinds(log, "world.transition") if t["resource"].startswith("mailbox:")]
    assert len(deliveries) == 1
    assert deliveries[0]["revision_before"] == 41 and deliveries[0]["revision_after"] == 42
    (intent,) = kinds(log, "effect.intent")
    assert intent["namespace"] == "replay:email-delivery-w1"
    assert intent["idempotency_key"].startswith("replay:email-delivery-w1:")
    assert "send:dr-5501:r3" not in intent["idempotency_key"]
    assert intent["historical_intent"] == "e-001-intent-send"
    historical = [a for a in kinds(log, "approval.recorded") if a["origin"] == "historical"]
    assert len(historical) == 1 and historical[0]["run"] == "run-001-recorded"
    used = {intent["approval_id"]} | {i for d in kinds(log, "policy.decision") for i in d["input_ids"]}
    assert historical[0]["id"] not in used
    approval = log[[e["id"] for e in log].index(intent["approval_id"])]
    assert (approval["origin"], approval["run"], approval["environment"]) == (
        "simulated",
        out.manifest["run"]["id"],
        "fixture",
    )
    (execution,) = kinds(log, "effect.execution")
    assert (execution["outcome"], execution["connection"]) == ("acknowledged", "fixture:email.send")
    state = final(log)
    assert state["state"] == "completed"
    assert all(i["held"] for i in state["invariants"])
    assert [f.code for f in check_events(out.manifest["run"], log) if f.severity == "error"] == []
    assert live_access.calls == []


def test_seed_003_reconstruction_shows_the_broken_edge():
    out, log = story("run-003-review-request", None, mode="reconstruction")

    codes = {f.code for f in check_events(out.manifest["run"], log)}
    assert "LIN001" in codes
    assert codes == {"LIN001", "LIN003", "LIN008", "LIN013"}
    assert log[0]["kind"] == "replay.scope" and log[0]["scope"] == "reconstruction"
    assert [e["id"] for e in log[1:]] == [e["id"] for e in BUNDLES["run-003-review-request"].events]


def test_a_replay_judges_recorded_admissions_by_the_recorded_runs_compatibility_rules():
    # Story 003 with a declared rule cited by the focused admission: workspace two's artifact is at another tree, so
    # the rule does not hold. The replay must say that, not that no policy declares the rule.
    b = BUNDLES["run-003-review-request"]
    manifest = json.loads(json.dumps(b.manifest))
    manifest["run"]["compatibility_rules"] = {"pure-focused": {"tree": "identical"}}
    events = [dict(e) for e in b.events]
    for event in events:
        if event["kind"] == "evidence.admitted" and event["purpose"] == "validation:focused":
            event["compatibility"] = {"rule": "pure-focused", "rationale": "same patch"}
    data = b"".join(canonical_json(e) + b"\n" for e in events)
    for mode, scenario in (("reconstruction", None), ("rerun", SEEDS["coding-review-request"])):
        out, log = replay(rl.replay_package(scenario, manifest, data, blobs=b.blobs, mode=mode))
        assert out.manifest["run"]["compatibility_rules"] == {"pure-focused": {"tree": "identical"}}
        lin001 = [f.message for f in check_events(out.manifest["run"], log) if f.code == "LIN001"]
        if mode == "reconstruction":
            assert lin001 and all("rule pure-focused does not hold (tree: receipt" in m for m in lin001)


def test_a_reconstruction_of_a_live_run_is_judged_as_that_run():
    out, log = story("run-001-recorded", None, mode="reconstruction")
    assert check_events(out.manifest["run"], log) == []  # no LIN005/LIN007 for the run's own live approval


def test_seed_003_rerun_with_recorded_decisions_and_current_policy_denies_the_request():
    _out, log = story("run-003-review-request", "coding-review-request")

    decisions = kinds(log, "policy.decision")
    assert decisions[-1]["outcome"] == "deny"
    assert decisions[-1]["policy_revision"] == "review-policy@8"
    assert any("validation:broad" in r for r in decisions[-1]["reasons"])
    assert kinds(log, "effect.intent") == []
    assert [t for t in kinds(log, "world.transition") if t["resource"].startswith("review-service:")] == []
    assert final(log)["state"] == "stopped"


def test_seed_003_under_the_recordings_own_policy_reaches_the_lineage_gate():
    _out, log = story(
        "run-003-review-request", "coding-review-request", "counterfactual", {"policy": "review-policy@7"}
    )
    # review-policy@7 allows on one purpose and has no gate: the request opens, the lineage checker flags it.
    assert len(kinds(log, "effect.intent")) == 1


def test_the_final_gate_denies_an_intent_whose_evidence_comes_from_another_workspace():
    files = {n: json.loads(d) for n, d in SEEDS["coding-review-request"].files.items()}
    files["policy.json"]["revisions"]["review-policy@8"]["require_all"] = False  # only the gate stands in the way
    sc = build_scenario(files)
    _out, log = story("run-003-review-request", None, scenario_pkg=sc)

    deny = kinds(log, "policy.decision")[-1]
    assert deny["outcome"] == "deny" and deny["gate"] == "lineage"
    assert any(r.startswith("LIN001:") for r in deny["reasons"])
    assert kinds(log, "effect.intent") == []


def test_seed_003_careful_decider_reruns_the_broad_suite_in_workspace_two_and_stops_without_a_request():
    _out, log = story("run-003-review-request", "coding-review-request", "counterfactual", {"decider": "careful"})

    ws2 = [r for r in kinds(log, "command.receipt") if r["workspace_id"] == "ws-2"]
    assert [r["command"] for r in ws2] == ["pytest -q tests/test_adapter.py", "pytest -q tests"]
    broad = ws2[-1]
    assert broad["results"]["failed"] == 1 and broad["completion"] == "completed"
    assert kinds(log, "effect.intent") == []
    proposals = [p["proposal"].get("tool") for p in kinds(log, "model.proposal")]
    assert proposals.count("review.create_request") == 1  # proposed in the recording; never requested
    state = final(log)
    assert state["state"] == "stopped"
    assert "art-2" in state["reason"] and "no request" in state["reason"]
    assert "test_adapter_roundtrip_preserves_cursor" in state["reason"]


# --- faults -------------------------------------------------------------------------------------------------


def _email_with(**meta):
    files = {n: json.loads(d) for n, d in SEEDS["email-delivery"].files.items()}
    files["scenario.json"].update(meta)
    return build_scenario(files)


def test_a_fault_the_contract_does_not_support_is_refused_when_the_scenario_is_built():
    with pytest.raises(PackageError, match="does not support fault stage after_world_mutation"):
        _email_with(faults=[{"tool": "email.draft_get", "stage": "after_world_mutation"}])
    with pytest.raises(PackageError, match=r"email.draft_update revision 3 does not support fault stage"):
        _email_with(faults=[{"tool": "email.draft_update", "stage": "after_local_commit"}])


def test_a_counterfactual_fault_outside_the_contract_is_refused_before_anything_runs():
    with pytest.raises(ReplayError, match="does not support fault stage"):
        story("run-001-recorded", "email-delivery", "counterfactual", {"fault": "email.draft_get:before_receipt"})


@pytest.mark.parametrize(
    ("stage", "outcome", "deliveries"),
    [
        ("before_send", "failed", 0),
        ("after_acceptance", "lost_response", 1),
        ("after_world_mutation", "unknown", 1),
        ("before_receipt", "lost_response", 1),
        ("during_response", "unknown", 1),
        ("after_local_commit", "acknowledged", 1),
    ],
)
def test_each_fault_stage_of_a_send_leaves_the_world_as_that_stage_would(stage, outcome, deliveries):
    _out, log = story("run-001-recorded", "email-delivery", "counterfactual", {"fault": f"email.send:{stage}"})
    (execution,) = kinds(log, "effect.execution")
    assert (execution["stage"], execution["outcome"]) == (stage, outcome)
    assert len([t for t in kinds(log, "world.transition") if t["resource"].startswith("mailbox:")]) == deliveries
    if stage == "after_local_commit":
        assert final(log)["state"] == "interrupted"


def test_the_careful_decider_asks_for_status_after_an_unknown_outcome_and_does_not_resend():
    sc = _email_with(faults=[{"tool": "email.send", "stage": "after_world_mutation"}])
    _out, log = story("run-001-recorded", None, "counterfactual", {"decider": "careful"}, scenario_pkg=sc)

    assert [e["outcome"] for e in kinds(log, "effect.execution")] == ["unknown"]
    status = [c for c in kinds(log, "tool.call") if c["tool"] == "email.delivery_status"]
    assert len(status) == 1
    assert (
        next(t for t in kinds(log, "world.transition") if t["resource"].startswith("mailbox:"))["revision_after"] == 42
    )
    assert final(log)["state"] == "completed"


def test_the_careful_decider_resends_when_the_status_says_not_found_and_the_provider_keeps_it_to_one_delivery():
    # The provider accepts the send, loses the response, and shows the delivery only 30 s later: the status read
    # right after finds nothing, so the careful agent resends, under the same intent and idempotency key, and the
    # simulated provider, which already holds the effect for that key, rejects the second attempt.
    sc = _email_with(
        faults=[{"tool": "email.send", "stage": "after_acceptance"}],
        delays={"email.draft_update": 0.5, "email.send": 30},
    )
    _out, log = story("run-001-recorded", None, "counterfactual", {"decider": "careful"}, scenario_pkg=sc)

    first, second = kinds(log, "effect.execution")
    (status_call,) = [c for c in kinds(log, "tool.call") if c["tool"] == "email.delivery_status"]
    (status,) = [r for r in kinds(log, "tool.result") if r["call_id"] == status_call["id"]]
    assert (first["attempt_no"], first["outcome"]) == (1, "lost_response")
    assert (status["outcome"], status["fixture"]) == ("not_found", "status-before")
    assert first["seq"] < status_call["seq"] < second["seq"], "status is asked between the send and the resend"
    assert (second["attempt_no"], second["outcome"], second["intent_id"]) == (2, "rejected", first["intent_id"])
    assert first["idempotency_key"] in second["reason"]
    deliveries = [t for t in kinds(log, "world.transition") if t["resource"].startswith("mailbox:")]
    assert [t["revision_after"] for t in deliveries] == [42]
    assert final(log)["state"] == "completed"
    assert {i["id"]: i["held"] for i in final(log)["invariants"]}["one-delivery"] is True


def test_a_failed_send_is_not_resent_blind():
    sc = _email_with(faults=[{"tool": "email.send", "stage": "before_send"}])
    _out, log = story("run-001-recorded", None, "counterfactual", {"decider": "careful"}, scenario_pkg=sc)
    assert [e["outcome"] for e in kinds(log, "effect.execution")] == ["failed"]
    assert [t for t in kinds(log, "world.transition") if t["resource"].startswith("mailbox:")] == []


def test_a_visibility_delay_makes_the_recorded_read_see_the_stale_draft():
    _out, log = story("run-001-recorded", "email-delivery", "counterfactual", {"delay.email.draft_update": "30"})
    gets = [r for r in kinds(log, "tool.result") if r.get("fixture", "").startswith("draft-get")]
    assert [g["fixture"] for g in gets] == ["draft-get-r2"]
    # The audience evidence admitted for the send now describes revision 2 (the broad list) while the send, once
    # the held transition became visible, acted on revision 3: the unsafe branch the seed describes, without
    # anything real being sent.
    (admission,) = kinds(log, "evidence.admitted")
    observation = next(e for e in log if e["id"] == admission["observation_id"])
    assert observation["source"] == gets[0]["id"]
    draft = [t for t in kinds(log, "world.transition") if t["resource"] == "mail:draft/dr-5501"]
    assert [t["revision_after"] for t in draft] == [1, 2, 3]
    assert len([t for t in kinds(log, "world.transition") if t["resource"].startswith("mailbox:")]) == 1


# --- time, identity, determinism ----------------------------------------------------------------------------


def test_logical_time_moves_only_by_explicit_events_and_wall_time_is_the_launch_instant():
    _out, log = story("run-003-review-request", "coding-review-request")
    moments = [e["at"]["logical"] for e in log]
    changes = [i for i in range(1, len(log)) if moments[i] != moments[i - 1]]
    assert all(log[i]["kind"] == "clock.advanced" for i in changes)
    assert {e["at"]["wall"] for e in log} == {"2026-12-02T12:00:00Z"}
    timeout = [c for c in kinds(log, "clock.advanced") if c["cause"] and "900" in c.get("reason", "")]
    assert len(timeout) == 1


CAREFUL_REPLAY_DIGEST = """
from n17q_engine.canonical import canonical_json, digest_bytes
from tests.engine import replaylib as rl
from tests.engine.fresh import run_fresh
from tests.engine.test_replay import BUNDLES, SEEDS, replay
b = BUNDLES["run-003-review-request"]
events = b"".join(canonical_json(e) + b"\\n" for e in b.events)
pkg = rl.replay_package(SEEDS["coding-review-request"], b.manifest, events, blobs=b.blobs,
                        mode="counterfactual", vary={"decider": "careful"})
print(digest_bytes(replay(pkg)[0].to_wire()))
"""


def test_one_package_replayed_in_two_processes_gives_byte_identical_logs():
    """Two interpreters with different string-hash seeds: set order, interning and caches all differ."""
    first = run_fresh(CAREFUL_REPLAY_DIGEST, hash_seed=1)
    second = run_fresh(CAREFUL_REPLAY_DIGEST, hash_seed=2)
    assert first == second and first.startswith("sha256:")


def test_the_same_package_in_the_sandbox_twice_gives_byte_identical_logs():
    b = BUNDLES["run-001-recorded"]
    events = b"".join(canonical_json(e) + b"\n" for e in b.events)
    pkg = rl.replay_package(SEEDS["email-delivery"], b.manifest, events, blobs=b.blobs)
    outputs = []
    for _ in range(2):
        result = run_sandboxed(
            "n17q_engine.replay:sandbox_main", pkg.to_wire(), allow_degraded=False, limits=Limits(), timeout_s=60
        )
        assert result.ok, result.stderr
        assert result.isolation == "netns"
        outputs.append(ReplayOutput.from_wire(result.output))
    assert outputs[0].events == outputs[1].events
    scope = next(iter_output_events(outputs[0]))
    assert (scope["kind"], scope["isolation"]) == ("replay.scope", "netns")
    assert outputs[0].manifest["run"]["isolation"] == "netns"


def test_a_replay_leaves_no_reference_cycles_behind():
    # The sandbox child replays with the cyclic collector off (replay.sandbox_main): what the engine drops must
    # be freed by reference counting alone, final gates included (each builds a lineage graph).
    import gc

    gc.collect()
    gc.disable()
    try:
        story("run-001-recorded", "email-delivery")  # the final gate allows the send
        story("run-003-review-request", "coding-review-request")  # ...and denies the request
        story("run-003-review-request", "coding-review-request", "counterfactual", {"decider": "careful"})
        story("run-001-recorded", "email-delivery", "counterfactual", {"fault": "email.send:after_local_commit"})
        story("run-000-recorded", "docs-research")  # stops on the missing status lookup
        story("run-003-review-request", None, mode="reconstruction")
        garbage = gc.collect()
    finally:
        gc.enable()
    assert garbage == 0


def test_the_sandbox_output_reads_back_exactly_and_a_changed_or_missing_byte_is_refused():
    out, _log = story("run-003-review-request", "coding-review-request", "counterfactual", {"decider": "careful"})
    assert out.blobs, "the careful rerun writes command output blobs"
    wire = out.to_wire()
    back = ReplayOutput.from_wire(wire)
    assert (back.manifest, back.events, back.blobs) == (out.manifest, out.events, out.blobs)
    assert back.to_wire() == wire
    flipped = bytearray(wire)
    flipped[-1] ^= 0x01  # the last blob's last byte
    for bad, why in [
        (bytes(flipped), "do not hash to it"),
        (wire[:-1], "do not hash to it"),  # the last blob comes up short
        (wire + b"\n", "bytes, the header accounts for"),
        (wire[1:], "does not start with"),
        (canonical_json({"manifest": out.manifest}), "does not start with"),
    ]:
        with pytest.raises(ReplayError, match=why):
            ReplayOutput.from_wire(bad)


def test_the_scope_note_is_computed_from_the_manifest():
    _out, log = story("run-000-recorded", "docs-research")
    scope = log[0]
    assert scope["kind"] == "replay.scope"
    assert scope["scenario"] == {"name": "docs-research", "version": 1}
    assert scope["recorded_between"] == ["2026-07-01T09:00:00Z", "2026-07-01T09:00:09Z"]
    assert "status.lookup revision 2: no fixture in this scenario version" in scope["uncovered"]
    _out, log = story("run-003-review-request", "coding-review-request")
    assert set(log[0]["synthetic"]) == {"broad-ws-2", "focused-ws-2", "get-request-none", "get-request-open"}


def test_every_replay_event_is_valid_bundle_vocabulary_and_imports_cleanly(tmp_path):
    from n17q_engine.bundle import iter_event_records

    out, _log = story("run-003-review-request", "coding-review-request", "counterfactual", {"decider": "careful"})
    root = out.write_bundle(tmp_path / "bundle")
    with open(root / "events.jsonl", "rb") as fh:
        records = list(iter_event_records(fh))
    assert len(records) == len(out.events.splitlines())
    assert all(e["origin"] == "fixture" for e in kinds([r.event for r in records], "tool.result"))


# --- packages -----------------------------------------------------------------------------------------------


def test_a_scenario_package_round_trips_through_a_directory_and_one_changed_byte_is_refused(tmp_path):
    pkg = SEEDS["email-delivery"]
    folder = pkg.write_dir(tmp_path / "pkg")
    assert read_package(folder, SCENARIO_FORMAT).digest == pkg.digest
    target = folder / "fixtures.json"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(PackageError, match=r"fixtures.json: digest mismatch"):
        read_package(folder, SCENARIO_FORMAT)


def test_a_file_the_manifest_does_not_list_is_refused(tmp_path):
    folder = SEEDS["docs-research"].write_dir(tmp_path / "pkg")
    (folder / "extra.py").write_text("import socket\n")
    with pytest.raises(PackageError, match=r"extra.py: in the package but not listed"):
        read_package(folder, SCENARIO_FORMAT)


@pytest.mark.parametrize("key", ["endpoint", "api_key", "password", "url"])
def test_a_package_cannot_carry_an_endpoint_or_a_credential(key):
    files = {n: json.loads(d) for n, d in SEEDS["docs-research"].files.items()}
    files["contracts.json"][0][key] = "https://api.example/" if key in ("endpoint", "url") else "s3cr3t"
    with pytest.raises(PackageError, match=f"{key}"):
        build_scenario(files)


def test_a_replay_package_tampered_in_transit_is_refused():
    b = BUNDLES["run-000-recorded"]
    events = b"".join(canonical_json(e) + b"\n" for e in b.events)
    pkg = rl.replay_package(SEEDS["docs-research"], b.manifest, events, blobs=b.blobs)
    wire = pkg.to_wire()
    assert Package.from_wire(wire, REPLAY_FORMAT).files == pkg.files

    name = "scenario/fixtures.json"
    raw = bytearray(wire)
    raw[wire.index(pkg.files[name]) + 10] ^= 0x20  # one byte of that file, where the wire form carries it
    with pytest.raises(PackageError, match=r"scenario/fixtures.json: digest mismatch"):
        Package.from_wire(bytes(raw), REPLAY_FORMAT)
    for bad, why in [
        (wire[:-1], r"source/manifest.json: the wire form does not hold its"),  # the last file comes up short
        (wire + b"x", r"1 bytes its header does not account for"),
        (wire[1:], r"wire form starts with"),
        (json.dumps({"package.json": pkg.manifest, "files": {}}).encode(), r"wire form starts with"),
    ]:
        with pytest.raises(PackageError, match=why):
            Package.from_wire(bad, REPLAY_FORMAT)


@pytest.mark.parametrize(
    ("mode", "vary", "message"),
    [
        ("counterfactual", {}, "exactly one declared variable"),
        ("counterfactual", {"decider": "careful", "policy": "review-policy@7"}, "exactly one declared variable"),
        ("rerun", {"decider": "careful"}, "changes nothing"),
        ("counterfactual", {"live": "1"}, "not a variable"),
    ],
)
def test_a_counterfactual_changes_exactly_one_declared_variable(mode, vary, message):
    b = BUNDLES["run-003-review-request"]
    events = b"".join(canonical_json(e) + b"\n" for e in b.events)
    with pytest.raises(PackageError, match=message):
        rl.replay_package(SEEDS["coding-review-request"], b.manifest, events, blobs=b.blobs, mode=mode, vary=vary)


def test_the_seed_script_writes_the_seed_packages(tmp_path, capsys):
    assert seed_scenarios.main([str(tmp_path)]) == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    assert written == ["coding-review-request@1", "docs-research@1", "email-delivery-race@1", "email-delivery@1"]
    printed = capsys.readouterr().out
    for folder in tmp_path.iterdir():
        assert read_package(Path(folder), SCENARIO_FORMAT).digest in printed


# --- the documented schema ---------------------------------------------------------------------------------------


def test_the_seed_packages_match_the_schema_in_the_docs():
    import jsonschema

    root = Path(__file__).resolve().parents[2]
    schema = json.loads((root / "docs" / "schemas" / "scenario-package-1.schema.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    defs = {
        "scenario.json": "scenario",
        "world.json": "world",
        "workspaces.json": "workspaces",
        "policy.json": "policy",
    }

    def check(value, name):
        jsonschema.validate(value, {**schema, "$ref": f"#/$defs/{name}"})

    for pkg in SEEDS.values():
        check(pkg.manifest, "manifest")
        for file, name in defs.items():
            check(json.loads(pkg.files[file]), name)
        for contract in json.loads(pkg.files["contracts.json"]):
            check(contract, "contract")
        for item in json.loads(pkg.files["fixtures.json"]):
            check(item, "fixture")
    b = BUNDLES["run-000-recorded"]
    events = b"".join(canonical_json(e) + b"\n" for e in b.events)
    replay_pkg = rl.replay_package(SEEDS["docs-research"], b.manifest, events, blobs=b.blobs)
    check(json.loads(replay_pkg.files["replay.json"]), "replay")


def test_a_sandboxed_replay_reports_progress_while_it_runs_and_the_log_does_not_change():
    calls = 300
    fixtures = [rl.fixture(f"f{i}", rl.search_request(f"query {i}"), {"hits": [f"doc {i}"]}) for i in range(calls)]
    manifest, events = rl.source_run([("docs.search", 1, {"query": f"query {i}"}) for i in range(calls)])
    pkg = rl.replay_package(rl.scenario(fixtures=fixtures), manifest, events)
    seen: list[dict] = []
    streamed = run_sandboxed(
        "n17q_engine.replay:sandbox_main",
        pkg.to_wire(),
        allow_degraded=False,
        limits=Limits(),
        timeout_s=60,
        on_event=seen.append,
    )
    quiet = run_sandboxed(
        "n17q_engine.replay:sandbox_main", pkg.to_wire(), allow_degraded=False, limits=Limits(), timeout_s=60
    )
    assert streamed.ok and quiet.ok, streamed.stderr
    progress = [e for e in seen if e["event"] == "replay.progress"]
    # one line after the scope note and first checkpoint, then one every PROGRESS_EVERY steps
    assert len(progress) >= 1 + (calls * 2) // 64 - 1
    counts = [p["events"] for p in progress]
    assert counts[0] == 2 and counts == sorted(counts) and len(set(counts)) == len(counts)
    assert all(p["logical"].endswith("Z") and p["checkpoint"].startswith("checkpoint") for p in progress)
    final_events = ReplayOutput.from_wire(streamed.output).events
    assert final_events == ReplayOutput.from_wire(quiet.output).events
    assert counts[-1] < final_events.count(b"\n")


@pytest.mark.parametrize(("stage", "first_outcome"), [("before_send", "error"), ("during_response", "unknown")])
def test_it_injects_a_fault_once_and_answers_the_retry_from_the_fixture(stage, first_outcome):
    # A fault is one event in the world's history, not a property of the request: the agent's retry of the same
    # request meets the world as the fault left it and gets the fixture's own answer.
    request = rl.search_request("rotate signing keys")
    sc = rl.scenario(fixtures=SEARCH_FIXTURES, faults=[{"tool": "docs.search", "stage": stage}])
    manifest, events = rl.source_run([("docs.search", 1, request), ("docs.search", 1, request)])

    _out, log = replay(rl.replay_package(sc, manifest, events))

    first, second = kinds(log, "tool.result")
    assert (first["outcome"], first.get("fault_stage")) == (first_outcome, stage)
    assert (second["outcome"], second.get("fault_stage"), second["fixture"]) == ("ok", None, "f-rotate")


# --- redirect-like results (seed 000, "The test suite attacked fallback paths") ------------------------------------

LIVE = "https://docs.live.example/api/search?q=rotate"


@pytest.mark.seed("000", "The test suite attacked fallback paths")
@pytest.mark.parametrize(
    ("case", "body", "said"),
    [
        ("3xx with a Location", {"status": 302, "headers": {"Location": LIVE}}, f"HTTP 302 to {LIVE}"),
        ("a location field", {"redirect_url": LIVE}, f"a redirect to {LIVE}"),
        ("a moved notice", f"This resource has moved permanently to {LIVE}.", f"a notice that it moved to {LIVE}"),
        (
            "a meta refresh",
            {"html": f'<html><head><meta http-equiv="refresh" content="0; url={LIVE}"></head></html>'},
            f"a meta refresh to {LIVE}",
        ),
    ],
)
def test_a_redirect_like_result_is_never_followed_and_stops_as_an_incomplete_test_world(live_access, case, body, said):
    request = rl.search_request("rotate signing keys")
    sc = rl.scenario(fixtures=[{**rl.fixture("f-moved", request), "response": {"outcome": "ok", "body": body}}])
    manifest, events = rl.source_run([("docs.search", 1, request)])

    _out, log = replay(rl.replay_package(sc, manifest, events))

    (missing,) = kinds(log, "fixture.missing")
    assert missing["reason"].startswith(f"redirect-like result: fixture f-moved answers with {said}"), case
    assert "a replay never follows it" in missing["reason"]
    assert missing["fixture"] == "f-moved" and missing["call_id"] == kinds(log, "tool.call")[0]["id"]
    assert final(log)["state"] == "incomplete_test_world"
    assert kinds(log, "tool.result") == [], "the redirect is not handed to the decider as an answer"
    assert live_access.calls == [], "no live client, no connection, no credential"
    assert live_access.new_network_modules() == set()


def test_a_search_hit_that_mentions_a_move_is_content_and_is_served():
    request = rl.search_request("rotate signing keys")
    hits = {"items": [{"title": "Key rotation", "snippet": f"this page moved to {LIVE}", "status": 200}]}
    sc = rl.scenario(fixtures=[{**rl.fixture("f-hit", request), "response": {"outcome": "ok", "body": hits}}])
    manifest, events = rl.source_run([("docs.search", 1, request)])
    _out, log = replay(rl.replay_package(sc, manifest, events))
    assert final(log)["state"] == "completed" and len(kinds(log, "tool.result")) == 1
