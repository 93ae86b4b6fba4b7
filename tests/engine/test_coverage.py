"""Coverage by behaviour (n17q_engine/coverage.py) on the seed scenarios, and after a fixture is added."""

from __future__ import annotations

import json

from n17q_demo import seed_scenarios
from n17q_engine.coverage import coverage_of
from n17q_engine.package import build_scenario, load_scenario


def scenario(name: str):
    return next(load_scenario(p) for p in seed_scenarios.seed_packages() if load_scenario(p).name == name)


def row(cov, dimension, item):
    return next(r for r in cov.rows if r.dimension == dimension and r.item == item)


def test_the_unrecorded_status_lookup_is_an_uncovered_contract_and_error_category():
    cov = coverage_of(scenario("docs-research"))
    assert not row(cov, "contract", "status.lookup r2").covered
    assert row(cov, "contract", "docs.search r1").covered
    assert row(cov, "error category", "not_found").tools == ("status.lookup",)
    assert not row(cov, "effect class", "read").covered


def test_a_recorded_not_found_covers_the_contract_and_its_error_category():
    sc = scenario("docs-research")
    files = {name: json.loads(data) for name, data in sc.package.files.items()}
    files["fixtures.json"].append(
        {
            "id": "status-7781",
            "tool": "status.lookup",
            "contract_revision": 2,
            "request": {"request_id": "req-7781"},
            "response": {"outcome": "not_found", "body": {"status": "not_found"}, "absent": {}},
            "provenance": {"recorded_at": "2026-07-01T09:00:05Z", "source_revision": None, "connection": "status",
                           "synthetic": False, "fidelity_note": None},
        }
    )  # fmt: skip
    files["scenario.json"]["version"] = 2
    cov = coverage_of(load_scenario(build_scenario(files)))
    assert row(cov, "contract", "status.lookup r2").covered
    assert row(cov, "error category", "not_found").covered
    assert row(cov, "effect class", "read").covered


def test_uncovered_rows_name_the_tools_and_invariants_they_affect():
    cov = coverage_of(scenario("email-delivery"))
    denied = row(cov, "error category", "denied")
    assert not denied.covered and "email.send" in denied.tools
    assert {"no-live-effect", "one-delivery", "approved-first"} <= set(denied.invariants)
    recovery = [r for r in cov.rows if r.dimension == "recovery transition"]
    assert recovery and all(r.covered and "email.delivery_status" in r.tools for r in recovery)
    states = {r.item: r for r in cov.rows if r.dimension == "scenario state"}
    assert states["mailbox:beta-customers@lists.acme.example @ 42"].covered
    assert set(cov.to_json()["dimensions"]) == {
        "scenario state", "effect class", "contract", "error category", "recovery transition",
    }  # fmt: skip


def test_a_state_no_read_observes_is_uncovered():
    cov = coverage_of(scenario("coding-review-request"))
    ws = row(cov, "scenario state", "workspace:ws-1 @ 2")
    assert not ws.covered and ws.tools == ("repo.apply_patch",)
