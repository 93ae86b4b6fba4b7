"""The field's secret rules, run the way their authors run them: gitleaks' default rule set (vendored beside
this file as `gitleaks.toml`, MIT, origin and commit in `README.md`; `scripts/update_secret_rules.py` refreshes
it from a gitleaks checkout).

Semantics follow gitleaks' detector (detect/detect.go, config/allowlist.go at the vendored commit):

- A rule with keywords runs only on a text that holds one of them, compared in lower case. All keywords of all
  rules are found in one pass (an Aho-Corasick automaton, pyahocorasick).
- The rule's regular expression runs on RE2 (google-re2): linear in the text, so a hostile body costs time in
  proportion to its size, never backtracking. Every rule of the reference compiles on RE2; one that ever does
  not is listed in `ReferenceRules.not_compiled` and reported, never silently dropped.
- The secret is the rule's `secretGroup`, else the first non-empty capture group, else the whole match; a rule
  with `entropy` reports only a secret whose Shannon entropy is above it.
- Allowlists, global and per rule: `regexes` against the secret (or the match, or the line, by
  `regexTarget`), `stopwords` contained in the secret (lower case), `condition` OR or AND. Path and commit
  conditions never hold for a capture (it has neither), so an AND allowlist that needs one never applies, and a
  rule bound to a file path (`path`: `.php`, `.tf`, `nuget.config`, a `.p12` file) is not run.
- Not followed: the `gitleaks:allow` comment. A captured body is not source code its author vouched for; a
  harness or a provider could write that marker to wave a credential past intake.

Django-free and database-free, like the intake rules that call it (an import-linter contract keeps it so).
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Iterator
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
    counts: dict[str, int] = {}
    for char in data:
        counts[char] = counts.get(char, 0) + 1
    inverse = 1.0 / len(data.encode("utf-8"))
    return -sum((n * inverse) * math.log2(n * inverse) for n in counts.values())


_RE2_OPTIONS = re2.Options()
_RE2_OPTIONS.max_mem = 64 << 20  # the largest rules (generic-api-key's allowlist) need more than RE2's 8 MB


def _compile(pattern: str) -> Any:
    return re2.compile(pattern, options=_RE2_OPTIONS)


def _allowlist(raw: dict[str, Any]) -> Allowlist:
    regexes = raw.get("regexes") or []
    condition = str(raw.get("condition") or "OR").upper()
    return Allowlist(
        condition=condition,
        target=str(raw.get("regexTarget") or "secret"),
        regex=_compile("|".join(f"(?:{r})" for r in regexes)) if regexes else None,
        stopwords=tuple(sorted({str(s).lower() for s in raw.get("stopwords") or []})),
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
                        regex=_compile(raw["regex"]),
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
        self._automaton = ahocorasick.Automaton()
        by_keyword: dict[str, list[int]] = {}
        for i, rule in enumerate(self.rules):
            for keyword in rule.keywords:
                by_keyword.setdefault(keyword, []).append(i)
        for keyword, indexes in by_keyword.items():
            self._automaton.add_word(keyword, tuple(indexes))
        self._automaton.make_automaton()

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

    def find(self, text: str, lowered: str | None = None) -> Iterator[Hit]:
        lowered = text.lower() if lowered is None else lowered
        for index in self.candidates(lowered):
            yield from self._find_rule(self.rules[index], text)

    def _find_rule(self, rule: ReferenceRule, text: str) -> Iterator[Hit]:
        for m in rule.regex.finditer(text):
            match = m.group(0).strip("\n")
            if not match:
                continue
            start = m.start() + m.group(0).index(match)
            secret = match
            # gitleaks takes the groups of the pattern applied again to the trimmed match; untrimmed, that is this
            # match's own groups.
            if len(match) == len(m.group(0)):
                groups = m.groups()
            else:
                again = rule.regex.search(match)
                groups = again.groups() if again is not None else ()
            if groups:
                if rule.secret_group > 0:
                    if len(groups) < rule.secret_group:
                        continue
                    secret = groups[rule.secret_group - 1] or ""
                else:
                    secret = next((g for g in groups if g), secret)
            if not secret:
                continue
            if rule.entropy and shannon_entropy(secret) <= rule.entropy:
                continue
            line = _line_of(text, start, start + len(match))
            if _allowed(self.global_allowlists, secret, match, line) or _allowed(rule.allowlists, secret, match, line):
                continue
            yield Hit(rule.id, secret, match, start, start + len(match))


def _line_of(text: str, start: int, end: int) -> str:
    begin = text.rfind("\n", 0, start) + 1
    stop = text.find("\n", end)
    return text[begin : len(text) if stop == -1 else stop]


def _allowed(allowlists: tuple[Allowlist, ...], secret: str, match: str, line: str) -> bool:
    for allow in allowlists:
        if allow.needs_path_or_commit:
            continue
        target = match if allow.target == "match" else line if allow.target == "line" else secret
        by_regex = allow.regex is not None and target != "" and allow.regex.search(target) is not None
        low = secret.lower()
        by_stopword = any(word in low for word in allow.stopwords)
        if allow.condition == "AND":
            checks = ([by_regex] if allow.regex is not None else []) + ([by_stopword] if allow.stopwords else [])
            if checks and all(checks):
                return True
        elif by_regex or by_stopword:
            return True
    return False


_LOADED: ReferenceRules | None = None


def reference_rules() -> ReferenceRules:
    """The vendored rule set, compiled once per process."""
    global _LOADED
    if _LOADED is None:
        _LOADED = ReferenceRules.load()
    return _LOADED
