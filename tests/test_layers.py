"""The house's direction holds, and the contract that says so can fail.

`lint-imports` (run by `make test`) checks pyproject's contracts on the tree as it is. These tests run it on a copy
of the project's packages: clean, it keeps every contract; with one back-edge planted (a lower layer importing
a higher one) the layers contract breaks and names the edge. A contract that cannot fail would prove nothing.
Every cycle between two modules is refused too: the layers order packages, this orders modules within them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = (
    "n17q_engine",
    "n17q_secrets",
    "n17q_demo",
    "console",
    "accounts",
    "runs",
    "fixtures_review",
    "replays",
    "otlp_receiver",
    "n17q_site",
)
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def _copy(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    shutil.copy(ROOT / "pyproject.toml", tree / "pyproject.toml")
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tree / package, ignore=shutil.ignore_patterns("__pycache__"))
    return tree


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_contracts_hold_on_the_tree_as_it_is(tmp_path: Path) -> None:
    result = _lint(_copy(tmp_path))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout and "Layers: site -> replays" in result.stdout


@pytest.mark.parametrize(
    ("module", "back_edge", "named"),
    [
        ("runs/selectors.py", "from replays import models as _back_edge", "runs is not allowed to import replays"),
        ("accounts/roles.py", "import runs.models as _back_edge", "accounts is not allowed to import runs"),
        ("replays/launch.py", "from n17q_site import health as _back_edge", "replays is not allowed to import n17q"),
        ("fixtures_review/services.py", "import replays.services as _back_edge", "fixtures_review is not allowed"),
    ],
)
def test_the_layers_contract_breaks_on_a_back_edge(tmp_path: Path, module: str, back_edge: str, named: str) -> None:
    tree = _copy(tmp_path)
    target = tree / module
    target.write_text(target.read_text() + f"\n{back_edge}  # planted by the test\n")
    result = _lint(tree)
    assert result.returncode != 0
    assert "Layers: site -> replays" in result.stdout and "BROKEN" in result.stdout
    assert named in result.stdout


def test_no_two_modules_import_each_other() -> None:
    import grimp

    sys.path.insert(0, str(ROOT))
    try:
        graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))
    cycles = []
    for module in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(module)):
            if graph.chain_exists(importer=imported, imported=module):
                cycles.append((module, graph.find_shortest_chain(importer=imported, imported=module)))
    assert cycles == []
