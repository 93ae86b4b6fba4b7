"""The reference rule set (gitleaks' default rules, vendored) as intake runs it.

Each test names one part of gitleaks' semantics the engine must keep, on the vendored rules themselves or on a
small rule set built for the point; and intake masks what the reference finds.
"""

from __future__ import annotations

import base64
import gzip
import json
import tomllib

import pytest

from fixtures_review import intake
from n17q_secrets.reference import RULES_FILE, ReferenceRules, reference_rules, shannon_entropy
from tests import bundles


@pytest.fixture(autouse=True)
def _reviewed_connections() -> None:
    """This module's tests read and write no row: no reviewed connections, no database (tests/fixtures_review/
    conftest.py's fixture of this name, overridden), so they run once, in the SQLite pass (tests/conftest.py)."""


# Assembled at run time so that no token sits whole in the repository; the parts are the documented formats.
STRIPE = "sk_" + "live_" + "4eC39HqLyjWDarjtT1zdp7dc9x1QmM"
SLACK_BOT = "xoxb-" + "263594206564-2343594206574-FGqddMF8t08v8N7Oq4i57vs1"
NPM = "npm_" + "Kx8pQ2mZ7vR4tY9wL3nB6cJ1hF5dS0gA2eTq"


def _rules(**rule: object) -> ReferenceRules:
    base = {"id": "test-rule", "regex": r"\b(tok_[a-z0-9]{16})\b", "keywords": ["tok_"]}
    return ReferenceRules({"rules": [{**base, **rule}]})


def test_every_rule_of_the_vendored_set_compiles_on_re2_or_is_bound_to_a_file_path():
    config = tomllib.loads(RULES_FILE.read_text())
    rules = reference_rules()
    assert rules.not_compiled == []
    assert len(rules.rules) + len(rules.path_bound) == len(config["rules"]) > 200
    assert {r["id"] for r in config["rules"] if r.get("path")} == set(rules.path_bound)


@pytest.mark.parametrize(
    ("token", "rule"),
    [(STRIPE, "stripe-access-token"), (SLACK_BOT, "slack-bot-token"), (NPM, "npm-access-token")],
)
def test_it_finds_a_provider_token_in_a_json_field_a_log_line_and_a_query_value(token, rule):
    # A query value is scanned as intake hands it over: decoded, on its own (in the URL the reference's token
    # rules want a quote, a space or the end after the token, and `&` is none of them).
    placements = [
        json.dumps({"note": token}),
        f"2026-06-10T14:00:00Z INFO client started with {token} for the nightly job",
        token,
    ]
    for text in placements:
        hits = {(h.rule, h.secret) for h in reference_rules().find(text)}
        assert (rule, token) in hits, text


def test_a_rule_runs_only_on_a_text_holding_one_of_its_keywords():
    rules = _rules()
    assert [h.secret for h in rules.find("id tok_abcdef0123456789 end")] == ["tok_abcdef0123456789"]
    keywordless = _rules(keywords=["nothere"])
    assert list(keywordless.find("id tok_abcdef0123456789 end")) == []
    assert keywordless.candidates("tok_x") == [] and keywordless.candidates("nothere") == [0]


def test_the_secret_is_the_secret_group_else_the_first_non_empty_group():
    pattern = r"(key)=(?:(x+)|([a-z0-9]{12}))"
    assert [h.secret for h in _rules(regex=pattern, keywords=["key"]).find("key=abcdef123456")] == ["key"]
    assert [h.secret for h in _rules(regex=pattern, keywords=["key"], secretGroup=3).find("key=abcdef123456")] == [
        "abcdef123456"
    ]


def test_a_secret_at_or_below_the_rule_entropy_is_not_reported():
    assert shannon_entropy("aaaa") == 0.0 and shannon_entropy("ab") == 1.0
    low, high = "tok_aaaaaaaaaaaaaaaa", "tok_a1b2c3d4e5f6g7h8"
    rules = _rules(entropy=3.0)
    assert [h.secret for h in rules.find(f"{low} {high}")] == [high]


def test_allowlists_by_regex_target_and_stopword_and_an_and_condition_needing_a_path_never_holds():
    text = "tok_example000000000 tok_realvalue1234567 tok_stopword12345678"
    rules = _rules(
        allowlists=[
            {"regexes": ["example"]},  # against the secret
            {"stopwords": ["stopword"]},
            {"condition": "AND", "paths": [r"\.md$"], "regexes": ["realvalue"]},  # a capture has no path
        ]
    )
    assert [h.secret for h in rules.find(text)] == ["tok_realvalue1234567"]
    by_line = _rules(allowlists=[{"regexTarget": "line", "regexes": ["^#"]}])
    assert [h.secret for h in by_line.find("# tok_realvalue1234567\ntok_realvalue7654321")] == ["tok_realvalue7654321"]


def test_the_global_allowlist_keeps_documented_examples_out():
    assert list(reference_rules().find('{"aws_key": "AKIAIOSFODNN7EXAMPLE"}')) == []


def test_the_gitleaks_allow_marker_does_not_wave_a_token_through():
    # In a repository it is the author's word; in a captured body it is whatever a harness or a provider wrote.
    assert [h.rule for h in reference_rules().find(f"{STRIPE}  # gitleaks:allow")] == ["stripe-access-token"]


