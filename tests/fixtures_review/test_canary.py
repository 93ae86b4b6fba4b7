"""The redaction canary suite: secrets generated afresh, placed in every location the issue names, posted
through the API with a capture token; each must be reported (a redaction or a finding at its place) and
found 0 times in the database, the blob store, the logs and every export (the scenario package of the
version it is promoted into, the body downloads, the API's answer, the review page).
"""

from __future__ import annotations

import base64
import gzip
import json
import logging
from pathlib import Path
from urllib.parse import quote

import pytest
from django.apps import apps
from django.core.management import call_command
from django.urls import reverse

from accounts.models import HarnessToken
from fixtures_review import intake
from fixtures_review.models import StagedRecording
from fixtures_review.services import recording_approve, recording_redact, recording_synthesize

from .corpus import canary, rnd

pytestmark = pytest.mark.django_db


def build() -> tuple[dict, dict[str, tuple[str, str]]]:
    """A status.lookup capture with a fresh canary in every location; location -> (canary, path reported)."""
    c: dict[str, str] = {name: canary() for name in (
        "authorization", "cookie", "set_cookie", "x_api_key", "api_key_header", "proxy_auth", "amz_signature",
        "amz_credential", "amz_token", "goog_signature", "goog_access_id", "gcs_v2_signature", "azure_sig",
        "userinfo", "location_sig", "client_secret", "password", "api_key_field", "private_key", "access_token",
        "refresh_token", "id_token", "connection_string", "form_password", "form_client_secret", "gzip_token",
        "base64_secret", "args_api_key", "nested_list_secret", "custom_header_token", "url_access_token",
        "link_in_body",
    )}  # fmt: skip
    github = "ghp_" + rnd(36)  # found by what it looks like, in a field with an innocent name
    c["by_format"] = github
    url = (
        f"https://svc:{c['userinfo']}@status.example/api/requests/req-7781?X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential={c['amz_credential']}&X-Amz-Security-Token={c['amz_token']}"
        f"&X-Amz-Signature={c['amz_signature']}&X-Goog-Signature={c['goog_signature']}"
        f"&GoogleAccessId={c['goog_access_id']}&Signature={c['gcs_v2_signature']}&sv=2022-11-02&sig={c['azure_sig']}"
        f"&access_token={c['url_access_token']}"
    )
    gz_body = json.dumps({"items": [], "session": {"token": c["gzip_token"]}}).encode()
    b64_body = json.dumps({"note": "ok", "secret": c["base64_secret"]}).encode()
    capture = {
        "format": intake.CAPTURE_FORMAT,
        "scenario": "docs-research",
        "tool": "status.lookup",
        "contract_revision": 2,
        "connection": "status-service",
        "captured_at": "2026-07-01T09:00:05Z",
        "source_revision": "status@118",
        "effect_class": "read",
        "request": {
            "method": "POST",
            "url": url,
            "headers": {
                "Authorization": f"Bearer {c['authorization']}",
                "Cookie": f"sid={c['cookie']}; theme=dark",
                "X-Api-Key": c["x_api_key"],
                "api-key": c["api_key_header"],
                "Proxy-Authorization": f"Basic {c['proxy_auth']}",
                "X-Vendor-Token": c["custom_header_token"],
                "Content-Type": "application/x-www-form-urlencoded",
            },
            "body": f"grant_type=client_credentials&password={c['form_password']}"
            f"&client_secret={c['form_client_secret']}&scope=read",
            "args": {"request_id": "req-7781", "api_key": c["args_api_key"]},
        },
        "response": {
            "status": 404,
            "headers": {
                "Content-Type": "application/json",
                "Set-Cookie": [f"session={c['set_cookie']}; HttpOnly", "lang=en"],
                "Location": f"https://files.example/x?X-Amz-Signature={c['location_sig']}",
            },
            "body": {
                "error": "not_found",
                "detail": {
                    "credentials": {"client_secret": c["client_secret"], "password": c["password"]},
                    "config": {
                        "api_key": c["api_key_field"],
                        "private_key": c["private_key"],
                        "connection_string": c["connection_string"],
                    },
                    "oauth": [
                        {
                            "access_token": c["access_token"],
                            "refresh_token": c["refresh_token"],
                            "id_token": c["id_token"],
                            "token_type": "Bearer",
                            "expires_in": 3600,
                        }
                    ],
                    "nested": [[{"deep": {"db_password": c["nested_list_secret"]}}]],
                    "trace": f"upstream said {github}",
                    "download": f"https://files.example/report.pdf?X-Amz-Signature={c['link_in_body']}",
                },
            },
        },
        "proposed_transition": None,
        "world_revision": 4,
    }
    # The same capture's bodies again as base64 / gzip+base64 in a second capture (below).
    capture_encoded = json.loads(json.dumps(capture))
    capture_encoded["request"]["body"] = None
    capture_encoded["request"]["headers"] = {"Content-Type": "application/json"}
    capture_encoded["request"]["url"] = "https://status.example/api/requests/req-7781"
    capture_encoded["request"]["args"] = {"request_id": "req-7781"}
    capture_encoded["response"] = {
        "status": 404,
        "headers": {"Content-Type": "application/json"},
        "body": {"encoding": "gzip+base64", "data": base64.b64encode(gzip.compress(gz_body)).decode()},
    }
    capture_encoded["request"]["body"] = {"encoding": "base64", "data": base64.b64encode(b64_body).decode()}
    reported = {
        "authorization": "request.headers.Authorization",
        "cookie": "request.headers.Cookie",
        "set_cookie": "response.headers.Set-Cookie",
        "x_api_key": "request.headers.X-Api-Key",
        "api_key_header": "request.headers.api-key",
        "proxy_auth": "request.headers.Proxy-Authorization",
        "custom_header_token": "request.headers.X-Vendor-Token",
        "amz_signature": "request.url?X-Amz-Signature",
        "amz_credential": "request.url?X-Amz-Credential",
        "amz_token": "request.url?X-Amz-Security-Token",
        "goog_signature": "request.url?X-Goog-Signature",
        "goog_access_id": "request.url?GoogleAccessId",
        "gcs_v2_signature": "request.url?Signature",
        "azure_sig": "request.url?sig",
        "url_access_token": "request.url?access_token",
        "userinfo": "request.url@userinfo",
        "location_sig": "response.headers.Location?X-Amz-Signature",
        "client_secret": "response.body.detail.credentials",
        "password": "response.body.detail.credentials",
        "api_key_field": "response.body.detail.config.api_key",
        "private_key": "response.body.detail.config.private_key",
        "connection_string": "response.body.detail.config.connection_string",
        "access_token": "response.body.detail.oauth[0].access_token",
        "refresh_token": "response.body.detail.oauth[0].refresh_token",
        "id_token": "response.body.detail.oauth[0].id_token",
        "nested_list_secret": "response.body.detail.nested[0][0].deep.db_password",
        "form_password": "request.body&password",
        "form_client_secret": "request.body&client_secret",
        "args_api_key": "request.args.api_key",
        "link_in_body": "response.body.detail.download?X-Amz-Signature",
        "by_format": "response.body.detail.trace",
        "gzip_token": "response.body.session.token",
        "base64_secret": "request.body.secret",
    }
    placed = {name: (value, reported[name]) for name, value in c.items()}
    return {"plain": capture, "encoded": capture_encoded}, placed


