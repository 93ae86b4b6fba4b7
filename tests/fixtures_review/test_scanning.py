"""The secret scanner, rule by rule, against a labelled corpus generated afresh (corpus.py); and the controls.

Every rule is run two ways: on the text alone and buried in a long body: a hint that loses a match fails here.
"""

from __future__ import annotations

import base64
import json
import string
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fixtures_review import intake
from n17q_secrets import scanning
from tests import bundles
from tests.hypothesis_budget import examples

from . import corpus


@pytest.fixture(autouse=True)
def _reviewed_connections() -> None:
    """This module's tests read and write no row: no reviewed connections, no database (tests/fixtures_review/
    conftest.py's fixture of this name, overridden), so they run once, in the SQLite pass (tests/conftest.py)."""


POSITIVES = corpus.positives()
FILLER = "Keys rotate every 90 days; see the runbook for the procedure and the owners. " * 80  # > 4096 chars


def test_every_rule_has_a_labelled_corpus():
    # Our own rules and the detect-secrets detectors intake still runs each have one; the corpus also keeps the
    # formats the reference rule set took over (gitleaks' own corpus is tests/fixtures_review/test_gitleaks_corpus.py;
    # Nosey Parker's rules carry theirs, tests/fixtures_review/test_noseyparker_corpus.py).
    names = {rule.name for rule in scanning.rules() if rule.source != "noseyparker"}
    assert names <= set(POSITIVES) and set(POSITIVES) == set(corpus.NEAR_MISSES)


def test_every_hint_belongs_to_a_rule_intake_runs():
    assert set(scanning.HINTS) <= {rule.name for rule in scanning.rules()}


@pytest.mark.parametrize("rule_name", sorted(POSITIVES))
def test_each_rule_catches_its_true_positives_alone_and_inside_a_long_body(rule_name):
    rule = next((r for r in scanning.rules() if r.name == rule_name), None)  # None: a format the reference covers
    for text, secret in POSITIVES[rule_name]:
        for where, candidate in (("alone", text), ("in a long body", f"{FILLER}\n{text}\n{FILLER}")):
            found = [v for _, v in scanning.scan_text(candidate)]
            if where == "alone" and rule is not None:
                found += list(rule.find(text))  # the rule in its own right, not only whichever rule came first
            assert any(secret in v or (v in secret and len(v) >= 8) for v in found), (rule_name, where, found)
        masked = scanning.mask_text(f"{FILLER}\n{text}\n{FILLER}", "body", [])
        if rule_name != "private-key":  # its "secret" here is the header line; the block is masked whole
            assert secret not in masked, rule_name


@pytest.mark.parametrize("rule_name", sorted(corpus.NEAR_MISSES))
def test_no_rule_reports_a_near_miss(rule_name):
    for text in corpus.NEAR_MISSES[rule_name]:
        assert scanning.scan_text(text) == [], (rule_name, text)
        assert scanning.scan_text(f"{FILLER}\n{text}\n{FILLER}") == [], (rule_name, text)


def test_a_pem_block_is_masked_whole_not_just_its_header():
    key = corpus.pem()
    findings: list[dict] = []
    masked = scanning.mask_text(f"config:\n{key}\n", "response.body", findings)
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
    masked = scanning.mask_binary(blob, "response.body", findings)
    assert token.encode() not in masked and len(masked) == len(blob)
    assert findings[0]["rule"] == "github-pat" and token not in findings[0]["preview"]


def test_a_preview_shows_a_public_prefix_and_the_length_never_the_value():
    token = "ghp_" + corpus.rnd(36)
    assert scanning.preview(token) == "ghp_•••• (40 chars)"
    secret = corpus.rnd(30)
    assert secret[:6] not in scanning.preview(secret)


