"""The trace as the recording (issue 37, point 1): the tool results of an imported run staged as recordings with the
contract revision given at staging, through `capture_from_run`, `POST /api/v1/runs/<id>/captures/` and the run
page's form. The runs come from an OTLP trace and a real Inspect eval whose tool results hold every canary."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from fixtures_review.models import StagedRecording
from runs.models import Run

from . import spans
from .canaries import Canaries
from .test_run_doors import import_run, inspect_logs

pytestmark = pytest.mark.django_db(transaction=True)

FIELDS = {"scenario": "fresh-world", "effect_class": "read", "connection": "docs-api"}


@pytest.fixture(scope="module")
def inspect_made(tmp_path_factory) -> tuple[Canaries, dict[str, Path]]:
    canaries = Canaries.fresh()
    return canaries, inspect_logs(canaries, tmp_path_factory.mktemp("inspect"))


def _trace_run(sweep, tmp_path: Path) -> str:
    path = tmp_path / "spans.bin"
    path.write_bytes(spans.protobuf(sweep.canaries))
    return import_run(path)["run"]


def test_otlp_results_staged_by_command(sweep, tmp_path, reviewed_connections):
    run = _trace_run(sweep, tmp_path)
    out = io.StringIO()
    call_command("capture_from_run", run, "--scenario", "fresh-world", "--effect-class", "read", "--connection",
                 "docs-api", "--contract-revision", "1", "--json", stdout=out)  # fmt: skip
    answer = json.loads(out.getvalue())
    assert answer["recordings"] and answer["refused"] == [], answer
    sweep.check("run results staged (capture_from_run, OTLP trace)")


def test_otlp_results_staged_by_the_run_page(sweep, tmp_path, client, role_user, reviewed_connections):
    run = _trace_run(sweep, tmp_path)
    client.force_login(role_user("operator"))
    response = client.post(
        reverse("fixtures:run-results-stage", args=[run]), data={**FIELDS, "contract_revision": "1"}, follow=True
    )
    assert response.status_code == 200 and StagedRecording.objects.filter(source_run=run).exists()
    sweep.check("run results staged (run page, OTLP trace)")


def test_inspect_results_staged_by_the_api(sweep, client, role_user, inspect_made, reviewed_connections):
    sweep.use(inspect_made[0])
    answer = import_run(inspect_made[1]["eval"])
    run = Run.objects.get(run_id=answer["run"])
    client.force_login(role_user("operator"))
    response = client.post(
        reverse("api-run-captures", args=[run.run_id]),
        data={**FIELDS, "contract_revision": 1},
        content_type="application/json",
    )
    assert response.status_code == 201 and response.json()["refused"] == [], response.content[:500]
    sweep.check("run results staged (API, Inspect log)")
