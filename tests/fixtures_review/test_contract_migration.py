"""`migrate_fixtures SCENARIO@V --to-revision R`: structural changes minted as new fixture revisions in a new
scenario version, meaning-bearing ones staged for four-eyes review, old replays pinned (seed 000, "When a tool
contract changed…"; docs/contract-migration.md)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError

from fixtures_review.models import ContractRevision, FixtureVersion, ScenarioVersion, StagedRecording
from fixtures_review.scenarios import loaded_scenario, scenario_bodies, scenario_package
from fixtures_review.services import ReviewRefused, recording_approve, scenario_version_mint
from n17q_engine import canonical
from n17q_engine.contract_migration import payload_digest
from replays.models import Replay
from runs.models import Event, Run

pytestmark = pytest.mark.django_db

# docs.search revision 2: `query` is now `q`, hits come under `results`, and an empty search is reported as
# not_found (a change of what the service says: always reviewed).
DOCS_SEARCH_2 = {
    "tool": "docs.search",
    "revision": 2,
    "effect_class": "read",
    "fields": {
        "q": {"type": "string", "canonical": ["strip"]},
        "corpus": {"type": "string", "default": "public-docs"},
        "limit": {"type": "integer", "default": 5},
    },
    "transport": ["attempt_id", "trace_id"],
    "fault_stages": ["before_send", "during_response"],
    "outcomes": ["ok", "not_found", "error", "timeout"],
    "migrations_from": {
        "1": [
            {"op": "rename_field", "from": "query", "to": "q"},
            {"op": "move", "from": "hits", "to": "results"},
            {"op": "map_outcome", "from": "empty", "to": "not_found", "note": "the v2 API says 404 for no hits"},
        ]
    },
}
EMPTY_SEARCH = {
    "tool": "docs.search",
    "contract_revision": 1,
    "request": {"query": "no such page", "corpus": "public-docs", "limit": 5},
    "response": {"outcome": "empty", "body": {"hits": []}, "absent": {}},
    "provenance": {
        "recorded_at": "2026-07-01T09:00:05Z",
        "source_revision": "docs@2026-07-01",
        "connection": "docs-api",
        "synthetic": False,
        "fidelity_note": None,
    },
}


def declare(tmp_path, contract=DOCS_SEARCH_2, user=None, capsys=None) -> dict:
    path = tmp_path / f"contract-{contract['revision']}.json"
    path.write_text(json.dumps(contract))
    call_command("declare_contract", str(path), "--json", *(["--user", user] if user else []))
    return json.loads(capsys.readouterr().out) if capsys else {}


def migrate(capsys, *args) -> dict:
    call_command("migrate_fixtures", *args, "--json")
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def research(seed_scenarios, role_user, tmp_path, capsys):
    """docs-research@2: the seed's search fixture and an empty search; docs.search revision 2 declared by dana."""
    v2 = scenario_version_mint(base=seed_scenarios["docs-research"], add_fixtures=[EMPTY_SEARCH], user=None, source="t")
    role_user("reviewer", "dana"), role_user("reviewer", "mo"), role_user("reviewer", "rory")
    assert declare(tmp_path, user="dana", capsys=capsys)["contract"] == "docs.search@2"
    return v2


def held() -> tuple[int, int, int, int]:
    return (
        ScenarioVersion.objects.count(),
        StagedRecording.objects.count(),
        FixtureVersion.objects.count(),
        ContractRevision.objects.count(),
    )


