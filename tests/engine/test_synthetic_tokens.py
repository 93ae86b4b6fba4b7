"""Scoped synthetic tokens (issue 19, seed 000 "Credentials never entered replay artifacts"): the fixture world
issues each replay synthetic tokens for the scenario's grants; a call's scope identity is evidence, a call outside
the scope is denied by the world, and no material (real or synthetic) enters the replay's artifacts."""

from __future__ import annotations

import json
import re

import pytest

from n17q_engine.canonical import digest_bytes
from n17q_engine.package import PackageError, branch_basis, load_replay
from n17q_engine.world import SYNTHETIC_TOKEN_PREFIX, synthetic_token
from n17q_secrets.scanning import scan_text
from tests.engine import replaylib as rl
from tests.engine.test_replay import final, kinds, replay

TICKETS = {
    "tool": "tickets.update",
    "revision": 1,
    "effect_class": "mutation",
    "fields": {"account": {"type": "string"}, "ticket": {"type": "string"}, "status": {"type": "string"}},
    "transport": ["attempt_id"],
    "fault_stages": [],
    "outcomes": ["ok", "denied", "error"],
}
GRANTS = [{"id": "support-desk", "account": "acme", "tools": ["tickets.update"]}]
ACME = {"account": "acme", "ticket": "T-1", "status": "closed"}
GLOBEX = {"account": "globex", "ticket": "T-9", "status": "closed"}


def tickets_fixture(fid: str, request: dict) -> dict:
    out = rl.fixture(fid, request, {"ticket": request["ticket"], "status": "closed"}, tool="tickets.update")
    resource = f"ticket:{request['account']}/{request['ticket']}"
    out["transition"] = {
        "resource": resource,
        "revision_before": 1,
        "revision_after": 2,
        "change": {"status": "closed"},
    }
    return out


def tickets_scenario(**meta):
    return rl.scenario(
        contracts=[TICKETS],
        fixtures=[tickets_fixture("f-acme", ACME), tickets_fixture("f-globex", GLOBEX)],
        resources={"ticket:acme/T-1": (1, {"status": "open"}), "ticket:globex/T-9": (1, {"status": "open"})},
        **{"grants": GRANTS, "authorized_tools": {"tickets.update": "account"}, **meta},
    )


def tickets_package(replay_id: str = "replay-1", *, mode: str = "rerun", vary: dict | None = None, **meta):
    manifest, events = rl.source_run([("tickets.update", 1, ACME), ("tickets.update", 1, GLOBEX)])
    return rl.replay_package(tickets_scenario(**meta), manifest, events, replay_id=replay_id, mode=mode, vary=vary)


def tickets_replay(replay_id: str = "replay-1", **options):
    return replay(tickets_package(replay_id, **options))


def tickets_token(replay_id: str = "replay-1", **options) -> str:
    """The token the replay of `tickets_package(...)` is issued: from the seed and its branch basis."""
    basis = branch_basis(load_replay(tickets_package(replay_id, **options)))
    return synthetic_token("test-scenario/1", basis, "support-desk")


def test_a_call_inside_the_grant_records_its_scope_identity_and_one_outside_is_denied_by_the_world():
    _out, log = tickets_replay()
    acme, globex = kinds(log, "tool.call")
    fingerprint = digest_bytes(tickets_token().encode())
    assert acme["authorization"] == {
        "decision": "allowed",
        "grant": "support-desk",
        "account": "acme",
        "scope": {"account": "acme", "tools": ["tickets.update"]},
        "synthetic": True,
        "token_fingerprint": fingerprint,
    }
    assert globex["authorization"]["decision"] == "denied" and globex["authorization"]["account"] == "globex"
    assert (
        "no synthetic grant of this replay authorizes tickets.update on account 'globex'"
        in (globex["authorization"]["reason"])
    )
    results = {r["call_id"]: r for r in kinds(log, "tool.result")}
    assert results[acme["id"]]["outcome"] == "ok"
    assert results[globex["id"]]["outcome"] == "denied" and "fixture" not in results[globex["id"]]
    # the world changed for the authorized call only; the denial is an observation, not a missing fixture
    assert [t["resource"] for t in kinds(log, "world.transition")] == ["ticket:acme/T-1"]
    assert kinds(log, "fixture.missing") == [] and final(log)["state"] == "completed"
    (credential,) = kinds(log, "replay.scope")[0]["credentials"]
    assert credential == {
        "grant": "support-desk",
        "account": "acme",
        "tools": ["tickets.update"],
        "synthetic": True,
        "token_fingerprint": fingerprint,
    }


