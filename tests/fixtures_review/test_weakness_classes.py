"""One test per class of weakness issue 13 measured in intake (on main 775880e), each through the whole of intake on a
capture, with values generated afresh: what the class let through then must not get through now.

Classes tested elsewhere, by name: numbers under secret names and credential headers by name
(test_intake.py), encoded and nested forms, HTML comments, a secret that is a JSON key, documented examples such as
`AKIAIOSFODNN7EXAMPLE` (test_secret_rules.py), the keyed original digest (test_intake.py), run bundles
(tests/runs/test_bundle_secrets.py).
"""

from __future__ import annotations

import base64
import json
import secrets
from typing import Any
from urllib.parse import quote

import pytest

from fixtures_review import intake
from tests import bundles

from . import corpus


@pytest.fixture(autouse=True)
def _reviewed_connections() -> None:
    """This module's tests read and write no row: no reviewed connections, no database (tests/fixtures_review/
    conftest.py's fixture of this name, overridden), so they run once, in the SQLite pass (tests/conftest.py)."""


def _capture(**changes: Any) -> dict[str, Any]:
    capture = json.loads((bundles.EXAMPLE.parent / "example-capture.json").read_text())
    for where, value in changes.items():
        part, key = where.split("__")
        capture[part][key] = value
    return capture


def _stored(red: intake.Redacted) -> str:
    return json.dumps(red.capture, ensure_ascii=False) + json.dumps(red.findings) + json.dumps(red.redactions)


def _no_piece(secret: str, stored: str, skip: int = 0) -> bool:
    return not any(secret[i : i + 8] in stored for i in range(skip, len(secret) - 7))


def test_a_jwt_is_masked_whole_signature_included():
    token = corpus.jwt()
    red = intake.intake(_capture(response__body={"session": {"value": f"id {token} end"}}))
    signature = token.rsplit(".", 1)[1]
    assert red.findings and _no_piece(signature, _stored(red)) and _no_piece(token, _stored(red), skip=3)


def test_a_pgp_private_key_block_is_masked_whole():
    body = base64.b64encode(secrets.token_bytes(400)).decode()
    lines = "\n".join(body[i : i + 64] for i in range(0, len(body), 64))
    block = f"-----BEGIN PGP PRIVATE KEY BLOCK-----\n\n{lines}\n=AbCd\n-----END PGP PRIVATE KEY BLOCK-----"
    red = intake.intake(
        _capture(response__body=f"exported:\n{block}\n", response__headers={"Content-Type": "text/plain"})
    )
    stored = _stored(red)
    assert red.findings and all(_no_piece(line, stored) for line in lines.splitlines() if len(line) >= 8)


def test_a_header_whose_name_is_a_secret_is_masked_in_the_stored_copy_and_the_finding_path():
    token = "ghp_" + corpus.rnd(36)
    red = intake.intake(_capture(response__headers={"Content-Type": "application/json", token: "1"}))
    stored = _stored(red)
    assert red.findings and _no_piece(token, stored, skip=4)
    assert all(token[4:12] not in f["path"] for f in red.findings)


def test_every_string_in_a_list_under_a_secret_name_is_redacted():
    values = [corpus.rnd(12) for _ in range(3)]
    red = intake.intake(_capture(request__args={"request_id": "req-7781", "api_keys": values, "backup_codes": values}))
    stored = _stored(red)
    assert all(v not in stored for v in values)


@pytest.mark.parametrize(
    "url",
    [
        "https://app.example/callback#access_token={t}&token_type=bearer",
        "https://app.example/callback#state=x&id={t}",
        "https://app.example/search?q=docs&note={quoted}",
    ],
)
def test_a_token_in_a_url_fragment_or_an_encoded_query_value_is_found(url):
    token = "ghp_" + corpus.rnd(36)
    red = intake.intake(_capture(request__url=url.format(t=token, quoted=quote(f"use {token}", safe=""))))
    stored = _stored(red)
    assert _no_piece(token, stored, skip=4) and _no_piece(quote(token, safe=""), stored, skip=4)


@pytest.mark.parametrize(
    "text",
    [
        "ghp_" + "x" * 36,
        "sk_" + "live_" + "X" * 24,
        "AKIAIOSFODNN7EXAMPLE",
        "model my_hf_model_id and hf_hub_download(repo_id='org/model')",
        "xoxb-your-token-here",
        "api_key = '<YOUR_API_KEY>'",
        "password: ${DB_PASSWORD}",
    ],
)
def test_a_placeholder_or_an_identifier_that_merely_contains_a_prefix_is_not_flagged(text):
    red = intake.intake(_capture(response__body={"doc": text}))
    assert red.findings == [], red.findings
