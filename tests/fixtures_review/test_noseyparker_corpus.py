"""Intake measured against Nosey Parker's labelled rule corpus: the `examples` and `negative_examples` each rule of
its `default` rule set carries (vendored in n17q_secrets/reference/noseyparker/), the second reference corpus beside
gitleaks' (test_gitleaks_corpus.py), measured the same way.

Every example goes through intake three ways, as a harness would capture it: in a JSON field with a neutral name,
in a line of a plain-text log, and as a URL query value. Counted: whether intake reported it, and whether any of
its secret (each capture group of its rule's match) survived into what would be stored (whole, or any 8-character
piece past the public prefix its rule's literal names). Every negative example goes in a JSON field; counted:
whether anything was flagged, and by what. detect-secrets' detectors, as published, are measured on the same texts
in the same run.
"""

from __future__ import annotations

import json
import random
import string

import pytest

from fixtures_review import intake
from n17q_secrets import scanning
from n17q_secrets.reference import compile_rule, reference_rules
from n17q_secrets.reference.nosey_parker import NoseyParkerRules, nosey_parker_rules, required_literals, to_re2

from .test_gitleaks_corpus import PLACEMENTS, _capture, _leaks


@pytest.fixture(autouse=True)
def _reviewed_connections() -> None:
    """This module's tests read and write no row: no reviewed connections, no database (tests/fixtures_review/
    conftest.py's fixture of this name, overridden), so they run once, in the SQLite pass (tests/conftest.py)."""


@pytest.fixture(scope="module")
def measured() -> dict:
    rules = nosey_parker_rules()
    ds = scanning.detect_secrets_alone()
    out: dict = {
        "examples": 0,
        "tp": 0,
        "found": 0,
        "stored": 0,
        "ds_found": 0,
        "fp": 0,
        "fp_flagged": 0,
        "fp_own_rule": 0,
        "fp_by_np": 0,
        "fp_beyond": 0,
        "ds_fp_flagged": 0,
        "misses": [],
        "leaks": [],
        "flagged": [],
        "flagged_beyond": [],
        "placeholders": [],
    }
    np_names = {r.slug for r in rules.rules}
    gitleaks_ids = {r.id for r in reference_rules().rules}
    for rule in rules.rules:
        for example in rule.examples:
            out["examples"] += 1
            # The secret: what its rule captures, as intake masks it (`scanning._MIN_SECRET` and more: a shorter
            # value, a three-letter user name, is masked nowhere, so that every `user` of a body is not).
            secrets = {s for s in rule.find(example) if len(s) >= scanning._MIN_SECRET}
            if secrets and all(scanning._is_placeholder(s) for s in secrets):
                # `aws_secret_access_key:aaaa…`: the pattern's shape, not a secret; intake's placeholder rule (one
                # character repeated) holds for every rule but gitleaks' own, which has entropy floors instead.
                out["placeholders"].append((rule.id, example[:80]))
                continue
            # What is left of the example without them: a piece found there (a key id that shares its first eight
            # characters with the secret beside it) is the example's text, not the secret leaking.
            rest = example
            for secret in sorted(secrets, key=len, reverse=True):
                rest = rest.replace(secret, "\x00")
            for placement in PLACEMENTS:
                out["tp"] += 1
                cap = _capture(placement, example)
                red = intake.intake(cap)
                stored = json.dumps(red.capture, ensure_ascii=False)
                if red.findings:
                    out["found"] += 1
                else:
                    out["misses"].append((rule.id, placement, example[:80]))
                context = json.dumps(_capture(placement, rest), ensure_ascii=False)
                if any(_leaks(s, rule.literals, stored, context) for s in secrets):
                    out["stored"] += 1
                    out["leaks"].append((rule.id, placement, example[:80]))
                if any(True for r in ds for _ in r.find(example)):
                    out["ds_found"] += 1
        for negative in rule.negative_examples:
            out["fp"] += 1
            red = intake.intake(_capture("json field", negative))
            if red.findings:
                out["fp_flagged"] += 1
                out["flagged"].append((rule.id, red.findings[0]["rule"], negative[:80]))
            if any(f["rule"] in np_names for f in red.findings):
                out["fp_by_np"] += 1
            # A negative example is negative for its own rule: many are another rule's true positive (each Slack
            # token kind is a negative of the others; a FIXME the authors mean to catch). Counted apart, as in the
            # gitleaks corpus test: flags that neither reference rule set makes.
            beyond = [f["rule"] for f in red.findings if f["rule"] not in np_names | gitleaks_ids]
            if beyond:
                out["fp_beyond"] += 1
                out["flagged_beyond"].append((rule.id, beyond[0], negative[:80]))
            if any(True for _ in rule.find(negative)):
                out["fp_own_rule"] += 1
            if any(True for r in ds for _ in r.find(negative)):
                out["ds_fp_flagged"] += 1
    return out