def test_a_json_body_is_scanned_leaf_by_leaf_as_the_leaves_read():
    """One pass over a body's strings finds what a scan of each string finds (no JSON escaping in the way)."""
    secret, token = corpus.rnd(14), "ghp_" + corpus.rnd(36)
    body = {"items": [{"config": f'db_password = "{secret}"'}] * 3, "notes": ["ok", f"token {token}"], token: 1}
    findings: list[dict] = []
    masked = json.dumps(scanning.mask_json(body, "response.body", findings))
    assert secret not in masked and token not in masked
    paths = {(f["rule"], f["path"]) for f in findings}
    # gitleaks' generic rule names it; a value its entropy floor lets by is named by the next rule that reads it:
    # Nosey Parker's generic password rule (the second reference runs before ours) or the keyword rule.
    assert {rule for rule, path in paths if path == "response.body.items[2].config"} in (
        {"generic-api-key"},
        {"np-generic-5"},
        {"keyword"},
    )
    assert ("github-pat", "response.body.notes[1]") in paths


def test_detect_secrets_detectors_on_re2_find_what_detect_secrets_itself_finds():
    """Intake runs detect-secrets' patterns on RE2 (look-arounds rewritten); on every labelled sample and near
    miss, each finds what the detector as published finds."""
    on_re2 = {
        rule.name: rule for rule in scanning.rules() if rule.source == "detect-secrets" and rule.name != "keyword"
    }
    published = {rule.name: rule for rule in scanning._detect_secrets_as_published(scanning.DETECT_SECRETS_PLUGINS)}
    assert set(on_re2) == set(published)
    for name in on_re2:
        texts = [text for text, _ in POSITIVES.get(name, [])] + corpus.NEAR_MISSES.get(name, [])
        assert texts, name
        for text in texts:
            assert set(on_re2[name].find(text)) == set(published[name].find(text)), (name, text)


@pytest.mark.parametrize(
    "line",
    [
        'db_password = "{v}"',
        "api_key: '{v}'",
        'secret !== "{v}"',
        '"{v}" == my_password',
        'private_key "{v}";',
        'client_key => "{v}"',
        "contraseña = '{v}'",
        "PASSWORD = `{v}`",
    ],
)
def test_the_keyword_rule_finds_what_detect_secrets_keyword_detector_finds(line):
    value = corpus.rnd(16, string.ascii_letters)  # letters only: the reference's generic rule lets these by
    text = line.format(v=value)
    published = next(r for r in scanning.detect_secrets_alone() if r.name == "keyword")
    keyword = next(r for r in scanning.rules() if r.name == "keyword")
    assert value in set(published.find(text)) and value in set(keyword.find(text))


def test_every_keyword_assignment_in_a_text_is_masked_not_the_first_few():
    # detect-secrets' own keyword search stops at the first match of each pattern; intake's finds them all, so a
    # config with a hundred passwords keeps none of them.
    values = [corpus.rnd(14, string.ascii_letters) for _ in range(100)]
    findings: list[dict] = []
    masked = scanning.mask_text("\n".join(f'db_password_{i} = "{v}"' for i, v in enumerate(values)), "b", findings)
    assert [v for v in values if v in masked] == [] and len(findings) == 100


def test_ten_thousand_distinct_secrets_in_one_body_are_all_masked():
    tokens = ["ghp_" + corpus.rnd(36) for _ in range(10_000)]
    findings: list[dict] = []
    masked = scanning.mask_text(" ".join(f"t{i}={t};" for i, t in enumerate(tokens)), "b", findings)
    assert not any(t[4:12] in masked for t in tokens) and len(findings) == 10_000


def test_a_secret_inside_a_long_token_run_masks_the_whole_run():
    token = "ghp_" + corpus.rnd(36)
    findings: list[dict] = []
    masked = scanning.mask_text("a" * 200_000 + "-" + token + "_" + "b" * 1000 + " tail", "b", findings)
    assert masked == "[masked:github-pat] tail" and findings[0]["rule"] == "github-pat"


def test_many_printable_runs_of_a_binary_body_are_scanned_as_one_text():
    tokens = ["ghp_" + corpus.rnd(36) for _ in range(50)]
    blob = b"\x00\xff".join(f"note {t} end".encode() for t in tokens) + b"\x00" + b"\x01abc" * 5000
    findings: list[dict] = []
    masked = scanning.mask_binary(blob, "response.body", findings)
    assert len(masked) == len(blob) and not any(t.encode()[4:] in masked for t in tokens)
    assert len(findings) == 50


