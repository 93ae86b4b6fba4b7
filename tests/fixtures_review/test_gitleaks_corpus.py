"""Intake measured against gitleaks' own labelled corpus (tests/fixtures_review/gitleaks_corpus.py).

Every true positive of every rule goes through intake three ways, as a harness would capture it: in a JSON field
with a neutral name, in a line of a plain-text log, and as a URL query value. Counted: whether intake reported it,
and whether any of its secret survived into what would be stored (whole, or any 8-character piece past the public
prefix its rule's keyword names). Every false positive goes in a JSON field; counted: whether anything was flagged.
detect-secrets' format detectors, as intake configures them, are measured on the same texts in the same run.
"""

from __future__ import annotations

import copy
import json
from urllib.parse import quote

import pytest

from fixtures_review import intake
from n17q_secrets import scanning
from n17q_secrets.reference import reference_rules
from n17q_secrets.reference.nosey_parker import nosey_parker_rules
from tests.bundles import EXAMPLE

from . import gitleaks_corpus


@pytest.fixture(autouse=True)
def _reviewed_connections() -> None:
    """This module's tests read and write no row: no reviewed connections, no database (tests/fixtures_review/
    conftest.py's fixture of this name, overridden), so they run once, in the SQLite pass (tests/conftest.py)."""


BASE = json.loads((EXAMPLE.parent / "example-capture.json").read_text())
PLACEMENTS = ("json field", "log line", "query value")


def _capture(placement: str, text: str) -> dict:
    cap = copy.deepcopy(BASE)
    cap["request"]["headers"] = {"Accept": "application/json"}
    if placement == "json field":
        cap["response"] = {"status": 200, "headers": {"Content-Type": "application/json"}, "body": {"data": text}}
    elif placement == "log line":
        line = f"2026-06-10T14:00:01Z INFO worker-3 loaded {text} and went on"
        cap["response"] = {"status": 200, "headers": {"Content-Type": "text/plain"}, "body": "boot\n" + line + "\n"}
    else:
        cap["request"]["url"] = f"https://status.example/api/search?page=2&q={quote(text, safe='')}&lang=en"
    return cap


def _public_prefix(secret: str, keywords: tuple[str, ...]) -> int:
    low = secret.lower()
    named = [k for k in keywords if low.startswith(k)]
    if not named:
        return 0
    n = max(len(k) for k in named)
    return n + 1 if n < len(secret) and secret[n] in "_-." else n


def _leaks(secret: str, keywords: tuple[str, ...], stored: str, context: str) -> bool:
    if secret in stored:
        return True
    start = _public_prefix(secret, keywords)
    pieces = {secret[i : i + 8] for i in range(start, len(secret) - 7)}
    return any(p in stored and p not in context for p in pieces)


