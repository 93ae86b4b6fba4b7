"""Replays through the console: `replay --inline`, scenario versions, export and import of packages."""

from __future__ import annotations

import json
from functools import partial

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from fixtures_review.models import ScenarioVersion
from fixtures_review.services import scenario_version_mint
from n17q_engine import sandbox
from replays import services as replays
from replays.models import Replay
from runs.models import Event, Run

pytestmark = pytest.mark.django_db


def run_json(capsys, *args) -> dict:
    call_command(*args, "--json")
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def demo(capsys):
    return run_json(capsys, "load_demo")


def test_load_demo_holds_the_seed_scenario_versions(demo):
    assert sorted(s["scenario"] for s in demo["scenarios"]) == [
        "coding-review-request@1",
        "docs-research@1",
        "email-delivery-race@1",
        "email-delivery@1",
    ]
    assert ScenarioVersion.objects.count() == 4


def test_replay_inline_of_seed_001_imports_a_child_run_with_one_simulated_delivery(demo, capsys):
    out = run_json(capsys, "replay", "run-001-recorded", "--mode", "rerun", "--inline")

    assert set(out) >= {"replay", "run", "mode", "state", "isolation", "missing", "findings"}
    assert (out["mode"], out["state"], out["isolation"], out["missing"]) == ("rerun", "completed", "netns", [])
    assert [f for f in out["findings"] if f["severity"] == "error"] == []
    child = Run.objects.get(run_id=out["run"])
    assert child.parent.run_id == "run-001-recorded"
    assert (child.environment, child.mode, child.isolation) == ("fixture", "rerun", "netns")
    assert (child.scenario_name, child.scenario_version) == ("email-delivery", 1)
    deliveries = Event.objects.filter(run=child, kind="world.transition", body__resource__startswith="mailbox:")
    assert deliveries.count() == 1
    replay = Replay.objects.get(pk=out["replay"])
    assert replay.state == "finished" and (replay.wall_s or 0) > 0 and replay.package_digest.startswith("sha256:")


def test_it_replays_story_000_past_the_excluded_status_lookup_and_reports_it_uncovered(demo, capsys, role_user):
    base = ScenarioVersion.objects.get(name="docs-research", version=1)
    minted = scenario_version_mint(
        base=base, exclude_tools={"status.lookup": "status is never recorded"}, user=None, source="exclusion"
    )
    out = run_json(capsys, "replay", "run-000-recorded", "--mode", "rerun", "--scenario", minted.ref, "--inline")

    assert (out["state"], out["missing"]) == ("completed", [])
    child = Run.objects.get(run_id=out["run"])
    (scope,) = Event.objects.filter(run=child, kind="replay.scope").values_list("body", flat=True)
    assert scope["uncovered"] == ["status.lookup: excluded: status is never recorded"]
    result = Event.objects.get(run=child, kind="tool.result", body__excluded__tool="status.lookup").body
    assert (result["outcome"], result["blob"], result["evaluated"]) == ("unknown", None, False)
    (claim,) = Event.objects.filter(run=child, kind="account.claim").values_list("body", flat=True)
    assert claim["unevaluated"]["tools"] == ["status.lookup"]

    viewer = Client()
    viewer.force_login(role_user("viewer", "viewer-1"))
    html = viewer.get(f"/replays/{out['replay']}/comparison/").content.decode()
    assert "Not covered, so not evaluated: status.lookup: excluded: status is never recorded" in html
    assert "Claims left unevaluated" in html and claim["id"] in html and "rests on status.lookup" in html
    assert "1 left unevaluated (they rest on an excluded tool)" in html


def test_replay_inline_of_seed_000_reports_the_missing_status_lookup(demo, capsys):
    out = run_json(capsys, "replay", "run-000-recorded", "--mode", "rerun", "--inline")
    assert out["state"] == "incomplete_test_world"
    (missing,) = out["missing"]
    assert set(missing) >= {
        "scenario",
        "tool",
        "contract_revision",
        "request_digest",
        "world_revision",
        "checkpoint_id",
        "reason",
    }
    assert (missing["tool"], missing["contract_revision"], missing["world_revision"]) == ("status.lookup", 2, 0)