def test_every_rule_of_the_default_set_is_translated_to_re2_and_carries_examples():
    rules = nosey_parker_rules()
    assert rules.not_compiled == []
    assert len(rules.rules) >= 160
    assert all(r.examples for r in rules.rules)


def test_recall_on_every_example_in_three_placements_is_at_least_99_percent(measured):
    recall = measured["found"] / measured["tp"]
    ds_recall = measured["ds_found"] / measured["tp"]
    print(
        f"\nNosey Parker corpus: intake recall {recall:.2%} of {measured['tp']} placements "
        f"({measured['examples']} examples, {len(measured['placeholders'])} of them placeholders, not counted); "
        f"detect-secrets alone {ds_recall:.2%}"
    )
    # At the vendored commit 8: `aaaa…`, `00aaaa…`, `xoxb-0000…-xxxx…`, `tvly-xxxx…` (listed when it grows).
    assert len(measured["placeholders"]) <= 8, measured["placeholders"]
    assert recall >= 0.99, measured["misses"][:20]


def test_no_secret_of_an_example_is_stored_whole_or_in_any_8_character_piece(measured):
    assert measured["stored"] == 0, measured["leaks"][:20]


def test_no_negative_example_is_reported_by_its_own_rule(measured):
    assert measured["fp_own_rule"] == 0


def test_negative_examples_flagged_beyond_what_the_two_reference_rule_sets_report(measured):
    rate = measured["fp_flagged"] / measured["fp"]
    by_np = measured["fp_by_np"] / measured["fp"]
    beyond = measured["fp_beyond"] / measured["fp"]
    ds_rate = measured["ds_fp_flagged"] / measured["fp"]
    print(
        f"\nNosey Parker negative examples flagged {rate:.2%} of {measured['fp']} (by a Nosey Parker rule {by_np:.2%}; "
        f"beyond both reference rule sets {beyond:.2%}); detect-secrets alone {ds_rate:.2%}"
    )
    # Beyond both references at the vendored commit, 2 of 125 (1.6%; 7 before the value judgement every rule reading a
    # value after a password-like name shares, `field_classes.is_value`, took a route, an ARN naming its own constant,
    # a form's `passwordLabel`, code concatenating a value, and `user:secret@` in a URL's user info, the manual's
    # placeholder word), each looked at, each a credential by issue 32's own classes, negative only for the Nosey
    # Parker rule's shape: `password = super$ecret` (unquoted: a shell would expand `$ecret`, but an ini or properties
    # file, python-dotenv and Node's dotenv keep it, and `Pa$sw0rd` is a common password: an unquoted `$` is not read as
    # interpolation, tests/fixtures_review/test_field_classes.py) and a MongoDB URI's user info to a socket path
    # (`D1fficultP%40ssw0rd`). Held here so that it cannot grow.
    assert beyond <= 0.02, measured["flagged_beyond"]


# --- the translation of Nosey Parker's Rust patterns to RE2 --------------------------------------------------


def test_verbose_mode_drops_whitespace_and_comments_inside_classes_too_and_keeps_escaped_ones():
    pattern = "(?x)(?i)\n  key [\\ \\t]* = # a comment\n  ([a-z ]{4}) (?# another )\n"
    assert to_re2(pattern) == r"(?i)key[\x20\t]*=([a-z]{4})"


def test_verbose_mode_ends_with_the_group_it_was_set_in():
    assert to_re2("(?x:a b) c d") == "(?:ab) c d"


def test_rusts_ascii_space_class_keeps_the_vertical_tab():
    assert compile_rule(to_re2(r"a\sb")).search(b"a\x0bb") is not None
    assert compile_rule(to_re2(r"a[\s]b")).search(b"a\x0bb") is not None


