"""Issue 36 point 1: every value a replay generates derives from its branch basis (`package.branch_basis`: the
recorded run, the branch point, what the replay varies) and its position in the replay, never from the replay's own
id, run id or launch instant. Two replays of one branch generate the same values; replays of different branch points
or variations generate different ones (no accidental collisions). The agent-level proof (story 001 replayed twice by
two replays to completion against the same model fixtures) is in test_agent_decider.py."""

from __future__ import annotations

import json
import re

from n17q_engine.canonical import canonical_json
from n17q_engine.package import ReplayPackage, branch_basis, build_replay, load_replay
from tests.engine.test_replay import BUNDLES, SEEDS, kinds, replay
from tests.engine.test_replay_branch import A1, STORY_001, STORY_003

GENERATED = re.compile(r"^[a-z_]+-[0-9a-f]{24}$")  # an IdSource id: `<kind>-<24 hex>`


def package(
    run_id: str = STORY_003,
    *,
    checkpoint: str | None = None,
    mode: str = "counterfactual",
    vary: dict | None = None,
    replay_id: str = "replay-1",
    launched_at: str = "2026-12-02T12:00:00Z",
    decider: str = "recorded",
    events: bytes | None = None,
    scenario: str | None = None,
) -> ReplayPackage:
    b = BUNDLES[run_id]
    name = scenario or {STORY_003: "coding-review-request", STORY_001: "email-delivery"}[run_id]
    return load_replay(
        build_replay(
            replay_id=replay_id,
            run_id=f"{run_id}~{replay_id}",
            mode=mode,
            vary=vary if vary is not None else ({"decider": "careful"} if mode == "counterfactual" else {}),
            decider=decider,
            launched_at=launched_at,
            scenario=SEEDS[name],
            source_manifest=b.manifest,
            source_events=events if events is not None else b"".join(canonical_json(e) + b"\n" for e in b.events),
            source_blobs=b.blobs,
            checkpoint=checkpoint,
        )
    )


def test_the_basis_is_the_branch_not_the_replay():
    base = branch_basis(package())
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", base)
    # what names the replay itself does not enter it
    assert branch_basis(package(replay_id="replay-99", launched_at="2027-01-01T00:00:00.25Z")) == base
    # each part of the branch does
    others = {
        "checkpoint": branch_basis(package(checkpoint=A1)),
        "mode": branch_basis(package(mode="rerun", vary={})),
        "vary": branch_basis(package(vary={"decider": "recorded"})),
        "decider": branch_basis(package(mode="rerun", vary={}, decider="careful")),
        "run": branch_basis(package(STORY_001)),
    }
    recorded = b"".join(canonical_json(e) + b"\n" for e in BUNDLES[STORY_003].events[:-1])
    others["events"] = branch_basis(package(events=recorded))
    assert base not in others.values() and len(set(others.values())) == len(others), others


def _generated(log: list[dict], source: str) -> set[str]:
    recorded = {e["id"] for e in BUNDLES[source].events}
    return {e["id"] for e in log if GENERATED.match(e["id"]) and e["id"] not in recorded}


def test_two_replays_of_one_branch_generate_the_same_ids_whatever_their_own_ids():
    first = replay(package(checkpoint=A1).package)
    second = replay(package(checkpoint=A1, replay_id="replay-2", launched_at="2026-12-03T00:00:00Z").package)
    ids = [[e["id"] for e in log] for _out, log in (first, second)]
    assert ids[0] == ids[1] and _generated(first[1], STORY_003)
    assert first[0].manifest["run"]["replay"]["basis"] == second[0].manifest["run"]["replay"]["basis"]
    assert first[0].manifest["run"]["replay"]["world"] == second[0].manifest["run"]["replay"]["world"]


def test_replays_of_different_branch_points_or_variations_never_share_a_generated_id():
    runs = {
        "start": replay(package().package),
        "checkpoint": replay(package(checkpoint=A1).package),
        "other decider": replay(package(vary={"decider": "recorded"}).package),
    }
    generated = {name: _generated(log, STORY_003) for name, (_out, log) in runs.items()}
    assert all(generated.values())
    names = list(generated)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not generated[a] & generated[b], (a, b, sorted(generated[a] & generated[b])[:3])
    worlds = {out.manifest["run"]["replay"]["world"] for out, _log in runs.values()}
    assert len(worlds) == len(runs)  # each counterfactual's child world is its own


def test_an_effect_gets_the_same_execution_id_and_key_in_every_replay_of_its_branch_and_others_in_another():
    def send(**options: str | dict) -> dict:
        _out, log = replay(package(STORY_001, **options).package)  # type: ignore[arg-type]
        (execution,) = kinds(log, "effect.execution")
        return {k: execution[k] for k in ("id", "idempotency_key")}

    rerun = send(mode="rerun", vary={})
    assert send(mode="rerun", vary={}, replay_id="replay-7", launched_at="2026-12-09T10:00:00Z") == rerun
    careful = send(vary={"decider": "careful"})
    assert careful["id"] != rerun["id"] and careful["idempotency_key"] != rerun["idempotency_key"]
    assert json.dumps(careful).count("replay:") == 1  # still in the replay namespace
