"""Shared set-up for the fixture review tests: the seed scenarios, captures built from the design."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

EXAMPLE_CAPTURE = json.loads((Path(__file__).resolve().parents[1] / "data" / "example-capture.json").read_text())


@pytest.fixture(autouse=True)
def _reviewed_connections(reviewed_connections):
    """The fixture review tests capture through reviewed connections (tests/conftest.py names each one): record
    mode refuses any other (tests/fixtures_review/test_record_policy.py shows the refusals)."""
    return reviewed_connections


@pytest.fixture
def seed_scenarios(db):
    from fixtures_review.scenarios import scenario_import
    from n17q_demo import seed_scenarios as seeds

    return {v.name: v for v, _ in (scenario_import(p, source="demo") for p in seeds.seed_packages())}


def status_capture(**changes) -> dict:
    """The example capture: seed 000's status lookup (status.lookup revision 2), 404 not found."""
    capture = copy.deepcopy(EXAMPLE_CAPTURE)
    for key, value in changes.items():
        capture[key] = value
    return capture


def search_capture(query: str = "rotate signing keys", body=None, **changes) -> dict:
    """A docs.search capture (docs-research's other contract)."""
    capture = copy.deepcopy(EXAMPLE_CAPTURE)
    capture.update(
        tool="docs.search",
        contract_revision=1,
        connection="docs-api",
        source_revision="docs@2026-07-01",
        request={
            "method": "GET",
            "url": "https://docs.example/api/search?q=keys",
            "headers": {"Accept": "application/json"},
            "body": None,
            "args": {"query": query},
        },
        response={
            "status": 200,
            "headers": {"Content-Type": "application/json"},
            "body": body
            if body is not None
            else {"items": [{"title": "Key rotation", "url": "https://docs.example/k"}]},
        },
    )
    capture.update(changes)
    return capture