def test_replay_inline_of_seed_003_in_each_mode(demo, capsys):
    reconstruction = run_json(capsys, "replay", "run-003-review-request", "--mode", "reconstruction", "--inline")
    assert "LIN001" in {f["code"] for f in reconstruction["findings"]}
    rerun = run_json(capsys, "replay", "run-003-review-request", "--mode", "rerun", "--inline")
    assert rerun["state"] == "stopped"
    child = Run.objects.get(run_id=rerun["run"])
    assert Event.objects.filter(run=child, kind="policy.decision", body__outcome="deny").exists()
    assert not Event.objects.filter(run=child, kind="effect.intent").exists()
    careful = run_json(
        capsys, "replay", "run-003-review-request", "--mode", "counterfactual", "--vary", "decider=careful", "--inline"
    )
    assert careful["state"] == "stopped"
    child = Run.objects.get(run_id=careful["run"])
    assert Event.objects.filter(
        run=child, kind="command.receipt", workspace_ref="ws-2", body__command="pytest -q tests"
    ).exists()
    assert not Event.objects.filter(run=child, kind="effect.intent").exists()


def test_executing_a_replay_twice_does_the_work_once(demo):
    replay = replays.replay_create(Run.objects.get(run_id="run-000-recorded"), mode="rerun")
    first = replays.replay_execute(replay.pk)
    second = replays.replay_execute(replay.pk)
    assert first.run_id == second.run_id and first.run is not None
    assert Run.objects.filter(run_id__startswith="run-000-recorded~").count() == 1


def test_no_namespace_means_no_replay_runs(demo, monkeypatch):
    def cannot(flags):
        raise OSError(1, "Operation not permitted")

    monkeypatch.setattr(replays, "run_sandboxed", partial(sandbox.run_sandboxed, _unshare=cannot))
    before = Run.objects.count()
    replay = replays.replay_execute(replays.replay_create(Run.objects.get(run_id="run-001-recorded"), mode="rerun").pk)
    assert replay.state == "refused" and "namespace" in replay.error
    assert Run.objects.count() == before


def test_degraded_isolation_when_allowed_is_recorded_on_the_run(demo, monkeypatch, settings):
    def cannot(flags):
        raise OSError(1, "Operation not permitted")

    settings.N17Q_ALLOW_DEGRADED_ISOLATION = True
    monkeypatch.setattr(replays, "run_sandboxed", partial(sandbox.run_sandboxed, _unshare=cannot))
    replay = replays.replay_execute(replays.replay_create(Run.objects.get(run_id="run-000-recorded"), mode="rerun").pk)
    assert replay.isolation == "degraded" and replay.run.isolation == "degraded"
    scope = Event.objects.get(run=replay.run, kind="replay.scope")
    assert scope.body["isolation"] == "degraded"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run-nope", "--mode", "rerun"], "no run 'run-nope'"),
        (["run-003-review-request", "--mode", "counterfactual"], "exactly one declared variable"),
        (
            [
                "run-003-review-request",
                "--mode",
                "counterfactual",
                "--vary",
                "decider=careful",
                "--vary",
                "policy=review-policy@7",
            ],
            "exactly one declared variable",
        ),
        (["run-003-review-request", "--mode", "rerun", "--vary", "decider=careful"], "changes nothing"),
        (
            ["run-003-review-request", "--mode", "counterfactual", "--vary", "environment=live"],
            "not a declared variable",
        ),
        (["run-003-review-request", "--mode", "counterfactual", "--vary", "decider=reckless"], "unknown decider"),
        (["run-001-recorded", "--mode", "rerun", "--scenario", "email-delivery@9"], "no scenario version"),
    ],
)
def test_a_replay_that_cannot_be_launched_is_refused_with_one_line(demo, args, message):
    before = Replay.objects.count()
    with pytest.raises(CommandError, match=message):
        call_command("replay", *args, "--inline", "--json")
    assert Replay.objects.count() == before


