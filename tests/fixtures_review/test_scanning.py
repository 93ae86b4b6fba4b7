"""The secret scanner, rule by rule, against a labelled corpus generated afresh (corpus.py); and the controls.

Every rule is run two ways: on the text alone (a short string, scanned whole) and buried in a long body
(scanned through the windows around token runs and keywords): a hint or a window that loses a match fails here.
"""

from __future__ import annotations

import base64
import json

import pytest

from fixtures_review import intake

from . import corpus

POSITIVES = corpus.positives()
FILLER = "Keys rotate every 90 days; see the runbook for the procedure and the owners. " * 80  # > 4096 chars


def test_every_rule_has_a_labelled_corpus():
    # Our own rules and the detect-secrets detectors intake still runs each have one; the corpus also keeps the
    # formats the reference rule set took over (gitleaks' own corpus is tests/fixtures_review/test_gitleaks_corpus.py).
    names = {rule.name for rule in intake.rules()}
    assert names <= set(POSITIVES) and set(POSITIVES) == set(corpus.NEAR_MISSES)


def test_every_hint_belongs_to_a_rule_intake_runs():
    assert set(intake.HINTS) <= {rule.name for rule in intake.rules()}


@pytest.mark.parametrize("rule_name", sorted(POSITIVES))
def test_each_rule_catches_its_true_positives_alone_and_inside_a_long_body(rule_name):
    rule = next((r for r in intake.rules() if r.name == rule_name), None)  # None: a format the reference covers
    for text, secret in POSITIVES[rule_name]:
        for where, candidate in (("alone", text), ("in a long body", f"{FILLER}\n{text}\n{FILLER}")):
            found = [v for _, v in intake.scan_text(candidate)]
            if where == "alone" and rule is not None:
                found += list(rule.find(text))  # the rule in its own right, not only whichever rule came first
            assert any(secret in v or (v in secret and len(v) >= 8) for v in found), (rule_name, where, found)
        masked = intake.mask_text(f"{FILLER}\n{text}\n{FILLER}", "body", [])
        if rule_name != "private-key":  # its "secret" here is the header line; the block is masked whole
            assert secret not in masked, rule_name


@pytest.mark.parametrize("rule_name", sorted(corpus.NEAR_MISSES))
def test_no_rule_reports_a_near_miss(rule_name):
    for text in corpus.NEAR_MISSES[rule_name]:
        assert intake.scan_text(text) == [], (rule_name, text)
        assert intake.scan_text(f"{FILLER}\n{text}\n{FILLER}") == [], (rule_name, text)


def test_a_pem_block_is_masked_whole_not_just_its_header():
    key = corpus.pem()
    findings: list[dict] = []
    masked = intake.mask_text(f"config:\n{key}\n", "response.body", findings)
    body_line = key.splitlines()[3]
    assert body_line not in masked and "[masked:private-key]" in masked
    assert findings[0]["rule"] == "private-key"


def test_controls_give_no_finding_anywhere_in_a_capture():
    controls = corpus.controls()
    capture = {
        "format": intake.CAPTURE_FORMAT,
        "scenario": "docs-research",
        "tool": "docs.search",
        "contract_revision": 1,
        "connection": "docs-api",
        "captured_at": "2026-07-01T09:00:02Z",
        "source_revision": "docs@" + controls["commits"][0],
        "effect_class": "read",
        "request": {
            "method": "POST",
            "url": "https://docs.example/api/search?trace=" + controls["uuids"][0],
            "headers": {"X-Request-Id": controls["uuids"][1], "If-None-Match": controls["digests"][0]},
            "body": controls["prose"],
            "args": {"query": controls["prose"][:60]},
        },
        "response": {
            "status": 200,
            "headers": {"ETag": controls["commits"][1], "Content-Type": "application/json"},
            "body": controls,
        },
        "proposed_transition": None,
        "world_revision": 0,
    }
    red = intake.intake(capture)
    assert red.findings == []
    assert red.redactions == []
    assert red.capture["response"]["body"] == json.loads(json.dumps(controls))


def test_a_binary_image_body_gives_no_finding_and_is_kept_byte_for_byte():
    image = corpus.png(64, 64)
    capture = {
        "format": intake.CAPTURE_FORMAT,
        "scenario": "docs-research",
        "tool": "docs.search",
        "contract_revision": 1,
        "connection": "docs-api",
        "captured_at": "2026-07-01T09:00:02Z",
        "effect_class": "read",
        "request": {"method": "GET", "url": "https://img.example/a.png", "headers": {}, "body": None, "args": {}},
        "response": {
            "status": 200,
            "headers": {"Content-Type": "image/png"},
            "body": {"encoding": "base64", "data": base64.b64encode(image).decode()},
        },
        "world_revision": 0,
    }
    red = intake.intake(capture)
    assert red.findings == [] and red.binary["response.body"] == image


def test_a_secret_inside_a_binary_body_is_overwritten_in_place():
    token = "ghp_" + corpus.rnd(36)
    blob = b"\x89PNG\r\n\x1a\n\x00\x01" + f"tEXt comment {token} end".encode() + b"\x00\xff"
    findings: list[dict] = []
    masked = intake.mask_binary(blob, "response.body", findings)
    assert token.encode() not in masked and len(masked) == len(blob)
    assert findings[0]["rule"] == "github-pat" and token not in findings[0]["preview"]


def test_a_preview_shows_a_public_prefix_and_the_length_never_the_value():
    token = "ghp_" + corpus.rnd(36)
    assert intake.preview(token) == "ghp_•••• (40 chars)"
    secret = corpus.rnd(30)
    assert secret[:6] not in intake.preview(secret)


def test_a_json_body_is_scanned_leaf_by_leaf_as_the_leaves_read():
    """One pass over a body's strings finds what a scan of each string finds (no JSON escaping in the way)."""
    secret, token = corpus.rnd(14), "ghp_" + corpus.rnd(36)
    body = {"items": [{"config": f'db_password = "{secret}"'}] * 3, "notes": ["ok", f"token {token}"], token: 1}
    findings: list[dict] = []
    masked = json.dumps(intake.mask_json(body, "response.body", findings))
    assert secret not in masked and token not in masked
    paths = {(f["rule"], f["path"]) for f in findings}
    # The reference's generic rule names it, or the keyword rule (a value of letters only, which generic lets by).
    assert {rule for rule, path in paths if path == "response.body.items[2].config"} in (
        {"generic-api-key"},
        {"keyword"},
    )
    assert ("github-pat", "response.body.notes[1]") in paths
