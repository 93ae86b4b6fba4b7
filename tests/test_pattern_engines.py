"""No user-supplied text reaches a backtracking regex engine (issue 35, point 1).

A pattern a user supplies (a mapping rule's `url`, a path template) is compiled by `n17q_engine.patterns` on RE2,
linear in the text. Python's `re` (and `fnmatch`, which translates to `re`, and the database's `__regex` lookups)
takes only patterns the code itself spells: a literal, or an expression of literals, module constants and
`re.escape` of those. This walks every module of the project and refuses any other pattern; a planted one shows
the check can fail.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.test_layers import PACKAGES

ROOT = Path(__file__).resolve().parent.parent
# The project's code: its packages, and the scripts and benchmarks that ship with it (tests spell their own).
SCANNED = (*PACKAGES, "scripts", "benchmarks")
# The functions of each backtracking module whose first argument is a pattern.
PATTERN_FUNCTIONS = {
    "re": {"compile", "match", "search", "fullmatch", "sub", "subn", "split", "findall", "finditer", "template"},
    "fnmatch": {"fnmatch", "fnmatchcase", "filter", "translate"},
}
BACKTRACKING_MODULES = ("re", "fnmatch", "regex", "sre_compile", "sre_parse")


def _constants(tree: ast.Module) -> set[str]:
    """Module-level names bound once, to a constant pattern expression (in order, so later ones may use earlier)."""
    bound: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            bound[node.id] = bound.get(node.id, 0) + 1
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Name) and bound[target.id] == 1 and _constant(node.value, names):
                    names.add(target.id)
    return names


def _constant(node: ast.expr, names: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, str | bytes | int)
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.JoinedStr):
        return all(_constant(v, names) for v in node.values)
    if isinstance(node, ast.FormattedValue):
        return _constant(node.value, names)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mod):
        return _constant(node.left, names) and _constant(node.right, names)
    if isinstance(node, ast.Tuple):
        return all(_constant(e, names) for e in node.elts)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.keywords:
        # re.escape(CONSTANT): the code's own text, quoted
        escapes = node.func.attr == "escape" and isinstance(node.func.value, ast.Name) and node.func.value.id == "re"
        return escapes and len(node.args) == 1 and _constant(node.args[0], names)
    return False


def offences(source: str, where: str) -> list[str]:
    """Each place `source` hands a backtracking engine a pattern that is not the code's own constant."""
    tree = ast.parse(source)
    names = _constants(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in BACKTRACKING_MODULES and node.level == 0:
            found.append(f"{where}:{node.lineno}: from {node.module} import …: call it as {node.module}.<name>")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in BACKTRACKING_MODULES and alias.asname not in (None, alias.name):
                    found.append(f"{where}:{node.lineno}: import {alias.name} as {alias.asname}")
                elif alias.name in ("regex", "sre_compile", "sre_parse"):
                    found.append(f"{where}:{node.lineno}: import {alias.name}: a backtracking engine")
        elif isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and isinstance(func.value, ast.Name)
                and func.attr in PATTERN_FUNCTIONS.get(func.value.id, ())
            ):
                named = (k.value for k in node.keywords if k.arg == "pattern")
                pattern = node.args[0] if node.args else next(named, None)
                if pattern is None or not _constant(pattern, names):
                    found.append(f"{where}:{node.lineno}: {func.value.id}.{func.attr}({ast.unparse(pattern or node)})")
            for keyword in node.keywords:
                lookup = keyword.arg or ""
                if (lookup.endswith("__regex") or lookup.endswith("__iregex")) and not _constant(keyword.value, names):
                    found.append(f"{where}:{node.lineno}: {lookup}={ast.unparse(keyword.value)}")
    return found


def test_every_backtracking_pattern_in_the_project_is_its_own_constant() -> None:
    found = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            found.extend(offences(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT))))
    assert not found, "patterns not spelled by the code reach a backtracking engine:\n" + "\n".join(found)


@pytest.mark.parametrize(
    "planted",
    [
        "import re\ndef rule(text):\n    return re.compile(text)\n",
        "import re\ndef hit(rule, url):\n    return re.search(rule['url'], url)\n",
        "import re\nPIECES = []\nPIECES.append('x')\nP = re.compile(''.join(PIECES))\n",
        "import re\nP = 'a'\nP = input()\nR = re.compile(P)\n",
        "import re\ndef f(p, s):\n    return re.fullmatch(pattern=p, string=s)\n",
        "from re import compile\n",
        "import re as regexp\n",
        "import regex\n",
        "import fnmatch\ndef f(names, p):\n    return fnmatch.filter(names, p)\n",
        "def f(q):\n    return Run.objects.filter(title__iregex=q)\n",
    ],
)
def test_the_check_refuses_a_planted_user_pattern(planted: str) -> None:
    assert offences(planted, "planted.py"), planted


@pytest.mark.parametrize(
    "kept",
    [
        "import re\nR = re.compile(r'^[a-z]+$')\n",
        "import re\nEND = '$'\nR = re.compile(r'^[a-z]+' + END)\n",
        "import re\nP = '+'\nR = re.compile('[a-z' + re.escape(P) + ']')\n",
        "import re\nN = 4\nR = re.compile(rf'[0-9a-f]{{{N}}}')\n",
        "import re\ndef f(s):\n    return re.sub(r'\\s+', ' ', s)\n",
    ],
)
def test_the_check_keeps_the_code_s_own_patterns(kept: str) -> None:
    assert offences(kept, "kept.py") == []
