"""The identifier grammar's fast path for ASCII ids (n17q_engine.identifiers) answers exactly as the character loop it
skips: the same first bad character, so the same refusal, on any text at all."""

from __future__ import annotations

import unicodedata

from hypothesis import given, settings
from hypothesis import strategies as st

from n17q_engine import identifiers
from n17q_engine.identifiers import ID_PUNCTUATION, MAX_ID_CHARS, id_problem
from tests.hypothesis_budget import examples


def _loop_bad_character(value: str) -> str | None:
    """The grammar's character test as it read before the fast path: one character at a time."""
    ok = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" + ID_PUNCTUATION)
    for char in value:
        if char in ok:
            continue
        if ord(char) >= 128 and unicodedata.category(char)[0] in "LMN":
            continue
        return char
    return None


def _loop_id_problem(value: str, *, what: str = "an id", max_len: int = MAX_ID_CHARS) -> str | None:
    """`id_problem` on the loop alone (the fast path switched off), for the same text."""
    original = identifiers._ASCII_ID
    identifiers._ASCII_ID = _NeverMatches()  # type: ignore[assignment]
    try:
        return id_problem(value, what=what, max_len=max_len)
    finally:
        identifiers._ASCII_ID = original


class _NeverMatches:
    def fullmatch(self, _value: str) -> None:
        return None


# Mostly the characters ids are made of, with the ones next to them in ASCII (space, "/", "\\", "`", "[", "{", DEL,
# controls) and any Unicode at all (letters, marks, format characters, surrogates).
_NEAR_ASCII = st.characters(min_codepoint=0, max_codepoint=0x7F)
_ANY = st.characters()
_TEXT = st.one_of(
    st.text(st.sampled_from("aZ09" + ID_PUNCTUATION), max_size=30),
    st.text(_NEAR_ASCII, max_size=30),
    st.text(st.one_of(_NEAR_ASCII, _ANY), max_size=30),
    st.text(_ANY, max_size=30),
)


@settings(max_examples=examples(2000), deadline=None)
@given(_TEXT)
def test_fast_path_finds_the_same_first_bad_character(value):
    assert identifiers._bad_character(value) == _loop_bad_character(value)


@settings(max_examples=examples(1000), deadline=None)
@given(_TEXT, st.integers(min_value=1, max_value=40))
def test_fast_path_gives_the_same_answer_and_message(value, max_len):
    assert id_problem(value, what="an event id", max_len=max_len) == _loop_id_problem(
        value, what="an event id", max_len=max_len
    )


def test_fast_path_examples():
    for value in ("4dad2986-ce83-4960-aa06-e9ab85a0bcc1", "att-1", "sha256:" + "a" * 64, "a~b=c+d@e:f.g_h-i"):
        assert identifiers._bad_character(value) is None
    # Near misses the regex must not take: a trailing newline ($ would), a space, a slash, a non-ASCII letter.
    assert identifiers._bad_character("att-1\n") == "\n"
    assert identifiers._bad_character("a b") == " "
    assert identifiers._bad_character("a/b") == "/"
    assert identifiers._bad_character("caf\u00e9") is None
    assert identifiers._bad_character("run\u200b-1") == "\u200b"
