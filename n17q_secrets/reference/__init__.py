"""The field's secret rules, run the way their authors run them: gitleaks' default rule set (vendored beside
this file as `gitleaks.toml`, MIT, origin and commit in `README.md`; `scripts/update_secret_rules.py` refreshes
it from a gitleaks checkout).

Semantics follow gitleaks' detector (detect/detect.go, config/allowlist.go at the vendored commit):

- A rule with keywords runs only on a text that holds one of them, compared in lower case. All keywords of all
  rules are found in one pass (an Aho-Corasick automaton, pyahocorasick).
- The rule's regular expression runs on RE2 (google-re2), over the text's UTF-8 bytes (as gitleaks' Go engine
  does): linear in the text, so a hostile body costs time in proportion to its size, never backtracking. Every
  rule of the reference compiles on RE2; one that ever does not is listed in `ReferenceRules.not_compiled` and
  reported, never silently dropped.
- The secret is the rule's `secretGroup`, else the first non-empty capture group, else the whole match; a rule
  with `entropy` reports only a secret whose Shannon entropy is above it.
- Allowlists, global and per rule: `regexes` against the secret (or the match, or the line, by
  `regexTarget`), `stopwords` contained in the secret (lower case), `condition` OR or AND. Path and commit
  conditions never hold for a capture (it has neither), so an AND allowlist that needs one never applies, and a
  rule bound to a file path (`path`: `.php`, `.tf`, `nuget.config`, a `.p12` file) is not run.
- Bounded where gitleaks is not: a `line` allowlist sees at most `LINE_CONTEXT` characters either side of the
  match (a minified body is one line of megabytes; reading all of it per match would be quadratic). Per match,
  the work is the secret's own size: its entropy is computed once per distinct secret, stopwords are found by
  one Aho-Corasick pass over it.
- Not followed: the `gitleaks:allow` comment. A captured body is not source code its author vouched for; a
  harness or a provider could write that marker to wave a credential past intake.

Django-free and database-free, like the intake rules that call it (an import-linter contract keeps it so).
"""

from __future__ import annotations

import math
import tomllib
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ahocorasick
import re2

RULES_FILE = Path(__file__).with_name("gitleaks.toml")


@dataclass(frozen=True, slots=True)
class Allowlist:
    condition: str  # "OR" | "AND"
    target: str  # "secret" | "match" | "line"
    regex: Any | None  # one RE2 pattern, the alternation of the list's regexes
    stopwords: tuple[str, ...]
    stopword_automaton: Any | None  # the stopwords, found in one pass over the secret
    needs_path_or_commit: bool  # an AND list with paths or commits: never holds for a capture


@dataclass(frozen=True, slots=True)
class ReferenceRule:
    id: str
    regex: Any
    secret_group: int
    entropy: float
    keywords: tuple[str, ...]
    allowlists: tuple[Allowlist, ...]


@dataclass(frozen=True, slots=True)
class Hit:
    rule: str
    secret: str
    match: str
    start: int  # of the match in the text
    end: int


def shannon_entropy(data: str) -> float:
    """gitleaks' entropy: counts per character, frequency over the length in UTF-8 bytes."""
    if not data:
        return 0.0
    inverse = 1.0 / len(data.encode("utf-8", "surrogatepass"))
    return -sum((n * inverse) * math.log2(n * inverse) for n in Counter(data).values())


def utf8(text: str) -> bytes:
    """`text` as the bytes every rule runs on (a lone surrogate, which JSON can carry, kept as its three bytes)."""
    return text.encode("utf-8", "surrogatepass")


def decode(data: bytes) -> str:
    return data.decode("utf-8", "surrogatepass")


_UNANCHORED = re2._Anchor.UNANCHORED


def iter_spans(regex: Any, data: bytes) -> Iterator[list[tuple[int, int]]]:
    """Every match of `regex` (from `compile_rule`) in `data`, leftmost-first and non-overlapping as `finditer`
    gives them: the spans of the whole match and of each group, (-1, -1) for a group that took no part.

    RE2's own search is called directly: google-re2's Python wrapper builds a match object per match, which on a
    body of near-matches costs more than RE2's search does (tests/fixtures_review/test_secret_rules.py holds this
    equal to `finditer`)."""
    search = regex._regexp.Match
    pos, end = 0, len(data)
    while pos <= end:
        spans = search(_UNANCHORED, data, pos, end)
        start, stop = spans[0]
        if start == -1:
            return
        yield spans
        pos = stop if stop > start else stop + 1


def _search(regex: Any, data: bytes) -> bool:
    return bool(regex._regexp.Match(_UNANCHORED, data, 0, len(data))[0][0] != -1)


def compile_rule(pattern: str) -> Any:
    """`pattern` on RE2, to run over UTF-8 bytes (`utf8`); re2.error when RE2 cannot run it."""
    return re2.compile(pattern.encode("utf-8"), options=_RE2_OPTIONS)


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.max_mem = 64 << 20  # the largest rules (generic-api-key's allowlist) need more than RE2's 8 MB