def test_the_token_never_enters_the_replays_artifacts_and_the_scanner_finds_nothing_in_them():
    out, _log = tickets_replay()
    token = tickets_token()
    everything = out.to_wire()
    assert token.encode() not in everything
    assert scan_text(everything.decode("utf-8")) == []


def test_a_synthetic_token_is_marked_synthetic_mimics_no_provider_and_no_scanner_takes_it_for_a_credential():
    token = synthetic_token("test-scenario/1", "replay-1", "support-desk")
    assert token.startswith(SYNTHETIC_TOKEN_PREFIX + "support-desk.")
    assert re.fullmatch(r"n17q-synthetic-token\.support-desk\.[0-9a-f]+", token)
    provider_markers = ("ghp_", "gho_", "github_pat_", "sk-", "sk_live", "xox", "AKIA", "ASIA", "eyJ", "AIza", "-----")
    assert not any(marker in token for marker in provider_markers)
    for text in (token, f'{{"token": "{token}"}}', f"export API_TOKEN={token}"):
        assert scan_text(text) == [], text
    # In an Authorization header only the header rule fires, never a provider's: whatever a bearer header holds is
    # masked, and the scanner keeps no allowlist by prefix (a real secret behind the prefix must still be caught).
    # (Ours, `bearer-token`, or the second reference's own HTTP bearer rule, `np-http-2`, which names it first.)
    assert {rule for rule, _value in scan_text(f"Authorization: Bearer {token}")} in ({"bearer-token"}, {"np-http-2"})


def test_tokens_derive_from_the_seed_and_the_branch_so_two_replays_of_one_branch_share_one_and_others_do_not():
    """Issue 36: the token is derived from the branch basis (the recorded run, the branch point, what the replay
    varies), never from the replay's own id: an agent handed it asks the same model requests in every replay of the
    branch. Another variation of the same run gets another token."""
    assert synthetic_token("s/1", "basis-1", "g") == synthetic_token("s/1", "basis-1", "g")
    assert synthetic_token("s/1", "basis-1", "g") != synthetic_token("s/1", "basis-2", "g")
    assert synthetic_token("s/1", "basis-1", "g") != synthetic_token("s/2", "basis-1", "g")
    first, _ = tickets_replay("replay-1")
    again, _ = tickets_replay("replay-1")
    other, log = tickets_replay("replay-2")
    assert first.events == again.events

    def without_package(out):  # the scope note's package digest names the replay (its package holds the replay id)
        return [{k: v for k, v in e.items() if k != "package"} for e in map(json.loads, out.events.splitlines())]

    assert without_package(first) == without_package(other)  # launched at the same instant: the same log
    assert first.manifest["run"]["replay"]["id"] != other.manifest["run"]["replay"]["id"]
    assert tickets_token("replay-2") == tickets_token("replay-1")
    assert kinds(log, "tool.call")[0]["authorization"]["token_fingerprint"] == digest_bytes(tickets_token().encode())
    varied = tickets_token("replay-1", mode="counterfactual", vary={"decider": "recorded"})
    assert varied != tickets_token("replay-1")
    _varied_out, varied_log = tickets_replay("replay-1", mode="counterfactual", vary={"decider": "recorded"})
    assert kinds(varied_log, "tool.call")[0]["authorization"]["token_fingerprint"] == digest_bytes(varied.encode())


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        ({"grants": [{"id": "g", "account": "", "tools": ["tickets.update"]}]}, "account must be a non-empty string"),
        ({"grants": [{"id": "g", "account": "acme", "tools": ["docs.search"]}]}, "tools must name tools of"),
        ({"authorized_tools": {"tickets.update": "tenant"}}, "'tenant' is not a semantic field"),
        ({"grants": [{"id": "g", "account": "acme", "tools": ["tickets.update"], "token": "x"}]}, "'token' is refused"),
    ],
)
def test_a_grant_that_is_ambiguous_or_carries_material_is_refused_when_the_scenario_is_built(meta, message):
    with pytest.raises(PackageError, match=message):
        tickets_scenario(**meta)