def test_a_repetition_past_re2s_limit_matches_the_same_lengths():
    regex = compile_rule(to_re2(r"^x{20,1024}$"))
    assert regex.search(b"x" * 1024) is not None
    assert regex.search(b"x" * 1025) is None
    assert regex.search(b"x" * 19) is None


def test_a_construct_re2_lacks_makes_the_rule_not_compiled_and_listed(tmp_path):
    (tmp_path / "rules").mkdir()
    (tmp_path / "rulesets").mkdir()
    rules = [
        {"name": "ok", "id": "t.1", "pattern": r"\b(tok_[a-z]{8})\b", "examples": ["tok_abcdefgh"]},
        {"name": "set operation", "id": "t.2", "pattern": r"([a-z&&[^x]]{8})", "examples": ["abcdefgh"]},
    ]
    (tmp_path / "rules" / "t.yml").write_text(json.dumps({"rules": rules}))
    (tmp_path / "rulesets" / "default.yml").write_text(
        json.dumps({"rulesets": [{"id": "default", "include_rule_ids": ["t.1", "t.2", "t.3"]}]})
    )
    loaded = NoseyParkerRules.load(tmp_path)
    assert [r.id for r in loaded.rules] == ["t.1"]
    assert [rule_id for rule_id, _why in loaded.not_compiled] == ["t.2", "t.3"]


def test_a_group_naming_a_place_is_left_and_the_credentials_beside_it_are_secrets():
    mongodb = next(r for r in nosey_parker_rules().rules if r.id == "np.mongodb.1")
    password = "Pw" + "x7Qz9Lk2"
    found = list(mongodb.find(f"mongodb://svc_reader:{password}@db0.example.com:27017/app"))
    assert found == ["svc_reader", password]


def test_the_literals_of_a_pattern_are_held_by_every_match_and_a_pattern_without_one_has_none():
    assert required_literals(to_re2(r"(?x) \b (ghp_[A-Za-z0-9]{36}) \b")) == ("ghp_",)
    # A prefix shared by alternatives that the parser factors out is joined back: not `a`, but each key id prefix.
    assert set(required_literals(r"\b((?:A3T[A-Z0-9]|AKIA|ASIA)[A-Z0-9]{16})\b")) == {"a3t", "akia", "asia"}
    # A text holding `aws_secret` holds `aws`: one literal is enough.
    assert required_literals(r"(?i)(?:aws|aws_secret)[0-9]+") == ("aws",)
    assert required_literals(r"\b00[a-z]{13}!") == ()


# --- run beside gitleaks' -------------------------------------------------------------------------------------


def _token(prefix: str, n: int) -> str:
    rng = random.Random(prefix)
    return prefix + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(n))


def test_a_token_only_nosey_parker_knows_is_masked_by_intake():
    token = _token("tvly-", 32)  # Tavily, a search API agents call: no rule of gitleaks' names it
    assert not any(True for _ in reference_rules().find(f"key {token} end"))
    findings: list[dict] = []
    masked = scanning.mask_text(f"TAVILY={token}.", "body", findings)
    assert token not in masked and [f["rule"] for f in findings] == ["np-tavily-1"]


def test_a_secret_both_reference_rule_sets_find_is_one_finding():
    token = _token("ghp_", 36)
    assert list(next(r for r in nosey_parker_rules().rules if r.id == "np.github.1").find(token)) == [token]
    assert scanning.scan_text(f"deploy with {token}") == [("github-pat", token)]


def test_when_the_prefilter_cannot_answer_nosey_parkers_rules_still_run(monkeypatch):
    token = _token("tvly-", 32)
    monkeypatch.setattr(scanning.Prefilter, "matches", lambda self, data: None)
    assert ("np-tavily-1", token) in scanning.scan_text(f"key {token} end")


def test_a_rule_whose_pattern_matches_nowhere_in_a_text_is_not_run(monkeypatch):
    ran: list[bytes] = []

    def find(data: bytes):
        ran.append(data)
        return iter(())

    spied = tuple(
        scanning.Rule(r.name, find, r.source, r.hints, r.gate) if r.name == "np-tavily-1" else r
        for r in scanning.rules()
    )
    monkeypatch.setattr(scanning, "_RULES", spied)
    scanning.scan_text("tvly- is the prefix, but no key follows it")
    assert ran == []  # its literal is there (the fallback would run it), its pattern is not
    scanning.scan_text(f"key {_token('tvly-', 32)} end")
    assert len(ran) == 1
