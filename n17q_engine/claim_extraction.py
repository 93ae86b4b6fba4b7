"""Operational claims extracted from a run's final answer (seed 003, "The simulated world stayed independent": "The
report said the patch passed tests and the review request was ready. N17Q extracted operational claims and linked
them to receipts.").

A harness that writes `account.claim` events states its claims; an OpenTelemetry trace or an Inspect log only holds
the agent's final answer as prose. `extract_claims(text)` reads that prose sentence by sentence with a fixed,
documented set of rules (docs/claims.md) and `claim_events(events)` turns what it finds into `account.claim` fields,
each linked (`supports`) to the receipts and results it speaks about, so LIN008 and LIN015 judge them exactly as they
judge a stated claim. Every extracted claim says where it came from: `origin: extracted`, `extracted_from` (the
`model.proposal` event whose answer held it), `span` ([start, end) character offsets into that answer's text) and
`rule` (which rule matched). The run page shows such a claim as extracted, not stated.

Rules (decisions, docs/decisions.md):

- Deterministic and conservative: a sentence matches a rule or yields nothing. A text with no such sentence yields
  no claim: never a guess. Only the final answer is read (the last accepted `model.proposal` of type message with
  text): what the agent reported, not what it said on the way.
- validation: a sentence naming tests (test, tests, suite, checks, CI) with a passing verb (pass, passed, green,
  succeeded), and not negated ("not all tests pass", "tests failed" are no validation claims: reporting a failure is
  not claiming green). It speaks about the run's test receipts: `command.receipt` events before the answer, in its
  attempt, that name suites or whose command runs a test runner.
- completion: a sentence saying the work or a review object is ready, done, complete or finished ("the review
  request is ready", "the task is complete"). It rests on the same test receipts (LIN008 asks a completion claim for
  completed receipts covering the required scope) and also cites the tool calls and effect intents about the object
  it names.
- effect: a sentence saying something was (or was not) sent, posted, opened, created, filed, submitted, merged,
  pushed, deployed or published ("I sent the alert", "no new alert sent"); `polarity` says which (`affirmed`,
  `denied`). It cites the tool results and effect intents/executions whose tool, effect class or destination names
  the object. Effect claims are not LIN008's (DESIGN §4 judges validation and completion claims); they are shown
  beside the effects the run holds.
- A sentence matching more than one rule gives one claim per kind (the seed's "the patch passed tests and the review
  request was ready" is a validation claim and a completion claim).
- Bounded: at most MAX_TEXT_CHARS of the answer are read and MAX_CLAIMS claims made; a claim's text is cut at
  MAX_CLAIM_CHARS (its span still names the whole sentence).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

EXTRACTOR = "n17q.claims/1"
MAX_TEXT_CHARS = 20_000
MAX_CLAIMS = 50
MAX_CLAIM_CHARS = 500
MAX_SUPPORTS = 50

# A sentence ends at . ! ? ; or a line break followed by space (or the text's end); a decimal point or a file name's
# dot is followed by a letter or digit and does not end one.
_SENTENCE_END = re.compile(r"[.!?;]+(?=\s|$)|\n+")
_WORD = re.compile(r"[a-z][a-z0-9_'-]*")

_TEST_NOUNS = {"test", "tests", "suite", "suites", "checks", "ci", "unittest", "unittests", "pytest", "specs"}
_PASS_WORDS = {"pass", "passes", "passed", "passing", "green", "succeeded", "succeeds", "successful"}
_NEGATIONS = {"not", "no", "never", "none", "nothing", "didn't", "don't", "doesn't", "isn't", "aren't", "wasn't"}
_NEGATIONS |= {"weren't", "hasn't", "haven't", "cannot", "can't", "without", "failed", "fail", "fails", "failing"}
_READY_WORDS = {"ready", "done", "complete", "completed", "finished"}
_COMPLETION_OBJECTS = {"task", "work", "request", "pr", "patch", "fix", "change", "changes", "branch", "job", "issue"}
_EFFECT_VERBS = {
    "sent",
    "posted",
    "opened",
    "created",
    "filed",
    "submitted",
    "merged",
    "pushed",
    "deployed",
    "published",
    "emailed",
    "raised",
}
_EFFECT_VERBS_PRESENT = {
    "send": "sent",
    "post": "posted",
    "open": "opened",
    "create": "created",
    "file": "filed",
    "submit": "submitted",
    "merge": "merged",
    "push": "pushed",
    "deploy": "deployed",
    "publish": "published",
    "email": "emailed",
    "raise": "raised",
}
_FILLER = {"a", "an", "the", "new", "one", "any", "my", "our", "its", "this", "that", "review", "been", "has", "have"}
_FILLER |= {"was", "were", "is", "are", "had", "it", "successfully", "also", "already", "just", "and"}
_TEST_RUNNER = re.compile(
    r"\b(?:pytest|py\.test|unittest|tox|nox|jest|mocha|vitest|rspec|phpunit|ctest|go\s+test|cargo\s+test|"
    r"(?:npm|yarn|pnpm)\s+(?:run\s+)?test|make\s+(?:test|check)|tests?)\b",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class ExtractedClaim:
    """One claim found in a text: its sentence, where it sits ([start, end) offsets), its kind, the rule that matched,
    what it speaks about (`about`: an object noun, e.g. "alert", or None) and, for an effect, its polarity."""

    text: str
    start: int
    end: int
    claim_kind: str
    rule: str
    about: str | None = None
    polarity: str = "affirmed"


def _sentences(text: str) -> Iterable[tuple[int, int]]:
    start = 0
    for match in _SENTENCE_END.finditer(text):
        yield start, match.end()
        start = match.end()
    if start < len(text):
        yield start, len(text)


# "0 failed", "no failures" report no failure: dropped before the negation test reads the words.
_ZERO_FAILURES = re.compile(r"\b(?:0|zero|no)\s+(?:failed|failures?|failing|errors?)\b")


def _words(sentence: str) -> list[str]:
    return _WORD.findall(_ZERO_FAILURES.sub(" ", sentence.lower().replace("\u2019", "'")))


def _negated(words: Sequence[str]) -> bool:
    return any(w in _NEGATIONS or w.endswith("n't") for w in words)


def _object_after(words: Sequence[str], i: int) -> str | None:
    for w in words[i + 1 : i + 6]:
        if w not in _FILLER:
            return _singular(w)
    return None


def _object_before(words: Sequence[str], i: int) -> str | None:
    for w in reversed(words[max(0, i - 5) : i]):
        if w not in _FILLER and w not in _NEGATIONS and w not in ("i", "we"):
            return _singular(w)
    return None


def _singular(word: str) -> str:
    return word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word


def _classify(sentence: str) -> list[tuple[str, str, str | None, str]]:
    """(claim kind, rule, about, polarity) for each rule the sentence matches, in kind order."""
    words = _words(sentence)
    if not words:
        return []
    found: list[tuple[str, str, str | None, str]] = []
    negated = _negated(words)
    if not negated and any(w in _TEST_NOUNS for w in words) and any(w in _PASS_WORDS for w in words):
        found.append(("validation", "tests named with a passing verb", "tests", "affirmed"))
    for i, w in enumerate(words):
        if w in _READY_WORDS and not negated:
            about = _object_before(words, i)
            if about in _COMPLETION_OBJECTS or (about is None and "review" in words):
                if about == "request" and "review" in words:
                    about = "review request"
                found.append(("completion", "work or review object said ready or done", about, "affirmed"))
                break
    for i, w in enumerate(words):
        verb = w if w in _EFFECT_VERBS else None
        if verb is None and w in _EFFECT_VERBS_PRESENT and i > 0 and words[i - 1] in ("not", "didn't", "never"):
            verb = _EFFECT_VERBS_PRESENT[w]  # "did not send the alert"
        if verb is None:
            continue
        first_person = any(p in ("i", "we") for p in words[max(0, i - 3) : i])
        about = _object_after(words, i) if first_person or w in _EFFECT_VERBS_PRESENT else _object_before(words, i)
        if about is None or about in _TEST_NOUNS:
            continue
        polarity = "denied" if _negated(words[max(0, i - 6) : i]) else "affirmed"
        found.append(("effect", f"something said {verb}", about, polarity))
        break
    return found


def extract_claims(text: str) -> list[ExtractedClaim]:
    """The validation, completion and effect claims of a text, sentence by sentence (the module's rules); none when
    no sentence matches."""
    if not isinstance(text, str) or not text.strip():
        return []
    text = text[:MAX_TEXT_CHARS]
    claims: list[ExtractedClaim] = []
    for start, end in _sentences(text):
        raw = text[start:end]
        stripped = raw.strip()
        if not stripped:
            continue
        lead = start + (len(raw) - len(raw.lstrip()))
        for kind, rule, about, polarity in _classify(stripped):
            claims.append(ExtractedClaim(stripped, lead, lead + len(stripped), kind, rule, about, polarity))
            if len(claims) >= MAX_CLAIMS:
                return claims
    return claims


# ---------------------------------------------------------------------------------------------------- the run


def final_answer(events: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The run's final answer: its last accepted `model.proposal` of type message whose text was recorded."""
    for event in reversed(events):
        if event.get("kind") != "model.proposal" or event.get("accepted") is False:
            continue
        proposal = event.get("proposal")
        if isinstance(proposal, dict) and proposal.get("type") == "message":
            text = proposal.get("text")
            if isinstance(text, str) and text.strip():
                return event
            return None  # the last message recorded no text: nothing to read, never an earlier message instead
    return None


def _names(value: Any) -> str:
    return str(value).lower() if isinstance(value, str) else ""


def _is_test_receipt(event: Mapping[str, Any]) -> bool:
    suites = event.get("suites")
    if isinstance(suites, list) and any(isinstance(s, str) and s for s in suites):
        return True
    command = event.get("command")
    if isinstance(command, list):
        command = " ".join(str(part) for part in command)
    return isinstance(command, str) and _TEST_RUNNER.search(command[:4000]) is not None


def _mentions(haystack: str, about: str | None) -> bool:
    if not about or not haystack:
        return False
    return all(part in haystack for part in about.split())


def claim_events(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The `account.claim` fields extracted from the run's final answer (`final_answer`), each with its supports, in
    the answer's order. `events`: the run's events in order, each with `id`, `kind` and its fields."""
    answer = final_answer(events)
    if answer is None:
        return []
    text = answer["proposal"]["text"]
    found = extract_claims(text)
    if not found:
        return []
    attempt = answer.get("attempt")
    before: list[Mapping[str, Any]] = []
    for event in events:
        if event is answer:
            break
        if attempt is None or event.get("attempt") == attempt:
            before.append(event)
    tests = [str(e["id"]) for e in before if e.get("kind") == "command.receipt" and _is_test_receipt(e)]
    tool_of: dict[str, str] = {}
    for e in before:
        if e.get("kind") == "tool.call":
            tool_of[str(e["id"])] = _names(e.get("tool"))
    out: list[dict[str, Any]] = []
    for claim in found:
        supports: list[str] = []
        if claim.claim_kind in ("validation", "completion"):
            supports.extend(tests)
        if claim.claim_kind in ("completion", "effect"):
            key = (claim.about or "").replace("review request", "review")
            for e in before:
                kind = e.get("kind")
                if kind == "tool.result":
                    named = tool_of.get(str(e.get("call_id")), "")
                elif kind in ("effect.intent",):
                    named = f"{_names(e.get('effect_class'))} {_names(e.get('destination'))}"
                elif kind == "tool.call" and claim.claim_kind == "completion":
                    named = _names(e.get("tool"))
                else:
                    continue
                if _mentions(named, key):
                    supports.append(str(e["id"]))
        fields: dict[str, Any] = {
            "text": claim.text[:MAX_CLAIM_CHARS],
            "claim_kind": claim.claim_kind,
            "supports": list(dict.fromkeys(supports))[:MAX_SUPPORTS],
            "origin": "extracted",
            "extracted_from": str(answer["id"]),
            "span": [claim.start, claim.end],
            "extractor": EXTRACTOR,
            "rule": claim.rule,
        }
        if claim.about:
            fields["about"] = claim.about
        if claim.claim_kind == "effect":
            fields["polarity"] = claim.polarity
        out.append(fields)
    return out