def test_a_lone_surrogate_or_any_unicode_in_a_body_does_not_stop_the_scan():
    token, other = "ghp_" + corpus.rnd(36), "ghp_" + corpus.rnd(36)
    findings: list[dict] = []
    masked = scanning.mask_json({"x": "\ud800 " + token, "y": "é—ü " + other + " and " + token}, "b", findings)
    assert masked == {"x": "\ud800 [masked:github-pat]", "y": "é—ü [masked:github-pat] and [masked:github-pat]"}


def _shipped_minified_javascript() -> list[Path]:
    """Minified JavaScript nobody here wrote, from the packages the console installs: jQuery, select2 and
    XRegExp as Django's admin ships them, htmx as django-htmx ships it, Bootstrap as DRF ships it."""
    import django
    import django_htmx
    import rest_framework

    roots = [Path(m.__file__).parent for m in (django, django_htmx, rest_framework)]  # type: ignore[arg-type]
    return sorted(p for root in roots for p in root.rglob("*.min.js") if p.stat().st_size > 10_000)


def test_real_minified_javascript_gives_no_finding_in_a_captured_body():
    scripts = _shipped_minified_javascript()
    assert len(scripts) >= 6, scripts  # the control is real only if the files are there
    for script in scripts:
        text = script.read_text(encoding="utf-8")
        capture = json.loads((bundles.EXAMPLE.parent / "example-capture.json").read_text())
        capture["response"] = {"status": 200, "headers": {"Content-Type": "application/javascript"}, "body": text}
        red = intake.intake(capture)
        assert red.findings == [], (script.name, red.findings[:3])
        assert red.capture["response"]["body"] == text, script.name


def test_the_prefilter_finds_exactly_the_keywords_and_hints_a_text_holds():
    prefilter = scanning._prefilter()
    literals = prefilter._literals
    texts = [t for samples in POSITIVES.values() for t, _ in samples] + [json.dumps(corpus.controls()), FILLER]
    texts += ["ÉCLAIR Kelvin \u212a KEY", "s.ext_TOKEN test_ a3- sk"]
    for text in texts:
        expected = {k for k in literals if k in text.lower()}
        assert prefilter.present(text.encode("utf-8")) == expected, text[:60]


def test_when_the_prefilter_cannot_answer_every_rule_still_runs(monkeypatch):
    token = "ghp_" + corpus.rnd(36)
    monkeypatch.setattr(scanning.Prefilter, "present", lambda self, data: None)
    assert ("github-pat", token) in scanning.scan_text(f"deploy with {token}")


@settings(max_examples=examples(300), deadline=None)
@given(
    st.lists(
        st.sampled_from(["a", "Z", "0", "+", "/", "_", "-", "=", " ", "\n", "é", "日", "\U0001f600", "\x00", "QUJD"]),
        max_size=200,
    ),
    st.integers(min_value=0, max_value=5000),
    st.booleans(),
)
def test_the_base64_runs_of_a_long_text_are_those_of_a_short_one(pieces: list[str], pad: int, ascii_only: bool) -> None:
    """A long text's base64 runs are found by RE2 (an ASCII one as bytes), a short one's by `re`: the same runs, at
    the same character offsets (non-ASCII before them included)."""
    if ascii_only:
        text = "a " * pad + "".join(p for p in pieces if p.isascii()) * 3
    else:
        text = "é" * pad + "".join(pieces) * 3
    found = [(start, end, text[start:end]) for start, end in scanning._b64_runs(text)]
    assert found == [(m.start(), m.end(), m.group()) for m in scanning._B64_RUN.finditer(text)]


def test_a_base64_secret_in_a_long_text_holding_a_lone_surrogate_is_still_masked():
    token = "ghp_" + corpus.rnd(36)
    encoded = base64.b64encode(f"token={token}".encode()).decode()
    findings: list[dict] = []
    masked = scanning.mask_text("\ud800 " + FILLER + encoded + " " + FILLER, "b", findings)
    assert encoded not in masked and token not in masked and findings
