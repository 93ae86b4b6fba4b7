"""`run.title` (DESIGN §10) in the engine: what the bundle reader takes as a run's name, and the name a replay's
run gets from its source's."""

from __future__ import annotations

import json

import pytest

from n17q_engine.bundle import MAX_TITLE_CHARS, BundleError, parse_manifest, run_title, title_problem

from ..bundles import EXAMPLE


def manifest_with(title: object) -> bytes:
    manifest = json.loads((EXAMPLE / "manifest.json").read_text())
    manifest["run"]["title"] = title
    return json.dumps(manifest).encode()


@pytest.mark.parametrize(
    "title",
    [
        "Key rotation research",
        "  padded  ",
        "",
        "日本語のタイトル 🚀",
        "é" * MAX_TITLE_CHARS,
        " " + "x" * MAX_TITLE_CHARS + " ",
    ],
)
def test_it_takes_one_line_of_printable_text_as_a_title(title):
    manifest = parse_manifest(manifest_with(title))
    assert title_problem(title) is None
    assert run_title(manifest.run) == title.strip()


def test_it_takes_a_manifest_without_a_title_or_with_a_null_one():
    assert run_title(parse_manifest((EXAMPLE / "manifest.json").read_bytes()).run) == ""
    assert run_title(parse_manifest(manifest_with(None)).run) == ""


@pytest.mark.parametrize(
    ("title", "problem"),
    [
        (7, "must be a string, got int"),
        (True, "must be a string, got bool"),
        ({"text": "x"}, "must be a string, got dict"),
        ("x" * (MAX_TITLE_CHARS + 1), f"must be at most {MAX_TITLE_CHARS} characters"),
        ("line one\r\nline two", "must be one line of printable text (holds U+000D)"),
        ("bell\x07", "must be one line of printable text (holds U+0007)"),
        ("next\x85line", "must be one line of printable text (holds U+0085)"),
        ("sep\u2028arated", "must be one line of printable text (holds U+2028)"),
        ("isolated \u2066text\u2069", "must be one line of printable text (holds U+2066)"),
    ],
)
def test_it_refuses_a_title_that_cannot_name_a_run_with_the_field_named(title, problem):
    assert title_problem(title) == problem
    with pytest.raises(BundleError) as refused:
        parse_manifest(manifest_with(title))
    assert str(refused.value) == f"manifest.json, field run.title: {problem}"
    assert "\n" not in str(refused.value)


def test_a_replay_title_is_its_own_and_keeps_short_enough():
    """Issue 34: a replay is named from its own facts, never its source's words (a counterfactual that opened
    nothing is not "Review request opened…"); long destinations are cut to fit."""
    from n17q_engine.facts import replay_title, run_facts
    from tests.engine.eventlib import EventLog

    log = EventLog()
    log.emit(
        "effect.intent",
        artifact_id=None,
        admission_ids=[],
        idempotency_key="k",
        destination="mailbox:" + "x" * MAX_TITLE_CHARS,
    )
    log.emit("run.state", state="completed")
    long = replay_title("rerun", "run-1", run_facts(log.run, log.events), MAX_TITLE_CHARS)
    assert len(long) == MAX_TITLE_CHARS and long.startswith("Rerun of run-1: nothing delivered to mailbox:xxx")
    assert long.endswith("\u2026") and title_problem(long) is None