def test_a_run_without_a_scenario_cannot_be_rerun_without_naming_one(capsys, tmp_path):
    from n17q_demo import stories

    story = next(b for b in stories.demo_bundles() if b.manifest["run"]["id"] == "run-001-recorded")
    call_command("import_run", str(stories.write_bundle(story, tmp_path / "b")), "--json")
    with pytest.raises(CommandError, match="names no scenario and none was recorded from it") as refused:
        call_command("replay", "run-001-recorded", "--mode", "rerun", "--inline")
    # The CLI points at its own flag; the service's words are for every door (issue 16: web errors speak web).
    assert str(refused.value).endswith("(NAME@VERSION) to replay it against (--scenario)")
    with pytest.raises(replays.ReplayRefused) as direct:
        replays.replay_create(Run.objects.get(run_id="run-001-recorded"), mode="rerun")
    assert "--" not in str(direct.value) and direct.value.field == "scenario"


def test_export_then_import_round_trips_and_one_changed_byte_is_refused(demo, capsys, tmp_path):
    out = run_json(capsys, "export_package", "email-delivery@1", str(tmp_path / "pkg"))
    assert out["digest"] == ScenarioVersion.objects.get(name="email-delivery").digest
    again = run_json(capsys, "import_package", str(tmp_path / "pkg"))
    assert again == {"scenario": "email-delivery@1", "digest": out["digest"], "created": False}

    target = tmp_path / "pkg" / "contracts.json"
    data = bytearray(target.read_bytes())
    data[5] ^= 0x01
    target.write_bytes(bytes(data))
    with pytest.raises(CommandError, match=r"contracts.json: digest mismatch"):
        call_command("import_package", str(tmp_path / "pkg"))


@pytest.mark.parametrize("suffix", [".zip", ".tar.gz"])
def test_export_to_an_archive_and_import_it_into_a_fresh_console(demo, capsys, tmp_path, suffix):
    out = run_json(capsys, "export_package", "docs-research@1", str(tmp_path / f"pkg{suffix}"))
    imported = run_json(capsys, "import_package", str(tmp_path / f"pkg{suffix}"))
    assert imported["digest"] == out["digest"]


def test_a_different_package_under_a_held_version_is_refused(demo, capsys, tmp_path):
    call_command("export_package", "docs-research@1", str(tmp_path / "pkg"))
    capsys.readouterr()
    from n17q_engine.package import SCENARIO_FORMAT, build_scenario, read_package

    files = {n: json.loads(d) for n, d in read_package(tmp_path / "pkg", SCENARIO_FORMAT).files.items()}
    files["scenario.json"]["description"] = "edited in place"
    build_scenario(files).write_dir(tmp_path / "edited")
    with pytest.raises(CommandError, match=r"docs-research@1 is already held .* immutable"):
        call_command("import_package", str(tmp_path / "edited"))


def test_export_refuses_to_overwrite(demo, tmp_path):
    (tmp_path / "there").mkdir()
    with pytest.raises(CommandError, match="exists"):
        call_command("export_package", "docs-research@1", str(tmp_path / "there"))


def test_the_replay_answer_lists_a_bounded_number_of_findings_and_counts_them_all(demo, capsys, monkeypatch):
    # Issue 20: `replay --json` listed every finding of the replay's run (unbounded for a hostile run); now the first
    # LINEAGE_FINDINGS_IN_ANSWER, with the count, like the import and lineage answers.
    monkeypatch.setattr(replays, "LINEAGE_FINDINGS_IN_ANSWER", 2)
    out = run_json(capsys, "replay", "run-003-review-request", "--mode", "reconstruction", "--inline")
    stored = Run.objects.get(run_id=out["run"]).finding_count
    assert stored > 2
    assert len(out["findings"]) == 2 and out["finding_count"] == stored and out["findings_truncated"] is True
