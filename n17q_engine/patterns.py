"""Patterns a user supplies, compiled here and nowhere else: on RE2, never on Python's `re`.

Python's `re` backtracks: a mapping rule's `^https://status\\.example/(a+)+$` against a URL of 33 a's and a `!`
tries every way to split the run (2^33) before it says no, and the request that carries it never answers (issue
35). RE2 answers in time linear in the text, in memory bounded by its budget (`MAX_PATTERN_MEMORY` per pattern).
What RE2 cannot run (backreferences, lookaround, possessive repeats, more than 1000 repeats, a program larger
than the budget) is refused when the pattern is defined (a mapping read, a rule saved), as `PatternError`: one
line naming the field and RE2's reason. Such a pattern is not a pattern here; nothing falls back to `re`.

The syntax is RE2's (github.com/google/re2/wiki/Syntax), which is Python's for everything RE2 runs except:
`\\Z` is spelled `\\z`; `\\d`, `\\w`, `\\s` and `\\b` are ASCII (`\\pL`, `\\pN` are the Unicode classes); `$` without
`(?m)` is the end of the text only. Texts are matched as UTF-8 (a lone surrogate is kept as its bytes).

tests/test_pattern_engines.py keeps every other pattern of the project a constant of the code, so no
user-supplied text reaches `re`. Pure (no Django), so every layer may use it.
"""

from __future__ import annotations

from typing import Any

import re2

MAX_PATTERN_MEMORY = 1 << 20  # RE2's budget for one pattern's program and DFA cache (its default is 8 MiB)
MAX_REASON_CHARS = 200

_OPTIONS = re2.Options()
_OPTIONS.max_mem = MAX_PATTERN_MEMORY
_OPTIONS.log_errors = False  # the refusal is our one line; RE2 would also write its own to stderr

_UNANCHORED = re2._Anchor.UNANCHORED
_BOTH = re2._Anchor.ANCHOR_BOTH

WHAT_RE2_RUNS = "patterns run on RE2, in time linear in the text: no backreferences or lookaround"


class PatternError(ValueError):
    """A user's pattern RE2 cannot run: one line naming the field and RE2's reason."""


class UserPattern:
    """A compiled user pattern: `search` (anywhere in the text) and `fullmatch` (the whole text) answer the named
    groups that took part, {name: text}, or None when it does not match."""

    __slots__ = ("_names", "_regexp", "text")

    def __init__(self, text: str, regexp: Any) -> None:
        self.text = text
        self._regexp = regexp._regexp  # RE2 itself: google-re2's wrapper would re-encode per call and cache
        self._names = tuple(
            (name.decode("utf-8"), index) for name, index in sorted(regexp._regexp.NamedCapturingGroups())
        )

    def __repr__(self) -> str:
        return f"UserPattern({self.text!r})"

    def search(self, text: str) -> dict[str, str] | None:
        return self._run(_UNANCHORED, text)

    def fullmatch(self, text: str) -> dict[str, str] | None:
        return self._run(_BOTH, text)

    def _run(self, anchor: Any, text: str) -> dict[str, str] | None:
        data = text.encode("utf-8", "surrogatepass")
        spans = self._regexp.Match(anchor, data, 0, len(data))
        if spans[0][0] == -1:
            return None
        groups = {}
        for name, index in self._names:
            start, end = spans[index]
            if start != -1:
                groups[name] = _decode(data[start:end])
        return groups


def compile_pattern(text: str, *, field: str) -> UserPattern:
    """`text` (a regular expression a user wrote) on RE2; PatternError naming `field` when RE2 cannot run it."""
    try:
        return UserPattern(text, re2._Regexp(text.encode("utf-8", "surrogatepass"), _OPTIONS))
    except re2.error as exc:
        raise PatternError(f"{field}: RE2 cannot run this pattern ({_reason(exc)}); {WHAT_RE2_RUNS}") from None


def escape(text: str) -> str:
    """`text` as a pattern matching exactly it (RE2's QuoteMeta), to build a pattern from a user's literal text."""
    return _decode(re2._re2.RE2.QuoteMeta(text.encode("utf-8", "surrogatepass")))


def _decode(data: bytes) -> str:
    try:
        return data.decode("utf-8", "surrogatepass")
    except UnicodeDecodeError:  # a group that ends inside a byte sequence that is not UTF-8
        return data.decode("utf-8", "replace")


def _reason(exc: Exception) -> str:
    raw = exc.args[0] if exc.args else ""
    said = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    one_line = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in said)
    if len(one_line) > MAX_REASON_CHARS:
        one_line = one_line[: MAX_REASON_CHARS - 1] + "…"
    return one_line or "not a pattern"
