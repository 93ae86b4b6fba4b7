"""The assessment doors (issue 39, runs/assessments.py): a reviewer pastes secrets into an assessment's rationale
through the API and `assess_run`; the storage gate masks them before the `review.assessment` events are stored."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from accounts.models import HarnessToken
from runs.importer import run_import_from_path
from tests import bundles
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db(transaction=True)

RUN = "run-example-docs"


def test_assessments_api_and_command(sweep, client, role_user):
    run_import_from_path(bundles.EXAMPLE)
    c = sweep.canaries
    reviewer = role_user("reviewer", "rita")
    key = token_for(reviewer, HarnessToken.Scope.ANNOTATE_RUNS)
    body = {"dimension": "report_usefulness", "score": 2, "cited": ["e-claim"], "rationale": c.environment_text()}
    response = client.post(
        reverse("api-run-assessments", args=[RUN]),
        json.dumps(body),
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Token {key}",
    )
    assert response.status_code == 201, response.content[:500]
    call_command(
        "assess_run", RUN, "--dimension", "code_clarity", "--score", "3", "--cite", "e-claim",
        "--rationale", "\n".join(text for _, text in c.in_context()), "--user", "rita", "--json",
    )  # fmt: skip
    sweep.check("assessments (API, assess_run)")
