"""n17q_engine.patterns: a user's pattern on RE2, or a one-line refusal naming the field and RE2's reason."""

from __future__ import annotations

import subprocess
import sys

import pytest

from n17q_engine import patterns
from n17q_engine.patterns import PatternError, compile_pattern


def test_named_groups_that_took_part_are_answered() -> None:
    pattern = compile_pattern(r"/(?P<kind>users|orders)(?:/(?P<id>\d+))?$", field="url")
    assert pattern.search("https://h.example/orders/42") == {"kind": "orders", "id": "42"}
    assert pattern.search("https://h.example/users") == {"kind": "users"}
    assert pattern.search("https://h.example/items") is None
    assert pattern.fullmatch("/users") == {"kind": "users"} and pattern.fullmatch("https://h.example/users") is None


def test_texts_are_matched_as_utf8_with_offsets_in_characters() -> None:
    pattern = compile_pattern(r"é(?P<rest>\pL+)", field="url")
    assert pattern.search("xxéàçü!") == {"rest": "àçü"}
    # A lone surrogate (JSON can spell one) is matched as its bytes, never a UnicodeEncodeError.
    assert compile_pattern(r"a(?P<x>.*)b", field="url").search("a\ud800b") is not None


def test_escape_quotes_every_literal_character() -> None:
    literal = "/v1.0/a+b(c)[d]{e}*?^$|\\é"
    assert compile_pattern(patterns.escape(literal), field="path").fullmatch(literal) == {}
    assert compile_pattern(patterns.escape(literal), field="path").fullmatch("/v1x0/a+b(c)[d]{e}*?^$|\\é") is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (r"(a)\1", "invalid escape sequence: \\1"),
        (r"(?=a)", "invalid perl operator: (?="),
        (r"(?<=a)b", "invalid perl operator: (?<="),
        (r"a\Z", "invalid escape sequence: \\Z"),
        ("[\n", "missing ]: [\\n"),  # RE2's reason quotes the pattern: still one line
        (r"(?:\pL|\pN){1000}", "pattern too large - compile failed"),
    ],
)
def test_what_re2_cannot_run_is_one_line_naming_the_field(text: str, reason: str) -> None:
    with pytest.raises(PatternError) as refused:
        compile_pattern(text, field="mapping rule 3: url")
    said = str(refused.value)
    assert said == (
        f"mapping rule 3: url: RE2 cannot run this pattern ({reason}); patterns run on RE2, in time linear in the"
        " text: no backreferences or lookaround"
    )


def test_a_refusal_writes_nothing_to_stderr() -> None:
    """RE2 logs its parse errors to stderr by default: a command's refusal must stay its one line."""
    code = (
        "from n17q_engine.patterns import compile_pattern as c\n"
        "try:\n    c('(?=a)', field='f')\nexcept ValueError:\n    pass\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == ""


def test_the_catastrophic_pattern_answers() -> None:
    """Guarded by a subprocess timeout (generous; RE2 answers at once): in Python `re` this never ends."""
    code = (
        "from n17q_engine.patterns import compile_pattern as c\n"
        "p = c(r'^https://status\\.example/(a+)+$', field='url')\n"
        "print(p.search('https://status.example/' + 'a' * 33 + '!'), p.search('https://status.example/' + 'a' * 33))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout == "None {}\n", done.stderr