# gitleaks' generated rules end a token at a quote, white space, `;`, an escaped line end or the end of the text:
# `(?:[\x60'"\s;]|\\[nr]|$)`. A token that ends a sentence or sits in brackets (`… key sk-proj-….`, `(ghp_…)`,
# `token ghp_…, then`) is followed by punctuation, and none of those rules reported it. Trailing punctuation is not
# part of a token: that group also accepts a run of `.,!?)]}>` followed by one of its own ends. Only punctuation
# followed by an end counts, so `config.apiKey;` still ends nothing at the dot. The vendored file stays as published.
TOKEN_END = r"""(?:[\x60'"\s;]|\\[nr]|$)"""
_PUNCTUATION_THEN_END = r"""(?:[\x60'"\s;]|[.,!?)\]}>]+(?:[\x60'"\s;]|\\[nr]|$)|\\[nr]|$)"""


def ends_at_punctuation(pattern: str) -> str:
    """`pattern` with gitleaks' end-of-token group widened to accept trailing punctuation (`TOKEN_END`)."""
    return pattern.replace(TOKEN_END, _PUNCTUATION_THEN_END)


def _allowlist(raw: dict[str, Any]) -> Allowlist:
    regexes = raw.get("regexes") or []
    condition = str(raw.get("condition") or "OR").upper()
    stopwords = tuple(sorted({str(s).lower() for s in raw.get("stopwords") or []}))
    automaton = None
    if stopwords:
        automaton = ahocorasick.Automaton()
        for word in stopwords:
            automaton.add_word(word, word)
        automaton.make_automaton()
    return Allowlist(
        condition=condition,
        target=str(raw.get("regexTarget") or "secret"),
        regex=compile_rule("|".join(f"(?:{r})" for r in regexes)) if regexes else None,
        stopwords=stopwords,
        stopword_automaton=automaton,
        needs_path_or_commit=condition == "AND" and bool(raw.get("paths") or raw.get("commits")),
    )


