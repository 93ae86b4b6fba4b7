"""The annotation doors (issue 38, docs/annotations.md): a reviewer pastes secrets into a comment, a score's text and
a correction's rationale and value through the API, the run page's forms and `annotate_run`; the storage gate masks
them before the annotation events are stored, and the run's exports carry them masked."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.urls import reverse

from accounts.models import HarnessToken
from runs.importer import run_import_from_path
from tests import bundles
from tests.runs.test_api import token_for

from . import reader

pytestmark = pytest.mark.django_db(transaction=True)

RUN = "run-example-docs"


def test_annotations_api_page_and_command(sweep, client, role_user):
    run_import_from_path(bundles.EXAMPLE)
    c = sweep.canaries
    reviewer = role_user("reviewer", "rita")
    key = token_for(reviewer, HarnessToken.Scope.ANNOTATE_RUNS)
    url = reverse("api-run-annotations", args=[RUN])
    for body in (
        {"annotation": "comment", "text": c.environment_text()},
        {"annotation": "score", "name": "correctness", "value": 0.5, "text": c.prose(), "event": "e-res1"},
        {"annotation": "correction", "event": "e-claim", "field": "text", "corrected": c.prose(),
         "basis": ["e-res2"], "rationale": "\n".join(text for _, text in c.in_context())},
    ):  # fmt: skip
        response = client.post(
            url, json.dumps(body), content_type="application/json", HTTP_AUTHORIZATION=f"Token {key}"
        )
        assert response.status_code == 201, response.content[:500]
        assert response.json()["masked"], body["annotation"]
    client.force_login(reviewer)
    response = client.post(
        reverse("runs:run-annotate", args=[RUN]), {"annotation": "comment", "text": c.environment_text()}
    )
    assert response.status_code == 302
    call_command("annotate_run", RUN, "--label", "leaked", "--text", c.prose(), "--user", "rita", "--json")
    # The exports carry what was stored: masked.
    finder = reader.Finder([*c.all])
    for fmt in ("", "?format=otlp-json"):
        data = b"".join(client.get(f"/runs/{RUN}/export/{fmt}").streaming_content)
        assert [hit.line("annotation export") for hit in reader.search(finder, "export", fmt or "zip", data)] == []
    sweep.check("annotations (API, run page, annotate_run)")
