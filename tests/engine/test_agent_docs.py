"""Issue 36, point 2: docs/agents.md names the versions the worker's environment offers an agent, and they are the
installed ones (this test reads both, so the page cannot go stale)."""

from __future__ import annotations

import importlib.metadata
import platform
import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "agents.md"
SECTION = "### The versions the worker's environment offers"
MENTION = re.compile(r"\b(mcp-types|mcp|openai)(?:==| )(\d+\.\d+\.\d+)\b")
PYPROJECT = DOC.parents[1] / "pyproject.toml"


def _table() -> dict[str, str]:
    text = DOC.read_text(encoding="utf-8")
    assert SECTION in text, f"docs/agents.md has no section {SECTION!r}"
    section = text.split(SECTION, 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| ([A-Za-z][\w.-]*) \| ([0-9][0-9A-Za-z.+-]*) \|$", section, re.M)
    return dict(rows)


def _installed(name: str) -> str:
    if name == "Python":  # the minor version: a patch release of the interpreter changes nothing an agent sees
        return ".".join(platform.python_version_tuple()[:2])
    return importlib.metadata.version(name)


def test_the_documented_versions_are_the_installed_ones():
    table = _table()
    assert {"Python", "mcp", "openai"} <= set(table), table
    wrong = {
        name: (documented, _installed(name)) for name, documented in table.items() if documented != _installed(name)
    }
    assert not wrong, f"docs/agents.md names versions that are not installed (documented, installed): {wrong}"


def test_no_other_line_of_the_page_names_another_version_of_those_distributions():
    text = DOC.read_text(encoding="utf-8")
    table = _table()
    for name, version in MENTION.findall(text):
        pinned_example = f"{name}=={version}"  # a requirement an agent of its own may pin is an example, not a claim
        if pinned_example in text:
            continue
        assert version == table.get(name, _installed(name)), f"docs/agents.md names {name} {version}"


def test_the_project_pins_exactly_the_versions_the_page_promises():
    """A range in pyproject.toml would let a fresh worker install a newer mcp (2.x renamed fields) than the page
    names: the promise holds only if the install is pinned."""
    table = _table()
    text = PYPROJECT.read_text(encoding="utf-8")
    for name in ("mcp", "openai"):
        assert f'"{name}=={table[name]}"' in text, f"pyproject.toml does not pin {name}=={table[name]}"