def test_intake_masks_what_the_reference_finds_and_keeps_no_piece_of_it():
    capture = json.loads((bundles.EXAMPLE.parent / "example-capture.json").read_text())
    capture["response"] = {
        "status": 200,
        "headers": {"Content-Type": "application/json"},
        "body": {"log": f"worker booted with {NPM}", "items": [{"note": SLACK_BOT}]},
    }
    red = intake.intake(capture)
    stored = json.dumps(red.capture)
    for token in (NPM, SLACK_BOT):
        # Nothing past the public prefix survives, not even an 8-character piece.
        tail = token.split("_", 1)[-1] if token.startswith("npm_") else token[5:]
        assert not any(tail[i : i + 8] in stored for i in range(len(tail) - 7)), token
    assert {f["path"]: f["rule"] for f in red.findings} == {
        "response.body.log": "npm-access-token",
        "response.body.items[0].note": "slack-bot-token",
    }


def test_a_10_mb_body_of_near_matches_is_scanned_to_the_end():
    # Runs of almost-tokens (a keyword, an assignment, a value one character short) the whole way: RE2 keeps this
    # linear; the time budget is held by benchmarks/bench_capture.py, not here.
    unit = 'api_key = "sk_live_' + "a" * 9 + '" '
    body = unit * (10_000_000 // len(unit))
    assert list(reference_rules().find(body[:200_000])) == []
    hits = list(reference_rules().find(body + " " + STRIPE))
    assert [h.secret for h in hits if h.rule == "stripe-access-token"] == [STRIPE]


def _stored_after_intake(body: object, content_type: str) -> tuple[str, list[dict]]:
    capture = json.loads((bundles.EXAMPLE.parent / "example-capture.json").read_text())
    capture["response"] = {"status": 200, "headers": {"Content-Type": content_type}, "body": body}
    red = intake.intake(capture)
    stored = json.dumps(red.capture) + repr(red.binary)
    return stored.replace("\\u0000", "").replace("\\x00", ""), red.findings


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


@pytest.mark.parametrize(
    ("case", "body", "content_type"),
    [
        ("base64 in a JSON field", lambda t: {"blob": _b64(json.dumps({"k": t}).encode())}, "application/json"),
        ("gzip+base64 in a JSON field", lambda t: {"blob": _b64(gzip.compress(f"k={t}".encode()))}, "application/json"),
        ("base64 of base64 in a field", lambda t: {"b": _b64(_b64(f"k {t} .".encode()).encode())}, "application/json"),
        (
            "a body encoded twice",
            lambda t: {"encoding": "base64", "data": _b64(_b64(f"x {t} y".encode()).encode())},
            "application/octet-stream",
        ),
        (
            "UTF-16 inside a binary body",
            lambda t: {
                "encoding": "base64",
                "data": _b64(b"\x89PNG\r\n\x1a\n" + f"x {t} y".encode("utf-16-le") + b"\xff"),
            },
            "application/octet-stream",
        ),
        ("a token in an HTML comment", lambda t: f"<p>hi</p><!-- debug: {t} -->", "text/html"),
        (
            "a URL-encoded form value",
            lambda t: "a=1&b=" + t.replace("_", "%5F") + "&c=2",
            "application/x-www-form-urlencoded",
        ),
        (
            "a JSON document inside a string",
            lambda t: {"payload": json.dumps({"auth": {"npm": t}})},
            "application/json",
        ),
    ],
)
def test_a_secret_in_an_encoded_or_nested_form_is_found_and_nothing_of_it_is_stored(case, body, content_type):
    stored, findings = _stored_after_intake(body(NPM), content_type)
    assert findings, case
    tail = NPM[4:]
    assert not any(tail[i : i + 8] in stored for i in range(len(tail) - 7)), case
    encoded = _b64(NPM.encode())
    assert encoded[4:20] not in stored, case


def test_a_secret_that_is_a_json_key_is_masked_in_the_stored_copy_and_in_every_finding_path():
    stored, findings = _stored_after_intake({NPM: {"note": f"again {SLACK_BOT}"}}, "application/json")
    written = stored + json.dumps(findings)
    for token in (NPM, SLACK_BOT):
        assert token[5:13] not in written
    assert {f["path"] for f in findings} == {
        'response.body["[masked:npm-access-token]"]',
        'response.body["[masked:npm-access-token]"].note',
    }


def test_re2_spans_are_what_finditer_gives_and_offsets_count_characters():
    from n17q_secrets.reference import compile_rule, iter_spans

    text = f"é — {STRIPE} ü {NPM} {STRIPE}"
    data = text.encode()
    for pattern in (r"(sk_live_[0-9a-zA-Z]{24,})", r"npm_[a-zA-Z0-9]{36}", r"x*"):
        regex = compile_rule(pattern)
        assert [s[0] for s in iter_spans(regex, data)] == [m.span() for m in regex.finditer(data)], pattern
    hits = [h for h in reference_rules().find(text) if h.rule == "stripe-access-token"]
    assert [text[h.start : h.end] for h in hits] == [h.match for h in hits] and len(hits) == 2


def test_a_line_allowlist_reads_a_bounded_window_of_a_one_line_body():
    rules = _rules(allowlists=[{"regexTarget": "line", "regexes": ["IGNORE-ME"]}])
    far = "IGNORE-ME " + "x" * 10_000 + " tok_realvalue1234567"
    near = "x" * 10_000 + " IGNORE-ME tok_realvalue1234567"
    assert [h.secret for h in rules.find(far)] == ["tok_realvalue1234567"]
    assert list(rules.find(near)) == []
