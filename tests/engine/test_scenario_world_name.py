"""The world a scenario version names is the one its replays run in: world.json's (issue 36 review). The package took
its name from scenario.json's optional `world`, defaulting to `<name>-w<version>`, while replays ran in world.json's
world: version 2 of email-delivery promised "email-delivery-w2" and the namespace replay:email-delivery-w2 in its
launch summary, and its replays wrote replay:email-delivery-w1.cf-… keys."""

from __future__ import annotations

import json

import pytest

from n17q_demo import seed_scenarios
from n17q_engine.package import PackageError, build_scenario, load_scenario


def _email(version: int, **meta: str):
    seed = next(p for p in seed_scenarios.seed_packages() if p.manifest["scenario"]["name"] == "email-delivery")
    files = {name: json.loads(data) for name, data in seed.files.items()}
    files["scenario.json"] = {**files["scenario.json"], "version": version, **meta}
    return load_scenario(build_scenario(files))


def test_a_later_version_names_the_world_its_replays_run_in():
    first, later = _email(1), _email(2)
    assert first.world_name == later.world_name == later.world["name"] == "email-delivery-w1"


def test_a_scenario_json_world_that_is_not_world_jsons_is_refused_in_one_line():
    assert _email(2, world="email-delivery-w1").world_name == "email-delivery-w1"
    with pytest.raises(PackageError) as caught:
        _email(2, world="email-delivery-w2")
    assert str(caught.value) == (
        "scenario.json: world names 'email-delivery-w2', but world.json's world (the one a replay runs in) is "
        "'email-delivery-w1'"
    )