class ReferenceRules:
    """The compiled rule set: `find(text)` yields every hit the reference would report in `text`."""

    def __init__(self, config: dict[str, Any]) -> None:
        self.version = str(config.get("title", "")) + " " + str(config.get("minVersion", ""))
        global_lists = config.get("allowlists") or ([config["allowlist"]] if config.get("allowlist") else [])
        self.global_allowlists = tuple(_allowlist(a) for a in global_lists)
        rules: list[ReferenceRule] = []
        self.not_compiled: list[tuple[str, str]] = []
        self.path_bound: list[str] = []
        for raw in config.get("rules", []):
            if raw.get("path"):
                self.path_bound.append(raw["id"])
                continue
            try:
                rules.append(
                    ReferenceRule(
                        id=raw["id"],
                        regex=compile_rule(ends_at_punctuation(raw["regex"])),
                        secret_group=int(raw.get("secretGroup") or 0),
                        entropy=float(raw.get("entropy") or 0.0),
                        keywords=tuple(k.lower() for k in raw.get("keywords") or ()),
                        allowlists=tuple(_allowlist(a) for a in raw.get("allowlists") or ()),
                    )
                )
            except re2.error as exc:  # fail closed: listed, reported by the caller, never silently dropped
                self.not_compiled.append((raw.get("id", "?"), str(exc)))
        self.rules = tuple(rules)
        self._always = tuple(i for i, r in enumerate(self.rules) if not r.keywords)
        self._holding: dict[frozenset[str], tuple[int, ...]] = {}
        self._automaton = ahocorasick.Automaton()
        by_keyword: dict[str, list[int]] = {}
        for i, rule in enumerate(self.rules):
            for keyword in rule.keywords:
                by_keyword.setdefault(keyword, []).append(i)
        for keyword, indexes in by_keyword.items():
            self._automaton.add_word(keyword, tuple(indexes))
        self._automaton.make_automaton()
        self.keywords: dict[str, tuple[int, ...]] = {k: tuple(i) for k, i in by_keyword.items()}

    @classmethod
    def load(cls, path: Path = RULES_FILE) -> ReferenceRules:
        with open(path, "rb") as fh:
            return cls(tomllib.load(fh))

    def candidates(self, lowered: str) -> list[int]:
        """Indexes of the rules a text can match: those with no keyword, and those one of whose keywords it holds."""
        chosen = set(self._always)
        for _end, indexes in self._automaton.iter(lowered):
            chosen.update(indexes)
        return sorted(chosen)

    def candidates_holding(self, present: frozenset[str]) -> tuple[int, ...]:
        """`candidates` for a text known to hold exactly the keywords `present` (found by a faster prefilter). Texts
        hold few distinct sets of keywords: each set's answer is kept (rule indexes, nothing of a text), up to
        4,096 sets."""
        known = self._holding.get(present)
        if known is not None:
            return known
        chosen = set(self._always)
        for keyword in present:
            chosen.update(self.keywords.get(keyword, ()))
        if len(self._holding) >= 4096:
            self._holding.clear()
        answer = self._holding[present] = tuple(sorted(chosen))
        return answer

    def find(
        self,
        text: str,
        lowered: str | None = None,
        data: bytes | None = None,
        *,
        present: frozenset[str] | None = None,
    ) -> Iterator[Hit]:
        """Every hit in `text` (`lowered` and `data`, its lower case and its `utf8` bytes, when the caller has them;
        `present`, the keywords it holds, when a prefilter found them).

        Entropy is computed once per distinct secret of this call (a body of near-matches repeats them), and the
        values are forgotten with the call: no secret outlives the scan in a cache."""
        data = utf8(text) if data is None else data
        candidates: Sequence[int]
        if present is not None:
            candidates = self.candidates_holding(present)
        else:
            candidates = self.candidates(text.lower() if lowered is None else lowered)
        ascii_only = len(data) == len(text)
        entropies: dict[str, float] = {}
        for index in candidates:
            yield from self._find_rule(self.rules[index], text, data, ascii_only, entropies)

    def find_by(self, rule: ReferenceRule, text: str) -> Iterator[Hit]:
        """The hits of one rule in `text`, keywords aside (a labelled sample is its own rule's, whatever it holds)."""
        data = utf8(text)
        yield from self._find_rule(rule, text, data, len(data) == len(text), {})

    def _find_rule(
        self, rule: ReferenceRule, text: str, data: bytes, ascii_only: bool, entropies: dict[str, float]
    ) -> Iterator[Hit]:
        counted = chars = 0  # bytes of `data` whose characters are counted, and how many characters they are
        for spans in iter_spans(rule.regex, data):
            match_start, match_stop = spans[0]
            # gitleaks trims line feeds from the match and applies the pattern again to what is left for the groups;
            # untrimmed, those are this match's own groups.
            while match_start < match_stop and data[match_start] == 0x0A:
                match_start += 1
            while match_stop > match_start and data[match_stop - 1] == 0x0A:
                match_stop -= 1
            if match_start == match_stop:
                continue
            groups = spans[1:]
            if (match_start, match_stop) != spans[0]:
                again = rule.regex.search(data[match_start:match_stop])
                groups = []
                if again is not None:
                    for n in range(1, len(spans)):
                        a, b = again.span(n)
                        groups.append((a + match_start, b + match_start) if a != -1 else (a, b))
            secret_span = (match_start, match_stop)
            if groups:
                if rule.secret_group > 0:
                    if len(groups) < rule.secret_group:
                        continue
                    secret_span = groups[rule.secret_group - 1]
                else:
                    secret_span = next(((a, b) for a, b in groups if b > a), secret_span)
            if secret_span[0] < 0 or secret_span[1] <= secret_span[0]:
                continue
            secret_bytes = data[secret_span[0] : secret_span[1]]
            secret = decode(secret_bytes)
            if rule.entropy:
                entropy = entropies.get(secret)
                if entropy is None:
                    entropy = entropies[secret] = shannon_entropy(secret)
                if entropy <= rule.entropy:
                    continue
            if ascii_only:
                start = match_start
            else:  # characters before the match, counted on from the last match's (matches come in order)
                chars += len(decode(data[counted:match_start]))
                counted = match_start
                start = chars
            match = decode(data[match_start:match_stop])
            end = start + len(match)
            if _allowed(self.global_allowlists, secret, match, text, start, end) or _allowed(
                rule.allowlists, secret, match, text, start, end
            ):
                continue
            yield Hit(rule.id, secret, match, start, end)


LINE_CONTEXT = 4096  # characters of a match's line, either side, a `line` allowlist sees


def _line_of(text: str, start: int, end: int) -> str:
    begin = max(text.rfind("\n", max(0, start - LINE_CONTEXT), start) + 1, start - LINE_CONTEXT, 0)
    stop = text.find("\n", end, end + LINE_CONTEXT)
    return text[begin : min(len(text), end + LINE_CONTEXT) if stop == -1 else stop]


def _allowed(allowlists: tuple[Allowlist, ...], secret: str, match: str, text: str, start: int, end: int) -> bool:
    for allow in allowlists:
        if allow.needs_path_or_commit:
            continue
        by_regex = False
        if allow.regex is not None:
            if allow.target == "match":
                target = match
            elif allow.target == "line":
                target = _line_of(text, start, end)
            else:
                target = secret
            by_regex = target != "" and _search(allow.regex, utf8(target))
        by_stopword = _holds_stopword(allow.stopword_automaton, secret)
        if allow.condition == "AND":
            checks = ([by_regex] if allow.regex is not None else []) + ([by_stopword] if allow.stopwords else [])
            if checks and all(checks):
                return True
        elif by_regex or by_stopword:
            return True
    return False


def _holds_stopword(automaton: Any | None, secret: str) -> bool:
    return automaton is not None and next(automaton.iter(secret.lower()), None) is not None


_LOADED: ReferenceRules | None = None


def reference_rules() -> ReferenceRules:
    """The vendored rule set, compiled once per process."""
    global _LOADED
    if _LOADED is None:
        _LOADED = ReferenceRules.load()
    return _LOADED
