"""Issue 36, point 3: MCP tool names as OpenAI function names (`n17q_engine.agent.names`), and back."""

from __future__ import annotations

import json

import pytest

from n17q_demo import seed_scenarios
from n17q_engine.agent.model import MODEL_TOOL
from n17q_engine.agent.names import OPENAI_NAME, openai_name, tool_name


def _contract_tools() -> list[str]:
    names: set[str] = {MODEL_TOOL}
    for package in seed_scenarios.seed_packages():
        names |= {c["tool"] for c in json.loads(package.files["contracts.json"])}
    return sorted(names)


def test_every_contract_name_of_the_demo_scenarios_maps_to_a_valid_openai_name_and_back():
    tools = _contract_tools()
    assert "shell.run" in tools and "email.draft_create" in tools
    mapped = {openai_name(t): t for t in tools}
    assert len(mapped) == len(tools)  # no two share a name
    for name, tool in mapped.items():
        assert OPENAI_NAME.match(name), name
        assert tool_name(name) == tool
        assert name not in tools or name == tool  # no OpenAI name is another tool's contract name
    assert openai_name("shell.run") == "shell--run" and openai_name("email.draft_create") == "email--draft_create"


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        ("a-b.c", "a-_b--c"),
        ("a_.b", "a_--b"),
        ("a._b", "a--_b"),
        ("x:y@z", "x-x3a_y-x40_z"),
        ("caf\u00e9.get", "caf-xe9_--get"),
        ("plain_name", "plain_name"),
    ],
)
def test_the_rule_escapes_every_character_outside_the_openai_alphabet_reversibly(tool, expected):
    assert openai_name(tool) == expected
    assert tool_name(expected) == tool


def test_names_that_would_collide_under_a_naive_dot_rule_stay_apart():
    # `.` -> `__` would map both to `a___b`
    assert openai_name("a_.b") != openai_name("a._b")


def test_a_name_too_long_for_openai_is_hashed_to_64_characters_and_not_read_back_by_the_rule():
    tool = "very.long." + "x" * 80
    name = openai_name(tool)
    assert len(name) == 64 and OPENAI_NAME.match(name) and "-h" in name
    assert tool_name(name) is None
    assert openai_name(tool + "y") != name


@pytest.mark.parametrize("bad", ["a-", "a-q", "a-x_", "a-xZZ_", "a-x0041_", "a b", "a.b"])
def test_a_string_that_is_no_encoding_reads_back_as_none(bad):
    assert tool_name(bad) is None
