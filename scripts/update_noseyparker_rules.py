"""Refresh the vendored Nosey Parker rules (the second reference rule set) from a Nosey Parker checkout.

    python scripts/update_noseyparker_rules.py PATH_TO_A_NOSEYPARKER_CHECKOUT

Copies every rule file and rule-set file of the checkout's HEAD (`crates/noseyparker/data/default/builtin/`), its
`LICENSE` and `NOTICE` into n17q_secrets/reference/ (the files unchanged; rule files no longer upstream are
removed) and writes the commit into that folder's README. Nothing is fetched: bring the repository here first (git
clone or a mirror; a bare repository works, only `git show` is used). The sibling of update_secret_rules.py, which
does the same for gitleaks'.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import yaml

HERE = Path(__file__).resolve().parent.parent / "n17q_secrets" / "reference"
TARGET = HERE / "noseyparker"
UPSTREAM = "crates/noseyparker/data/default/builtin"


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(checkout), *args], check=True, capture_output=True, text=True).stdout


def _show(checkout: Path, name: str) -> bytes:
    """A file of HEAD byte for byte (the files are vendored unchanged, line ends included)."""
    return subprocess.run(["git", "-C", str(checkout), "show", f"HEAD:{name}"], check=True, capture_output=True).stdout


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/update_noseyparker_rules.py PATH_TO_A_NOSEYPARKER_CHECKOUT", file=sys.stderr)
        return 2
    checkout = Path(argv[0])
    try:
        commit = _git(checkout, "rev-parse", "HEAD").strip()
        when = _git(checkout, "log", "-1", "--format=%cs").strip()
        names = _git(checkout, "ls-tree", "-r", "--name-only", "HEAD", UPSTREAM).split()
        files = {name: _show(checkout, name) for name in names if name.endswith((".yml", ".yaml"))}
        licence = _show(checkout, "LICENSE")
        notice = _show(checkout, "NOTICE")
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        print(f"not a Nosey Parker checkout: {checkout} ({exc})", file=sys.stderr)
        return 1
    if not files:
        print(f"no rule files under {UPSTREAM} in {checkout}", file=sys.stderr)
        return 1
    for folder in ("rules", "rulesets"):
        (TARGET / folder).mkdir(parents=True, exist_ok=True)
        for old in (TARGET / folder).glob("*.yml"):
            old.unlink()
    rules = 0
    for name, text in files.items():
        relative = Path(name).relative_to(UPSTREAM)
        (TARGET / relative).write_bytes(text)
        if relative.parts[0] == "rules":
            rules += len(yaml.safe_load(text).get("rules") or [])
    default = yaml.safe_load((TARGET / "rulesets" / "default.yml").read_text())
    in_default = len(next(r for r in default["rulesets"] if r["id"] == "default")["include_rule_ids"])
    (HERE / "LICENSE.noseyparker").write_bytes(licence)
    (HERE / "NOTICE.noseyparker").write_bytes(notice)
    readme = (HERE / "README.md").read_text()
    readme = re.sub(
        r"- Nosey Parker commit: `[0-9a-f]{40}` \(committed [0-9-]+\), \d+ rules, \d+ of them in the `default`",
        f"- Nosey Parker commit: `{commit}` (committed {when}), {rules} rules, {in_default} of them in the `default`",
        readme,
    )
    (HERE / "README.md").write_text(readme)
    print(f"Nosey Parker rules at {commit}: {rules} rules, {in_default} in the default rule set")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
