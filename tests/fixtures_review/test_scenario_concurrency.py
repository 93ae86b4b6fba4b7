"""A scenario version's declared concurrency, seen from the console: its page shows the barrier and the schedule,
the demo holds one, and a package with a bad race declaration is refused at import in one line."""

from __future__ import annotations

import io
import json
import re
from html import unescape

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from fixtures_review.models import ScenarioVersion
from n17q_demo import seed_scenarios as seeds
from n17q_engine.package import SCENARIO_FILES, SCENARIO_FORMAT, Package, dump, write_archive

pytestmark = pytest.mark.django_db

RACE = next(p for p in seeds.seed_packages() if p.manifest["scenario"]["name"] == "email-delivery-race")


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", unescape(re.sub(r"<[^>]+>", " ", html)))


def test_the_scenario_page_shows_the_race_its_barrier_and_its_schedule(client, role_user, seed_scenarios):
    client.force_login(role_user("viewer"))
    page = client.get("/scenarios/email-delivery-race@1/").content.decode()

    assert 'id="race-second-delivery"' in page
    words = text_of(page)
    assert "Race second-delivery on email.send" in words
    assert "first barrier after_acceptance : held after the provider accepted it, before the world changes" in words
    assert "second none: it runs to its end" in words
    assert "each delivery's own identity" in words
    schedule = re.findall(r"<li><code>(run|release) (\w+)</code>", page)
    assert schedule == [("run", "first"), ("run", "second"), ("release", "first")]
    assert 'href="#tool-emailsend"' in page and 'id="tool-emailsend"' in page


def test_a_scenario_without_a_race_says_so(client, role_user, seed_scenarios):
    client.force_login(role_user("viewer"))
    page = client.get("/scenarios/email-delivery@1/").content.decode()
    assert "No race declared: each effect is executed as one delivery." in page
    assert 'class="race"' not in page


def test_a_package_with_a_bad_race_is_refused_at_import_in_one_line_and_nothing_is_stored(tmp_path):
    files = {name: json.loads(RACE.files[name]) for name in SCENARIO_FILES}
    files["scenario.json"]["concurrency"][0]["schedule"] = [{"run": "first"}, {"run": "second"}]
    header = {"scenario": {"name": "email-delivery-race", "version": 1}}
    package = Package.build(SCENARIO_FORMAT, header, {name: dump(value) for name, value in files.items()})
    path = write_archive(package, tmp_path / "race.zip")

    with pytest.raises(CommandError) as refused:
        call_command("import_package", str(path), "--json", stdout=io.StringIO())
    message = str(refused.value)
    assert "\n" not in message
    assert "concurrency[0].schedule: delivery 'first' is held at after_acceptance and never released" in message
    assert ScenarioVersion.objects.count() == 0


def test_the_demo_holds_a_race_whose_page_shows_the_barrier_and_whose_replay_reproduces_the_second_delivery(
    client, role_user, capsys
):
    call_command("load_demo", "--json")
    demo = json.loads(capsys.readouterr().out)
    assert "email-delivery-race@1" in [s["scenario"] for s in demo["scenarios"]]
    client.force_login(role_user("viewer"))
    page = client.get("/scenarios/email-delivery-race@1/").content.decode()
    assert "barrier" in page and "after_acceptance" in page and "release first" in page

    call_command(
        "replay", "run-001-recorded", "--mode", "rerun", "--scenario", "email-delivery-race@1", "--inline", "--json"
    )
    out = json.loads(capsys.readouterr().out)
    assert out["state"] == "failed", out
    assert "LIN012" in [f["code"] for f in out["findings"]]
    from runs.models import Event

    step = Event.objects.filter(run__run_id=out["run"], kind="schedule.step").order_by("seq").first()
    assert step is not None
    detail = client.get(f"/runs/{out['run']}/events/{step.event_id}/", follow=True).content.decode()
    assert "second-delivery" in detail and "effect identity" in detail
