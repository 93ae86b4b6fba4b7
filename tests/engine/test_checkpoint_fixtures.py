"""A replay's checkpoints name the fixture versions in force (issue 39; seed 001)."""

from __future__ import annotations

import pytest

from n17q_engine.bundle import validate_event
from n17q_engine.canonical import digest_json
from n17q_engine.package import load_scenario
from tests.engine.test_replay import SEEDS, kinds, story


@pytest.mark.seed("001", "Connections became recorded dependencies")
def test_each_checkpoint_names_the_scenario_version_and_every_fixture_that_answered_by_then_with_its_digest():
    _out, log = story("run-003-review-request", "coding-review-request")
    package = SEEDS["coding-review-request"]
    versions = {f.id: digest_json(f.to_dict()) for f in load_scenario(package).fixtures}
    checkpoints = kinds(log, "checkpoint")
    assert len(checkpoints) >= 2
    answered: set[str] = set()
    for line, event in enumerate(log, 1):
        if event["kind"] in ("tool.result", "command.receipt") and event.get("fixture"):
            answered.add(event["fixture"])
        if event["kind"] != "checkpoint":
            continue
        validate_event(event, line=line)
        held = event["fixtures"]
        assert held["scenario"] == {"name": "coding-review-request", "version": 1}
        assert held["package_digest"] == package.digest and held["count"] == len(versions)
        # Exactly the fixtures that had answered by then, each with the digest of the fixture as the scenario holds it.
        assert {a["id"]: a["digest"] for a in held["answered"]} == {f: versions[f] for f in answered}
    assert checkpoints[0]["fixtures"]["answered"] == []
    assert {a["id"] for a in checkpoints[-1]["fixtures"]["answered"]} >= {"apply-patch-ws-1", "focused-ws-1"}