def test_it_mints_structural_changes_as_new_fixture_revisions_keeping_the_original_payload_digest(research, capsys):
    before = {f["id"]: f for f in research.fixture_items}
    out = migrate(capsys, "docs-research@2", "--to-revision", "2", "--user", "mo")
    assert (out["scenario"], out["based_on"], out["tool"], out["path"]) == (
        "docs-research@3",
        "docs-research@2",
        "docs.search",
        [1, 2],
    )
    (moved,) = out["migrated"]
    assert moved["from"] == "search-rotate-keys"
    assert moved["operations"] == ["rename_field query → q", "move hits → results"]
    assert moved["payload_digest"] == payload_digest(before["search-rotate-keys"])

    v3 = ScenarioVersion.objects.get(name="docs-research", version=3)
    assert (v3.source, v3.based_on_id) == ("migration", research.pk)
    loaded = loaded_scenario(v3)
    assert loaded.contracts.get("docs.search").revision == 2
    assert loaded.contracts.get("docs.search").migrations_from[1][0]["op"] == "rename_field"  # the declaration travels
    (fixture,) = [f for f in v3.fixture_items if f["tool"] == "docs.search"]
    assert fixture["id"] == moved["fixture"] and fixture["contract_revision"] == 2
    assert fixture["request"] == {"q": "rotate signing keys", "corpus": "public-docs", "limit": 5}
    assert fixture["response"]["body"]["results"] == before["search-rotate-keys"]["response"]["body"]["hits"]
    origin = fixture["provenance"]["migrated_from"]
    assert (origin["fixture"], origin["contract_revision"]) == ("search-rotate-keys", 1)
    assert origin["payload_digest"] == moved["payload_digest"]
    assert fixture["provenance"]["recorded_at"] == before["search-rotate-keys"]["provenance"]["recorded_at"]
    record = v3.scenario_json["contract_migrations"]
    assert record == [
        {
            "tool": "docs.search",
            "from_revision": 1,
            "to_revision": 2,
            "based_on": {"name": "docs-research", "version": 2},
            "migrated": [moved["fixture"]],
            "for_review": [next(i for i in before if i != "search-rotate-keys")],
        }
    ]
    # The version migrated is untouched: same bytes, same fixtures, still revision 1.
    research.refresh_from_db()
    assert scenario_package(research).digest == research.digest
    assert loaded_scenario(research).contracts.get("docs.search").revision == 1


def test_a_meaning_bearing_change_is_staged_for_four_eyes_review_instead_of_minted(research, client, capsys):
    empty_id = next(f["id"] for f in research.fixture_items if f.get("response", {}).get("outcome") == "empty")
    out = migrate(capsys, "docs-research@2", "--to-revision", "2", "--user", "mo")
    (staged,) = out["staged"]
    assert staged["from"] == empty_id and staged["blockers"] == []
    assert staged["reasons"] == ["map_outcome empty → not_found (revision 2) changes what the service says"]
    v3 = ScenarioVersion.objects.get(name="docs-research", version=3)
    assert all(f["id"] != empty_id and f.get("response", {}).get("outcome") != "not_found" for f in v3.fixture_items)
    assert any(empty_id in line and "awaits review" in line for line in v3.scenario_json["uncovered"])

    rec = StagedRecording.objects.get(public_id=staged["staged"])
    assert (rec.origin, rec.state, rec.contract_revision) == ("contract-migration", "staged", 2)
    assert rec.outcome == "not_found"
    assert rec.request["args"] == {"q": "no such page", "corpus": "public-docs", "limit": 5}
    assert rec.migration is not None
    assert rec.migration["fixture"] == empty_id and rec.migration["minted"] == "docs-research@3"
    client.force_login(_user("rory"))
    page = client.get(f"/review/{rec.public_id}/").content.decode()
    assert "Contract migration" in page and "map_outcome empty → not_found (revision 2) changes what" in page
    assert rec.migration["migrated_from"]["payload_digest"] in page
    # Four eyes: neither who ran the migration nor who declared the revision may approve what it staged.
    with pytest.raises(ReviewRefused, match="four eyes: you ran the contract migration"):
        recording_approve(recording=rec, user=_user("mo"))
    with pytest.raises(ReviewRefused, match="four eyes: you declared the contract revision"):
        recording_approve(recording=rec, user=_user("dana"))
    rec = recording_approve(recording=rec, user=_user("rory"))
    v4 = rec.scenario_version
    assert v4 is not None and v4.ref == "docs-research@4"
    (approved,) = [f for f in v4.fixture_items if f["response"]["outcome"] == "not_found"]
    assert approved["contract_revision"] == 2 and approved["request"]["q"] == "no such page"
    # Promoted, the body is held by digest (seed 001) and resolves to the reviewed body through the one resolver.
    assert "body" not in approved["response"]
    assert approved["response"]["body_digest"] == canonical.digest_json({"results": []})
    assert scenario_bodies(v4).body(approved).value == {"results": []}
    assert approved["provenance"]["migrated_from"]["fixture"] == empty_id
    assert approved["provenance"]["migrated_from"]["payload_digest"] == payload_digest(
        next(f for f in research.fixture_items if f["id"] == empty_id)
    )
    loaded_scenario(v4)


