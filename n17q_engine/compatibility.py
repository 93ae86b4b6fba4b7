"""Compatibility rules: when the policy lets evidence from one workspace or tree stand for another's artifact.

Seed 003 ("False positives remained possible"): strict lineage can reject evidence that is genuinely valid for a
content-identical reconstructed workspace, so the policy may declare *explicit* compatibility rules based on
immutable tree, environment, command, inputs and test isolation. An admission then cites one by name
(`evidence.admitted.compatibility.rule`), and the lineage checker honours it only when the recorded facts satisfy
every part the rule constrains; a rule the policy does not declare, or one whose facts fail, leaves LIN001 standing
with the rule and the failing part named (docs/lineage.md).

Where rules are declared: `run.compatibility_rules` in the bundle manifest (an additive key, DESIGN §3 "extend,
don't rename"), the rules of the run's `policy_revision`, keyed by name:

    "compatibility_rules": {
      "pure-focused-suite": {
        "tree": "content_equal_ancestor",
        "environment": "same",
        "command": ["pytest -q tests/test_adapter.py"],
        "inputs": ["sha256:…"],
        "test_isolation": ["pure"],
        "rationale": "the focused suite reads only the tree and its pinned fixtures"
      }
    }

`tree` is required (a rule that does not pin the tree would let a green label stand for any code); the other
parts are optional, and a part a rule leaves out is not constrained. A key the checker does not know is refused
rather than ignored: a constraint nobody checks would read as one that holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .identifiers import MAX_ID_CHARS

# The tree part: the receipt ran at the artifact's exact tree (any workspace), or additionally in the artifact's own
# workspace or an ancestor it was derived from, with `content_equal: true` recorded on every derivation in between.
TREE_RELATIONS = ("identical", "content_equal_ancestor")
ENVIRONMENT_RELATIONS = ("same",)
# The parts pinned by a list of accepted values, each compared with the receipt field of the same meaning.
LISTED_PARTS = {"command": "command", "inputs": "inputs_digest", "test_isolation": "test_isolation"}
RULE_KEYS = frozenset({"tree", "environment", "rationale", *LISTED_PARTS})
MAX_RULES = 1000
MAX_LISTED = 1000


@dataclass(frozen=True, slots=True)
class Rule:
    name: str
    tree: str
    environment: str | None
    command: tuple[str, ...] | None
    inputs: tuple[str, ...] | None
    test_isolation: tuple[str, ...] | None


def rules_problem(value: Any) -> tuple[str, str] | None:
    """(field path under run.compatibility_rules, why) when `value` is not a valid declaration; None when it is."""
    if not isinstance(value, dict):
        return "", "must be an object keyed by rule name"
    if len(value) > MAX_RULES:
        return "", f"must declare at most {MAX_RULES} rules"
    for name, rule in value.items():
        if not name or len(name) > MAX_ID_CHARS:
            return f".{name[:MAX_ID_CHARS]}", f"a rule name must be 1 to {MAX_ID_CHARS} characters"
        where = f".{name}"
        if not isinstance(rule, dict):
            return where, "must be an object"
        unknown = sorted(set(rule) - RULE_KEYS)
        if unknown:
            known = ", ".join(sorted(RULE_KEYS))
            return f"{where}.{unknown[0]}", f"is not a part a compatibility rule may constrain ({known})"
        if rule.get("tree") not in TREE_RELATIONS:
            return f"{where}.tree", f"is required and must be one of {' | '.join(TREE_RELATIONS)}"
        if "environment" in rule and rule["environment"] not in ENVIRONMENT_RELATIONS:
            return f"{where}.environment", f"must be one of {' | '.join(ENVIRONMENT_RELATIONS)}"
        for part in LISTED_PARTS:
            if part not in rule:
                continue
            items = rule[part]
            if not isinstance(items, list) or not items or len(items) > MAX_LISTED:
                return f"{where}.{part}", f"must be a non-empty list of at most {MAX_LISTED} strings"
            for i, item in enumerate(items):
                if not isinstance(item, str) or not item:
                    return f"{where}.{part}[{i}]", "must be a non-empty string"
        if "rationale" in rule and not isinstance(rule["rationale"], str):
            return f"{where}.rationale", "must be a string"
    return None


def parse_rules(value: Any) -> dict[str, Rule]:
    """The declared rules of a manifest's `run`. Lenient: a graph built from a hand-made run dict may carry an
    invalid declaration (the bundle reader refuses one), and an invalid rule is simply not declared, so it cannot be
    honoured."""
    if not isinstance(value, dict):
        return {}
    out: dict[str, Rule] = {}
    for name, rule in value.items():
        if not isinstance(name, str) or rules_problem({name: rule}) is not None:
            continue
        listed = {part: tuple(rule[part]) if part in rule else None for part in LISTED_PARTS}
        out[name] = Rule(name, rule["tree"], rule.get("environment"), **listed)
    return out
