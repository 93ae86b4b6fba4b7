"""The repository itself: nothing in it depends on the machine it was written on."""

from __future__ import annotations

import filecmp
import re
import subprocess
from pathlib import Path

import pytest

from .bundles import EXAMPLE

ROOT = Path(__file__).resolve().parent.parent
SHARED = ROOT.parent / "shared"

# Folders that exist only on a development or CI machine: a tracked file naming one would work there and
# nowhere else (a fresh clone, a container, another developer). System paths (/usr/bin/chromium, /etc/…,
# /proc/…, /var/run/postgresql/…) are the same on every machine of the kind and are not matched.
MACHINE_PATH = re.compile(r"(?<![\w.~-])/(?:work|root|home|Users|mnt/data|opt/pypi)/[\w.-]+")
# Other projects' files kept byte for byte with their licence and origin (their README says which commit): a path in
# one (Nosey Parker's Jenkins rule names where Jenkins keeps its password) is that project's text, not this machine's.
# Files real producers made (tests/data/producers/, ORIGIN.md) are kept as made: an exception event's stack trace in
# a trace names the paths of the machine that produced it, as a production trace would.
VENDORED = ("n17q_secrets/reference/noseyparker/", "tests/data/producers/")
TEXT_SUFFIXES = {".py", ".toml", ".md", ".txt", ".cfg", ".ini", ".yaml", ".yml", ".json", ".sh", ".html", ".js", ".css"}


def _tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    names = [name for name in out.decode().split("\0") if name]
    return [
        ROOT / n
        for n in names
        if (Path(n).suffix in TEXT_SUFFIXES or Path(n).name in {"Makefile", "run"}) and not n.startswith(VENDORED)
    ]


def test_it_names_no_absolute_path_of_a_development_machine():
    found = []
    for path in _tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if MACHINE_PATH.search(line):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert found == [], "absolute paths of a development machine:\n" + "\n".join(found)


@pytest.mark.parametrize(
    ("line", "flagged"),
    [
        # Built from pieces so that this file does not hold what it looks for.
        ('EXAMPLE = Path("/' + 'work/shared/examples/run-bundle")', True),
        ("cd /" + "root/project && make", True),
        ("see /" + "home/dev/n17q/README.md", True),
        ('CHROMIUM = "/usr/bin/chromium"', False),
        ("socket at /var/run/postgresql/.s.PGSQL.5432", False),
        ('Path(__file__).resolve().parent / "data"', False),
        ("https://example.org/work/items", False),
        ("../shared/examples/run-bundle", False),
    ],
)
def test_the_machine_path_rule_flags_only_machine_folders(line, flagged):
    assert bool(MACHINE_PATH.search(line)) is flagged


def test_the_vendored_example_bundle_is_the_shared_one():
    """tests/data keeps a copy of ../shared/examples/run-bundle so tests run without shared/; it must not drift."""
    shared = SHARED / "examples" / "run-bundle"
    if not shared.is_dir():
        pytest.skip("../shared is not beside this checkout")
    comparison = filecmp.dircmp(shared, EXAMPLE)
    assert (comparison.left_only, comparison.right_only, comparison.diff_files) == ([], [], [])
