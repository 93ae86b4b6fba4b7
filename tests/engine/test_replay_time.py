"""Time in a replay: freshness judged on the logical clock, time-dependent policy (quiet hours, approval expiry) on
either side of its boundary, and the scope of negative observations as fields, not free text."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from n17q_engine.bundle import BundleError, validate_event
from n17q_engine.package import Package, PackageError, build_scenario
from n17q_engine.world import parse_time
from tests.engine import replaylib as rl
from tests.engine.test_replay import SEEDS, final, kinds, replay, story

# --- freshness (seed 000) -----------------------------------------------------------------------------------------

DAY = 86_400


def _search_replay(
    *, freshness: dict[str, Any] | None, vary: dict[str, str] | None = None, recorded_at: str = rl.T0
) -> list[dict[str, Any]]:
    item = rl.fixture("f-search", rl.search_request("refund policy"), {"hits": ["doc-7"]})
    item["provenance"]["recorded_at"] = recorded_at
    item["provenance"]["source_revision"] = "docs@2026-06-30"
    meta: dict[str, Any] = {"freshness": freshness} if freshness is not None else {}
    sc = rl.scenario(fixtures=[item], **meta)
    manifest, events = rl.source_run([("docs.search", 1, {"query": "refund policy"})])
    mode = "counterfactual" if vary else "rerun"
    _out, log = replay(rl.replay_package(sc, manifest, events, mode=mode, vary=vary))
    return log


@pytest.mark.seed("000", "Credentials never entered replay artifacts")
def test_freshness_is_judged_on_the_logical_clock_and_a_stale_result_is_still_served_as_recorded():
    rule = {"docs.search": {"max_age_s": 30 * DAY}}
    (near,) = kinds(_search_replay(freshness=rule), "tool.result")
    a_year_on = _search_replay(freshness=rule, vary={"clock": "2027-07-01T09:00:00Z"})
    (late,) = kinds(a_year_on, "tool.result")

    assert near["freshness"]["state"] == "fresh"
    assert near["freshness"]["age_s"] == 0
    assert late["freshness"]["state"] == "stale"
    assert late["freshness"]["age_s"] == 365 * DAY and late["freshness"]["max_age_s"] == 30 * DAY
    assert late["freshness"]["evaluated_at"] == late["at"]["logical"] == "2027-07-01T09:00:00Z"
    assert "older than the 2.592e+06 s docs.search allows" in late["freshness"]["reason"]
    # what the recording pinned rides with the result: retrieval time, source revision, contract
    pinned = {k: late["freshness"][k] for k in ("recorded_at", "source_revision", "contract_revision", "connection")}
    assert pinned == {
        "recorded_at": rl.T0,
        "source_revision": "docs@2026-06-30",
        "contract_revision": 1,
        "connection": "docs-api",
    }
    # historically faithful and currently stale at once: the same outcome and the same bytes
    assert (late["outcome"], late["blob"]) == (near["outcome"], near["blob"])
    # the wall clock of the launch (2026-12-02) decides nothing: the near replay is fresh although that is months on
    assert parse_time(near["at"]["wall"]) > parse_time(rl.T0) + timedelta(days=30)


@pytest.mark.seed("000", "Credentials never entered replay artifacts")
def test_freshness_with_no_rule_or_a_recording_from_the_future_is_not_evaluated():
    (no_rule,) = kinds(_search_replay(freshness=None), "tool.result")
    assert no_rule["freshness"]["state"] == "not_evaluated"
    assert no_rule["freshness"]["reason"] == "this scenario version declares no freshness rule for docs.search"
    assert no_rule["freshness"]["age_s"] == 0  # the age is still shown

    later = _search_replay(freshness={"docs.search": {"max_age_s": DAY}}, recorded_at="2026-07-02T09:00:00Z")
    (res,) = kinds(later, "tool.result")
    assert res["freshness"]["state"] == "not_evaluated" and res["freshness"]["age_s"] == -DAY
    assert "could not have seen it" in res["freshness"]["reason"]


def test_a_freshness_rule_must_name_a_contract_and_a_positive_age():
    item = rl.fixture("f-search", rl.search_request("q"))
    with pytest.raises(PackageError, match=r"freshness\.mail\.send: no contract"):
        rl.scenario(fixtures=[item], freshness={"mail.send": {"max_age_s": 5}})
    with pytest.raises(PackageError, match=r"freshness\.docs\.search\.max_age_s: must be a positive number"):
        rl.scenario(fixtures=[item], freshness={"docs.search": {"max_age_s": 0}})


# --- time-dependent policy (seed 001) -------------------------------------------------------------------------------


def _email(rule_extra: dict[str, Any]) -> Package:
    files = {n: json.loads(d) for n, d in SEEDS["email-delivery"].files.items()}
    files["policy.json"]["revisions"]["mail-policy@3"]["rules"][0].update(rule_extra)
    return build_scenario(files)


def _last_decision(log: list[dict[str, Any]]) -> dict[str, Any]:
    return kinds(log, "policy.decision")[-1]


@pytest.mark.seed("001", "Time had to be controlled")
def test_an_approval_expiry_is_tested_on_either_side_of_its_boundary_without_waiting():
    # In run-001 the reviewer approves at 14:02:29.7 and the send is activated at 14:02:30.1: 0.4 s of scenario time.
    _out, inside = story("run-001-recorded", None, scenario_pkg=_email({"approval_expires_s": 0.4}))
    _out, past = story("run-001-recorded", None, scenario_pkg=_email({"approval_expires_s": 0.399}))

    allow = _last_decision(inside)
    assert allow["outcome"] == "allow" and len(kinds(inside, "effect.intent")) == 1
    assert (
        "mail-policy@3 rule [mailbox:]: the approval given at logical time 2026-06-10T14:02:29.700000Z binds for "
        "0.4 s (0.4 s)"
    ) in allow["reasons"]
    held = _last_decision(past)
    assert held["outcome"] == "needs_approval" and kinds(past, "effect.intent") == []
    assert held["reasons"] == [
        "mail-policy@3 rule [mailbox:]: the approval given at logical time 2026-06-10T14:02:29.700000Z expired after "
        "0.399 s (logical time 2026-06-10T14:02:30.100000Z, 0.4 s later)"
    ]


@pytest.mark.seed("001", "Time had to be controlled")
def test_quiet_hours_read_the_logical_clock_and_a_counterfactual_clock_flips_the_decision():
    sc = _email({"quiet_hours": {"start": "22:00", "end": "07:00"}})
    _out, day = story("run-001-recorded", None, scenario_pkg=sc)
    # The send is activated 2 min 30.1 s after the clock starts: one microsecond before 22:00, and at 22:00 exactly.
    _out, before = story(
        "run-001-recorded", None, "counterfactual", {"clock": "2026-06-10T21:57:29.899999Z"}, scenario_pkg=sc
    )
    _out, at = story(
        "run-001-recorded", None, "counterfactual", {"clock": "2026-06-10T21:57:29.900000Z"}, scenario_pkg=sc
    )

    assert _last_decision(day)["outcome"] == "allow" and final(day)["state"] == "completed"
    assert "mail-policy@3 rule [mailbox:]: outside quiet hours 22:00-07:00 UTC at logical time " in " ".join(
        _last_decision(day)["reasons"]
    )
    last = _last_decision(before)
    assert last["outcome"] == "allow" and last["at"]["logical"] == "2026-06-10T21:59:59.999999Z"
    denied = _last_decision(at)
    assert denied["outcome"] == "deny" and kinds(at, "effect.intent") == []
    assert denied["reasons"] == [
        "mail-policy@3 rule [mailbox:]: quiet hours 22:00-07:00 UTC; logical time 2026-06-10T22:00:00Z"
    ]
    # Same launch instant for all three: only the logical clock differs.
    assert {e["at"]["wall"] for e in day} == {e["at"]["wall"] for e in at}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"quiet_hours": {"start": "22:00", "end": "7:00"}}, r"quiet_hours\.end: must be HH:MM"),
        ({"quiet_hours": {"start": "22:00", "end": "22:00"}}, r"quiet_hours: start and end are the same minute"),
        ({"approval_expires_s": -1}, r"approval_expires_s: must be a positive number"),
    ],
)
def test_time_rules_of_a_policy_are_checked_when_the_scenario_loads(extra: dict[str, Any], message: str) -> None:
    with pytest.raises(PackageError, match=message):
        _email(extra)


# --- negative observations (seed 000) ---------------------------------------------------------------------------------


@pytest.mark.seed("000", "Unknown fixture data stayed unknown")
def test_an_empty_search_names_its_query_and_corpus_revision_and_a_not_found_its_window_and_world_state():
    empty = rl.fixture("f-empty", rl.search_request("refund policy"), {"hits": []}, outcome="empty")
    empty["response"]["negative"] = {"query": "refund policy", "corpus_revision": "public-docs@2026-06-30"}
    gone = rl.fixture("f-gone", rl.search_request("order 77"), {"hits": []}, outcome="not_found")
    gone["response"]["negative"] = {"resource": "order:77", "consistency_window_s": 30}
    bare = rl.fixture("f-bare", rl.search_request("nothing"), {"hits": []}, outcome="empty")
    sc = rl.scenario(fixtures=[empty, gone, bare], resources={"order:76": (3, {"id": 76})})
    manifest, events = rl.source_run(
        [("docs.search", 1, {"query": q}) for q in ("refund policy", "order 77", "nothing")]
    )
    _out, log = replay(rl.replay_package(sc, manifest, events))

    by_fixture = {r["fixture"]: r for r in kinds(log, "tool.result")}
    assert by_fixture["f-empty"]["negative"] == {
        "outcome": "empty",
        "declared": True,
        "query": "refund policy",
        "corpus_revision": "public-docs@2026-06-30",
    }
    assert by_fixture["f-gone"]["negative"] == {
        "outcome": "not_found",
        "declared": True,
        "resource": "order:77",
        "consistency_window_s": 30,
        "world_revision": 0,
        "resource_revision": None,
    }
    # a fixture that does not scope its negative says so: nothing is filled in
    assert by_fixture["f-bare"]["negative"] == {"outcome": "empty", "declared": False}


@pytest.mark.parametrize(
    ("outcome", "negative", "message"),
    [
        ("empty", {"query": "q"}, r"response\.negative\.corpus_revision: is required"),
        ("not_found", {"resource": "order:1", "consistency_window_s": -2}, r"consistency_window_s: must be a non-neg"),
        ("ok", {"query": "q", "corpus_revision": "c"}, r"response\.negative: scopes a negative observation"),
        ("empty", {"query": "q", "corpus_revision": "c", "note": "x"}, r"response\.negative\.note: unknown key"),
    ],
)
def test_a_negative_scope_is_checked_against_its_outcome(outcome: str, negative: dict[str, Any], message: str) -> None:
    item = rl.fixture("f", rl.search_request("q"), {"hits": []}, outcome=outcome)
    item["response"]["negative"] = negative
    with pytest.raises(PackageError, match=message):
        rl.scenario(fixtures=[item])


def test_a_bundle_refuses_a_result_whose_freshness_state_is_not_one_the_vocabulary_knows():
    event = {
        "seq": 1,
        "id": "r1",
        "kind": "tool.result",
        "at": {"logical": rl.T0, "wall": rl.T0},
        "attempt": None,
        "call_id": "c1",
        "origin": "fixture",
        "outcome": "ok",
        "blob": None,
        "absent": {},
    }
    assert (
        validate_event({**event, "freshness": {"state": "stale", "age_s": 3}}, line=1)["freshness"]["state"] == "stale"
    )
    with pytest.raises(BundleError, match=r"field freshness\.state"):
        validate_event({**event, "freshness": {"state": "old"}}, line=1)


@pytest.mark.seed("000", "Credentials never entered replay artifacts")
def test_a_stale_result_says_so_in_its_trace_row_and_a_fresh_or_unjudged_one_does_not():
    from runs.trace import row_summary

    rule = {"docs.search": {"max_age_s": 30 * DAY}}
    (near,) = kinds(_search_replay(freshness=rule), "tool.result")
    (late,) = kinds(_search_replay(freshness=rule, vary={"clock": "2027-07-01T09:00:00Z"}), "tool.result")
    (unjudged,) = kinds(_search_replay(freshness=None), "tool.result")
    assert ("bad", "stale") in row_summary(late, tool="docs.search")[1]
    assert all(("bad", "stale") not in row_summary(e, tool="docs.search")[1] for e in (near, unjudged))