@pytest.fixture(scope="module")
def measured() -> dict:
    corpus = gitleaks_corpus.load()
    rules = reference_rules()
    by_id = {r.id: r for r in rules.rules}
    ds = scanning.detect_secrets_alone()
    # The field's reference rule sets: gitleaks' and Nosey Parker's (a sample gitleaks allowlists, a public Firebase
    # key, is still a Google API key to Nosey Parker: counted apart, as `fp_by_np`).
    np_ids = {r.slug for r in nosey_parker_rules().rules}
    reference_ids = set(by_id) | np_ids
    out: dict = {
        "tp": 0,
        "found": 0,
        "stored": 0,
        "ds_found": 0,
        "fp": 0,
        "fp_flagged": 0,
        "fp_own_rule": 0,
        "fp_beyond": 0,
        "fp_by_np": 0,
        "ds_fp_flagged": 0,
        "misses": [],
        "leaks": [],
        "flagged": [],
        "rules": 0,
        "absent": [],
        "skipped": corpus.skipped,
    }
    # What a capture holds around the sample, per placement: a piece of a secret found there is not a leak.
    contexts = {p: json.dumps(_capture(p, ""), ensure_ascii=False) for p in PLACEMENTS}
    for samples in corpus.rules:
        rule = by_id.get(samples.rule)
        if rule is None:  # a rule the vendored default set does not enable
            out["absent"].append(samples.rule)
            continue
        out["rules"] += 1
        for tp in samples.tps:
            # The secret as intake takes it from the rule: its group, or the whole match when the group is a
            # fragment of the token's structure (scanning._SHORTEST_REFERENCE_SECRET).
            secrets = {
                h.secret if len(h.secret) >= scanning._SHORTEST_REFERENCE_SECRET else h.match
                for h in rules.find_by(rule, tp)
            }
            for placement in PLACEMENTS:
                out["tp"] += 1
                cap = _capture(placement, tp)
                red = intake.intake(cap)
                stored = json.dumps(red.capture, ensure_ascii=False)
                if red.findings:
                    out["found"] += 1
                else:
                    out["misses"].append((samples.rule, placement, tp[:80]))
                context = contexts[placement]
                if any(_leaks(s, rule.keywords, stored, context) for s in secrets):
                    out["stored"] += 1
                    out["leaks"].append((samples.rule, placement, tp[:80]))
                if any(True for r in ds for _ in r.find(tp)):
                    out["ds_found"] += 1
        for fp in samples.fps:
            out["fp"] += 1
            red = intake.intake(_capture("json field", fp))
            if red.findings:
                out["fp_flagged"] += 1
            if any(True for r in ds for _ in r.find(fp)):
                out["ds_fp_flagged"] += 1
            if any(h.rule == samples.rule for h in rules.find(fp)):
                out["fp_own_rule"] += 1
            # A sample that is "false" for its own rule can be a true positive of another of the reference's rules
            # (gitleaks lists each Cloudflare key kind as a false positive of the other two; generic-api-key takes
            # `key = <40 random characters>` whatever provider a sample was written for). Counted apart: flags
            # that the full reference rule set does not make.
            if any(f["rule"] in np_ids for f in red.findings):
                out["fp_by_np"] += 1
            beyond = [f["rule"] for f in red.findings if f["rule"] not in reference_ids]
            if beyond:
                out["fp_beyond"] += 1
                out["flagged"].append((samples.rule, beyond[0], fp[:80]))
    return out


def test_the_corpus_is_built_from_nearly_every_rule(measured):
    # Rules the evaluator cannot build samples for are named, not dropped: path-bound rules (whose samples are
    # maps of file paths) and a few whose samples come from Go code it does not run.
    assert measured["rules"] >= 205, measured["skipped"]
    assert len(measured["skipped"]) <= 10, measured["skipped"]


def test_recall_on_every_true_positive_in_three_placements_is_at_least_99_percent(measured):
    recall = measured["found"] / measured["tp"]
    ds_recall = measured["ds_found"] / measured["tp"]
    print(f"\nintake recall {recall:.2%} of {measured['tp']} placements; detect-secrets alone {ds_recall:.2%}")
    assert recall >= 0.99, measured["misses"][:20]


def test_no_secret_is_stored_whole_or_in_any_8_character_piece(measured):
    assert measured["stored"] == 0, measured["leaks"][:20]


def test_no_false_positive_is_reported_by_its_own_rule(measured):
    assert measured["fp_own_rule"] == 0


def test_false_positives_flagged_beyond_what_the_reference_itself_reports_are_at_most_2_percent(measured):
    rate = measured["fp_beyond"] / measured["fp"]
    overall = measured["fp_flagged"] / measured["fp"]
    ds_rate = measured["ds_fp_flagged"] / measured["fp"]
    by_np = measured["fp_by_np"] / measured["fp"]
    print(
        f"\nfalse positives flagged {overall:.2%} of {measured['fp']} (by the reference's other rules included); "
        f"by Nosey Parker's rules {by_np:.2%}; beyond both reference rule sets {rate:.2%}; "
        f"detect-secrets alone {ds_rate:.2%}"
    )
    assert rate <= 0.02, measured["flagged"]
