"""docs/seeds.md, checked line by line: each sentence is in its story under the heading named, each test exists and
carries the same `seed` marker, and each test that carries a `seed` marker has a row.

The stories are read from ../shared/seeds, beside the checkout (as CI has it)."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT.parent / "shared" / "seeds"
TABLE = ROOT / "docs" / "seeds.md"

ROW = re.compile(
    r"^\|\s*(?P<story>\d{3})\s*·\s*(?P<section>[^|]+?)\s*"
    r"\|\s*(?P<sentence>[^|]+?)\s*\|(?P<built>[^|]+)\|(?P<tests>[^|]+)\|\s*$"
)
NODE = re.compile(r"(tests/[\w/]+\.py)::([\w:]+)")
BUILT_PATH = re.compile(r"`((?:[\w-]+/)+[\w.-]+\.(?:py|html|md|json|css|js))")


@dataclass(frozen=True)
class Row:
    line: int
    story: str
    section: str
    sentence: str
    built: str
    tests: tuple[tuple[str, str], ...]


def _normal(text: str) -> str:
    quotes: dict[str, str | int | None] = {"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"}
    text = text.translate(str.maketrans(quotes))
    return re.sub(r"\s+", " ", text).strip()


@cache
def _story_sections(story: str) -> dict[str, str]:
    """The story's text per section heading (a heading is a short line that does not end a sentence)."""
    matches = sorted(SEEDS.glob(f"{story}_*.txt"))
    assert matches, f"no story {story} in ../shared/seeds"
    sections: dict[str, list[str]] = {}
    current = ""
    for raw in matches[0].read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line:
            continue
        if len(line) < 90 and not line.endswith((".", ":", "?", '"', "”")) and not line.startswith("•"):
            current = line
            sections.setdefault(current, [])
            continue
        sections.setdefault(current, []).append(line)
    return {heading: _normal(" ".join(lines)) for heading, lines in sections.items()}


def _rows() -> list[Row]:
    rows = []
    for number, line in enumerate(TABLE.read_text(encoding="utf-8").splitlines(), 1):
        match = ROW.match(line)
        if match is None:
            continue
        sentence = match["sentence"].strip()
        assert sentence.startswith('"') and sentence.endswith('"'), f"docs/seeds.md:{number}: quote the sentence"
        rows.append(
            Row(
                line=number,
                story=match["story"],
                section=match["section"].strip(),
                sentence=sentence[1:-1],
                built=match["built"].strip(),
                tests=tuple(NODE.findall(match["tests"])),
            )
        )
    return rows


def _seed_markers(decorators: list[ast.expr]) -> list[tuple[str, str]]:
    found = []
    for decorator in decorators:
        if (
            isinstance(decorator, ast.Call)
            and isinstance(decorator.func, ast.Attribute)
            and decorator.func.attr == "seed"
            and len(decorator.args) == 2
            and all(isinstance(arg, ast.Constant) and isinstance(arg.value, str) for arg in decorator.args)
        ):
            story, section = (arg.value for arg in decorator.args)  # type: ignore[attr-defined]
            found.append((story, section))
    return found


def _module_pytestmark(tree: ast.Module) -> list[tuple[str, str]]:
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "pytestmark" for target in node.targets
        ):
            values = node.value.elts if isinstance(node.value, ast.List | ast.Tuple) else [node.value]
            return _seed_markers(list(values))
    return []


@cache
def _marked_tests() -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(file, Class::function or function) → its seed markers, for every test under tests/ that has any."""
    out: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        text = path.read_text(encoding="utf-8")
        if ".seed(" not in text:
            continue
        tree = ast.parse(text)
        module_marks = _module_pytestmark(tree)
        relative = str(path.relative_to(ROOT))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("test"):
                marks = module_marks + _seed_markers(node.decorator_list)
                if marks:
                    out[(relative, node.name)] = marks
            elif isinstance(node, ast.ClassDef):
                class_marks = module_marks + _seed_markers(node.decorator_list)
                for item in node.body:
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef) and item.name.startswith("test"):
                        marks = class_marks + _seed_markers(item.decorator_list)
                        if marks:
                            out[(relative, f"{node.name}::{item.name}")] = marks
    return out


needs_seeds = pytest.mark.skipif(not SEEDS.is_dir(), reason="../shared/seeds is not beside this checkout")


def test_the_table_has_rows():
    rows = _rows()
    assert rows, "docs/seeds.md holds no rows"
    assert all(row.tests for row in rows), [row.line for row in rows if not row.tests]


@needs_seeds
def test_each_sentence_is_in_its_story_under_the_heading_named():
    wrong = []
    for row in _rows():
        sections = _story_sections(row.story)
        if row.section not in sections:
            wrong.append(f"docs/seeds.md:{row.line}: story {row.story} has no section {row.section!r}")
            continue
        for fragment in _normal(row.sentence).split(" … "):
            if fragment.strip(" .…") not in sections[row.section]:
                wrong.append(f"docs/seeds.md:{row.line}: not in {row.story} · {row.section}: {fragment[:80]!r}")
    assert wrong == [], "\n".join(wrong)


def test_each_place_named_as_built_exists():
    missing = [
        f"docs/seeds.md:{row.line}: {path}"
        for row in _rows()
        for path in BUILT_PATH.findall(row.built)
        if not (ROOT / path).exists()
    ]
    assert all(BUILT_PATH.search(row.built) for row in _rows()), "a row names no file where it is built"
    assert missing == [], "\n".join(missing)


def test_each_test_named_exists_and_cites_the_same_seed_section():
    marked = _marked_tests()
    wrong = []
    for row in _rows():
        for path, name in row.tests:
            marks = marked.get((path, name))
            if marks is None:
                wrong.append(f"docs/seeds.md:{row.line}: {path}::{name} does not exist or carries no seed marker")
            elif (row.story, row.section) not in marks:
                wrong.append(f"docs/seeds.md:{row.line}: {path}::{name} cites {marks}, not {row.story} · {row.section}")
    assert wrong == [], "\n".join(wrong)


def test_each_test_with_a_seed_marker_has_a_row():
    listed = {test for row in _rows() for test in row.tests}
    unlisted = [f"{path}::{name}" for (path, name) in _marked_tests() if (path, name) not in listed]
    assert unlisted == [], "tests citing a seed with no row in docs/seeds.md:\n" + "\n".join(unlisted)


@needs_seeds
def test_each_seed_marker_names_a_real_section():
    wrong = [
        f"{path}::{name}: {story} · {section}"
        for (path, name), marks in _marked_tests().items()
        for story, section in marks
        if section not in _story_sections(story)
    ]
    assert wrong == [], "\n".join(wrong)


def test_a_sentence_not_in_its_section_is_refused():
    """The check can fail: a sentence moved to another heading is caught."""
    if not SEEDS.is_dir():
        pytest.skip("../shared/seeds is not beside this checkout")
    sections = _story_sections("000")
    assert "Unknown fixture data stayed unknown" in sections
    assert (
        "N17Q represented absent, redacted, unavailable, and not applicable separately"
        in sections["Unknown fixture data stayed unknown"]
    )
    assert "N17Q represented absent, redacted" not in sections["Concurrency was recorded as behavior"]