def _user(name):
    from django.contrib.auth import get_user_model

    return get_user_model().objects.get(username=name)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["docs-research@9", "--to-revision", "2"], "no scenario version docs-research@9"),
        (["docs-research", "--to-revision", "2"], "name a scenario version as NAME@VERSION"),
        (["docs-research@2", "--to-revision", "two"], "--to-revision: a positive integer"),
        (["docs-research@2", "--to-revision", "1", "--tool", "docs.search"], "revision 1 is not newer than the pinned"),
        (["docs-research@2", "--to-revision", "3"], "no revision 3 is declared for any tool docs-research@2 pins"),
        (["docs-research@2", "--to-revision", "3", "--tool", "docs.search"], "no revision 3 is declared"),
        (["docs-research@2", "--to-revision", "2", "--tool", "web.fetch"], "pins no contract for 'web.fetch'"),
        (["docs-research@1", "--to-revision", "2"], "docs-research@1 is not the latest version"),
    ],
)
def test_a_migration_that_cannot_be_made_is_one_line_and_writes_nothing(research, args, says):
    before = held()
    with pytest.raises(CommandError) as err:
        call_command("migrate_fixtures", *args, "--json")
    message = str(err.value)
    assert says in message and "\n" not in message
    assert held() == before


def test_a_revision_with_no_declared_path_from_the_pinned_one_is_refused(seed_scenarios, tmp_path):
    undeclared = {k: v for k, v in DOCS_SEARCH_2.items() if k != "migrations_from"}
    declare(tmp_path, undeclared)
    before = held()
    with pytest.raises(CommandError, match=r"--to-revision: .*no declared path from docs\.search revision 1 to 2"):
        call_command("migrate_fixtures", "docs-research@1", "--to-revision", "2")
    assert held() == before


def test_migrating_the_same_version_twice_is_refused(research, capsys):
    migrate(capsys, "docs-research@2", "--to-revision", "2")
    before = held()
    with pytest.raises(CommandError, match=r"docs-research@2 was already migrated to docs\.search revision 2"):
        call_command("migrate_fixtures", "docs-research@2", "--to-revision", "2")
    assert held() == before


def test_a_declared_revision_never_changes_under_its_number(research, tmp_path, capsys):
    assert declare(tmp_path, capsys=capsys)["created"] is False  # the same content again: the one held
    changed = {**DOCS_SEARCH_2, "outcomes": ["ok", "not_found"]}
    with pytest.raises(CommandError, match=r"docs\.search revision 2 is already declared with digest"):
        declare(tmp_path, changed)
    bad = {**DOCS_SEARCH_2, "migrations_from": {"1": [{"op": "rename_field", "from": "query", "to": "text"}]}}
    with pytest.raises(CommandError, match=r"migrations_from\.1\[0\]\.to: 'text' is not a field of this revision"):
        declare(tmp_path, {**bad, "revision": 3})
    assert ContractRevision.objects.count() == 1


