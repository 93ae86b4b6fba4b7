"""The budget of a web request that reads an upload (issue 35, point 3): past N17Q_UPLOAD_CPU_S CPU seconds or
N17Q_UPLOAD_WALL_S seconds, every upload door answers 422 with one line and stores nothing, never a worker held.

The budgets here are zero, so the first checkpoint that reads the clocks refuses: for a small bundle that is the
one after every event is written, so the refusal also undoes rows and blob files already written. The same uploads
with the default budget are taken (the control in each test), so a refusal is the budget's, not the input's.
The receiver's own case is in tests/otlp_receiver/test_limits.py, the capture door's in
tests/fixtures_review/test_upload_budget.py.
"""

from __future__ import annotations

import io
import uuid

import pytest
from django.urls import reverse

from accounts.models import HarnessToken
from runs.models import Run
from tests import bundles
from tests.runs.test_api import token_for
from tests.runs.test_import_formats import otlp_request
from tests.test_identifiers import _nothing_stored

pytestmark = pytest.mark.django_db


def _bundle_zip(tmp_path) -> bytes:
    folder = bundles.write_folder(tmp_path / uuid.uuid4().hex, *bundles.example_parts())
    return bundles.zip_folder(folder, tmp_path / f"{uuid.uuid4().hex}.zip").read_bytes()


def _upload(data: bytes, name: str) -> io.BytesIO:
    upload = io.BytesIO(data)
    upload.name = name
    return upload


@pytest.fixture
def import_key(role_user) -> str:
    return token_for(role_user("operator", "harness"), HarnessToken.Scope.IMPORT_RUNS)


def _assert_refused(response, said: str) -> str:
    assert response.status_code == 422, response.content[:300]
    error = response.json()["error"]
    assert said in error and "\n" not in error and "nothing was stored" in error
    return error


@pytest.mark.parametrize("limit", ["N17Q_UPLOAD_CPU_S", "N17Q_UPLOAD_WALL_S"])
def test_a_bundle_import_past_its_budget_is_a_422_and_undoes_what_it_wrote(
    client, import_key, tmp_path, settings, _blob_store, limit
):
    data = _bundle_zip(tmp_path)
    setattr(settings, limit, 0)
    refused = client.post(
        reverse("api-runs"), {"bundle": _upload(data, "b.zip")}, HTTP_AUTHORIZATION=f"Token {import_key}"
    )
    _assert_refused(refused, "CPU seconds" if limit == "N17Q_UPLOAD_CPU_S" else "seconds")
    _nothing_stored(_blob_store)
    setattr(settings, limit, 120)
    taken = client.post(
        reverse("api-runs"), {"bundle": _upload(data, "b.zip")}, HTTP_AUTHORIZATION=f"Token {import_key}"
    )
    assert taken.status_code == 201, taken.content[:300]


def test_the_import_page_says_the_budget_in_one_line_with_a_422(client, role_user, tmp_path, settings, _blob_store):
    client.force_login(role_user("operator"))
    settings.N17Q_UPLOAD_CPU_S = 0
    response = client.post(reverse("runs:run-import"), {"bundle": _upload(_bundle_zip(tmp_path), "b.zip")})
    assert response.status_code == 422
    assert "CPU seconds a request may spend reading it" in response.content.decode()
    _nothing_stored(_blob_store)


@pytest.mark.parametrize("limit", ["N17Q_UPLOAD_CPU_S", "N17Q_UPLOAD_WALL_S"])
def test_a_converted_file_past_its_budget_is_a_422_and_its_converting_process_is_stopped(
    client, import_key, settings, _blob_store, limit
):
    """An OTLP trace file goes through the converting process: the web request's budget still holds (CPU between
    runs, the wall clock while it waits on the process), and the process is killed and reaped."""
    data = otlp_request(traces=2).SerializeToString()
    setattr(settings, limit, 0)
    refused = client.post(
        reverse("api-runs"), {"bundle": _upload(data, "spans.bin")}, HTTP_AUTHORIZATION=f"Token {import_key}"
    )
    _assert_refused(refused, "the upload took more than")
    _nothing_stored(_blob_store)
    setattr(settings, limit, 120)
    taken = client.post(
        reverse("api-runs"), {"bundle": _upload(data, "spans.bin")}, HTTP_AUTHORIZATION=f"Token {import_key}"
    )
    assert taken.status_code == 201, taken.content[:300]
    assert Run.objects.count() == 2
