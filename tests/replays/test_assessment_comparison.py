"""The replay comparison shows each run's qualitative assessments side by side (issue 39, seed 003): the demo's story
003 run carries its reviewer's scores, its reconstruction none (a replay leaves assessments out), and neither is a
hard invariant."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.test import Client

pytestmark = pytest.mark.django_db


@pytest.mark.seed("003", "The scenario definition grew richer")
def test_the_comparison_shows_each_runs_assessments_apart_from_the_invariants(role_user, capsys) -> None:
    call_command("load_demo", "--json")
    capsys.readouterr()
    call_command("replay", "run-003-review-request", "--mode", "reconstruction", "--inline", "--json")
    replay = json.loads(capsys.readouterr().out)["replay"]
    client = Client()
    client.force_login(role_user("viewer", "viewer-qualitative"))
    html = client.get(f"/replays/{replay}/comparison/").content.decode()
    section = html[html.index('id="qualitative"') :]
    section = section[: section.index("</section>")]
    clarity = section[section.index("Code clarity") :]
    clarity = clarity[: clarity.index("</tr>")]
    assert "5/5 by person reviewer" in clarity and "not reviewed" in clarity  # recorded run: 5; replay: none
    invariants = html[html.index('id="inv-h"') : html.index('id="qualitative"')]
    assert "Code clarity" not in invariants