def encodings(secret: str) -> list[bytes]:
    """The forms a leaked secret could take in stored bytes: as is, URL-quoted, JSON-escaped, base64."""
    raw = secret.encode()
    return list({raw, quote(secret).encode(), json.dumps(secret)[1:-1].encode(), base64.b64encode(raw)})


def database_text() -> str:
    rows = []
    for model in apps.get_models():
        for row in model._default_manager.all().values():
            rows.append(json.dumps(row, default=str, ensure_ascii=False))
    return "\n".join(rows)


def test_every_canary_is_reported_and_found_nowhere(client, role_user, seed_scenarios, tmp_path, caplog, settings):
    caplog.set_level(logging.DEBUG)
    captures, placed = build()
    harness = role_user("operator", "harness")
    key = HarnessToken.new_key()
    HarnessToken.objects.create(name="ci", user=harness, key_digest=HarnessToken.digest_key(key), prefix=key[:9],
                                scopes=[HarnessToken.Scope.CAPTURE])  # fmt: skip
    answers = []
    for capture in captures.values():
        response = client.post(
            reverse("api-captures"), data=json.dumps(capture), content_type="application/json",
            HTTP_AUTHORIZATION=f"Token {key}",
        )  # fmt: skip
        assert response.status_code == 201, response.content
        answers.append(response.content)
    reported = [(r["path"], r["rule"]) for a in answers for r in json.loads(a)["redactions"]]
    reported += [(f["path"], f["rule"]) for a in answers for f in json.loads(a)["findings"]]

    # Each one reported, at its place.
    missing = [name for name, (_, path) in placed.items() if not any(intake.covers(path, p) for p, _ in reported)]
    assert missing == [], (missing, reported)

    # Review and promote the plain capture (the finding must be resolved first), then export its version.
    reviewer = role_user("reviewer", "rhea")
    plain = StagedRecording.objects.get(public_id=json.loads(answers[0])["staged"])
    plain = recording_redact(recording=plain, path="response.body.detail.trace", user=reviewer, reason="token")
    plain = recording_synthesize(
        recording=plain, path="request.args", value={"request_id": "req-7781"}, user=reviewer,
        fidelity_note="the api_key argument is not part of status.lookup's contract; dropped",
    )  # fmt: skip
    plain = recording_approve(recording=plain, user=role_user("reviewer", "rory"))
    export = tmp_path / "export"
    call_command("export_package", plain.scenario_version.ref, str(export), "--json")
    client.force_login(reviewer)
    pages = [
        client.get(reverse("fixtures:recording", args=[r.public_id])).content for r in StagedRecording.objects.all()
    ]
    pages.append(client.get(reverse("fixtures:queue") + "?state=").content)
    downloads = [
        b"".join(client.get(reverse("fixtures:body", args=[r.public_id, part])).streaming_content)
        for r in StagedRecording.objects.all()
        for part in ("request", "response")
        if f"{part}.body" in r.body_blobs
    ]
    assert downloads  # the bodies are there to download

    places = {
        "database": database_text().encode(),
        "blob store": b"\n".join(
            p.read_bytes() for p in Path(settings.STORAGES["blobs"]["OPTIONS"]["location"]).rglob("*") if p.is_file()
        ),
        "logs": caplog.text.encode(),
        "export": b"\n".join(p.read_bytes() for p in export.rglob("*") if p.is_file()),
        "api answers": b"\n".join(answers),
        "pages": b"\n".join(pages),
        "downloads": b"\n".join(downloads),
    }
    assert all(places.values()), [k for k, v in places.items() if not v]
    found = {
        (name, where)
        for name, (secret, _) in placed.items()
        for where, data in places.items()
        for form in encodings(secret)
        if form in data
    }
    assert found == set(), sorted(found)