def test_old_replays_stay_pinned_to_the_version_they_were_launched_on(role_user, tmp_path, capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()
    call_command("replay", "run-000-recorded", "--mode", "rerun", "--inline", "--json")
    first = json.loads(capsys.readouterr().out)
    old = Replay.objects.get(run__run_id=first["run"])
    v1 = ScenarioVersion.objects.get(name="docs-research", version=1)
    latest = ScenarioVersion.objects.filter(name="docs-research").order_by("-version").first()
    assert old.scenario_version_id == v1.pk and latest == v1
    declare(tmp_path, capsys=capsys)
    out = migrate(capsys, "docs-research@1", "--to-revision", "2")
    assert out["scenario"] == "docs-research@2"

    old.refresh_from_db()
    v1.refresh_from_db()
    assert old.scenario_version_id == v1.pk and scenario_package(v1).digest == v1.digest
    # A replay of the recorded run names docs-research@1 and is still built on it: the search call is still
    # answered by the revision-1 fixture, exactly as before the migration.
    call_command("replay", "run-000-recorded", "--mode", "rerun", "--inline", "--json")
    again = json.loads(capsys.readouterr().out)
    replay = Replay.objects.get(run__run_id=again["run"])
    assert replay.scenario_version_id == v1.pk
    assert [m["tool"] for m in again["missing"]] == [m["tool"] for m in first["missing"]] == ["status.lookup"]
    scope = Event.objects.get(run=Run.objects.get(run_id=again["run"]), kind="replay.scope").body
    assert scope["scenario"] == {"name": "docs-research", "version": 1}
    results = Event.objects.filter(run__run_id=again["run"], kind="tool.result", body__origin="fixture")
    assert results.exists()


def test_a_fault_pinned_to_a_request_follows_it_to_its_new_key(research, capsys):
    from fixtures_review.services import scenario_files_mint

    files = {name: json.loads(text) for name, text in scenario_package(research).files.items()}
    search = next(f for f in files["fixtures.json"] if f["id"] == "search-rotate-keys")
    old_digest = search.get("request_digest") or canonical.request_digest(search["request"])
    files["scenario.json"]["faults"] = [{"tool": "docs.search", "stage": "before_send", "request_digest": old_digest}]
    v3 = scenario_files_mint(base=research, files=files, user=None, source="test")
    out = migrate(capsys, v3.ref, "--to-revision", "2")
    v4 = ScenarioVersion.objects.get(name="docs-research", version=4)
    (moved,) = [f for f in v4.fixture_items if f["id"] == out["migrated"][0]["fixture"]]
    (fault,) = v4.scenario_json["faults"]
    assert fault["request_digest"] == moved["request_digest"] != old_digest


# --- bodies held by digest (seed 001, "Promoted fixture bodies follow retention") -----------------------------------


def _promoted_search(research, role_user) -> StagedRecording:
    from fixtures_review.services import capture_stage
    from tests.fixtures_review.conftest import search_capture

    hits = {"hits": [{"title": "Key rotation", "url": "https://docs.example/k"}]}
    raw = search_capture(query="rotate the keys", body=hits, retention="sensitive")
    recording = capture_stage(raw=raw, user=role_user("operator", "olga")).recording
    promoted = recording_approve(recording=recording, user=get_user_model().objects.get(username="rory"))
    assert promoted.scenario_version.ref == "docs-research@3"
    return promoted


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_a_body_held_by_digest_is_migrated_as_its_body_and_held_again_under_its_sources_hold(
    research, role_user, capsys
):
    from datetime import timedelta

    from fixtures_review.models import FixtureBodyHold
    from runs.retention import retention_sweep

    promoted = _promoted_search(research, role_user)
    source = FixtureBodyHold.objects.get(fixture_version=promoted.fixture_version)
    out = migrate(capsys, "docs-research@3", "--to-revision", "2", "--user", "mo")
    v4 = ScenarioVersion.objects.get(name="docs-research", version=4)
    (mine,) = [m for m in out["migrated"] if m["from"] == promoted.fixture_version.fixture_id]
    (fixture,) = [f for f in v4.fixture_items if f["id"] == mine["fixture"]]
    # The body the migration moved (`hits` under `results`) is held by digest again, never inline.
    moved = {"results": [{"title": "Key rotation", "url": "https://docs.example/k"}]}
    assert "body" not in fixture["response"] and fixture["response"]["body_digest"] == canonical.digest_json(moved)
    assert scenario_bodies(v4).body(fixture).value == moved
    # Where it came from is the fixture as the version held it (by digest).
    assert fixture["provenance"]["migrated_from"]["fixture_digest"] == promoted.fixture_version.digest
    # Held under its source's hold: the same class and clock; a migration never extends how long material is kept.
    again = FixtureBodyHold.objects.get(fixture_id=mine["fixture"])
    assert (again.retention_class, again.expires_at, again.fixture_version) == ("sensitive", source.expires_at, None)
    assert source.expires_at is not None
    retention_sweep(now=source.expires_at + timedelta(hours=1))
    v4 = ScenarioVersion.objects.get(pk=v4.pk)
    assert canonical.digest_json(moved) in scenario_bodies(v4).expiries


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_a_migration_of_a_tool_one_of_whose_bodies_expired_is_refused_naming_the_record(research, role_user, capsys):
    from datetime import timedelta

    from fixtures_review.models import FixtureBodyHold
    from runs.retention import retention_sweep

    promoted = _promoted_search(research, role_user)
    hold = FixtureBodyHold.objects.get(fixture_version=promoted.fixture_version)
    assert hold.expires_at is not None
    retention_sweep(now=hold.expires_at + timedelta(hours=1))
    hold.refresh_from_db()
    before = held()
    with pytest.raises(CommandError, match=rf"Source material expired: .*deletion record {hold.removed_by_id}"):
        migrate(capsys, "docs-research@3", "--to-revision", "2", "--user", "mo")
    assert held() == before
