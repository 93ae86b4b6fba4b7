"""The path-glob matcher (n17q_engine/path_globs.py) answers as the plain set-of-positions walk it replaced: the glob
compiled once, a path lacking the glob's literal head or tail refused before the walk, and a `PathGlobs` keeping each
path's answer change no answer (the import's LIN017 check relies on them, docs/decisions.md)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from n17q_engine import path_globs
from n17q_engine.lineage.graph import DEFAULT_TEST_PATHS
from n17q_engine.path_globs import PathGlobs, matches_any, path_matches
from tests.hypothesis_budget import examples


def walk(path: str, glob: str) -> bool:
    """The matcher as it was first written (9e4f500): tokenised on every call, every path walked."""
    tokens: list[str] = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            tokens.append("**/")
            i += 3
        elif glob.startswith("**", i):
            tokens.append("**")
            i += 2
        else:
            tokens.append(glob[i])
            i += 1
    positions = {0}
    for token in tokens:
        nxt: set[int] = set()
        for j in positions:
            if token == "**":
                nxt.update(range(j, len(path) + 1))
            elif token == "**/":
                nxt.add(j)
                nxt.update(k + 1 for k in range(j, len(path)) if path[k] == "/")
            elif token == "*":
                k = j
                nxt.add(k)
                while k < len(path) and path[k] != "/":
                    k += 1
                    nxt.add(k)
            elif token == "?":
                if j < len(path) and path[j] != "/":
                    nxt.add(j + 1)
            elif j < len(path) and path[j] == token:
                nxt.add(j + 1)
        positions = nxt
        if not positions:
            return False
    return len(path) in positions


# Few letters, so that generated paths and globs meet often (matches as well as misses).
_PATH_CHARS = st.sampled_from(["a", "b", "t", ".", "/", "_"])
_GLOB_PARTS = st.sampled_from(["a", "b", "t", ".", "/", "_", "*", "**", "**/", "?"])
paths = st.lists(_PATH_CHARS, max_size=14).map("".join)
globs = st.lists(_GLOB_PARTS, max_size=8).map("".join)


@settings(max_examples=examples(2000), deadline=None)
@given(path=paths, glob=globs)
def test_the_matcher_answers_as_the_plain_walk(path: str, glob: str) -> None:
    assert path_matches(path, glob) is walk(path, glob)


@settings(max_examples=examples(300), deadline=None)
@given(names=st.lists(paths, max_size=30), chosen=st.lists(globs, max_size=5))
def test_a_glob_set_answers_as_matching_each_path(names: list[str], chosen: list[str]) -> None:
    matcher = PathGlobs(chosen)
    for name in names + names:  # asked twice: the kept answer is the answer
        assert matcher.matches(name) is any(walk(name, g) for g in chosen)


def test_the_default_test_paths_as_the_walk_reads_them() -> None:
    names = [
        "tests/test_invoice.py",
        "src/billing/tests/helpers.py",
        "src/billing/invoice.py",
        "src/billing/test_invoice.py",
        "pkg/invoice_test.go",
        "web/app.spec.ts",
        "conftest.py",
        "a/conftest.py",
        "pytest.ini",
        "sub/pytest.ini",
        "test/x",
        "testing/x.py",
        "",
    ]
    matcher = PathGlobs(DEFAULT_TEST_PATHS)
    for name in names:
        expected = any(walk(name, g) for g in DEFAULT_TEST_PATHS)
        assert matches_any(name, DEFAULT_TEST_PATHS) is expected
        assert matcher.matches(name) is expected


def test_a_glob_set_keeps_a_bounded_number_of_answers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(path_globs, "MEMO_PATHS", 3)
    matcher = PathGlobs(["tests/**"])
    answers = [matcher.matches(f"tests/{i}.py") for i in range(10)] + [matcher.matches("src/x.py")]
    assert answers == [True] * 10 + [False]
    assert len(matcher._answers) == 3
