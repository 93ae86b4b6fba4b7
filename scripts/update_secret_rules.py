"""Refresh the vendored reference secret rules from a gitleaks checkout.

    python scripts/update_secret_rules.py PATH_TO_A_GITLEAKS_CHECKOUT

Copies `config/gitleaks.toml` and `LICENSE` from the checkout's HEAD into n17q_secrets/reference/ and writes
the commit into that folder's README. Nothing is fetched: bring the repository here first (git clone or a mirror).
"""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent / "n17q_secrets" / "reference"


def _git(checkout: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(checkout), *args], check=True, capture_output=True, text=True).stdout


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python scripts/update_secret_rules.py PATH_TO_A_GITLEAKS_CHECKOUT", file=sys.stderr)
        return 2
    checkout = Path(argv[0])
    try:
        commit = _git(checkout, "rev-parse", "HEAD").strip()
        when = _git(checkout, "log", "-1", "--format=%cs").strip()
        rules = _git(checkout, "show", "HEAD:config/gitleaks.toml")
        licence = _git(checkout, "show", "HEAD:LICENSE")
    except (subprocess.CalledProcessError, FileNotFoundError) as exc:
        print(f"not a gitleaks checkout: {checkout} ({exc})", file=sys.stderr)
        return 1
    config = tomllib.loads(rules)
    (HERE / "gitleaks.toml").write_text(rules)
    (HERE / "LICENSE.gitleaks").write_text(licence)
    readme = (HERE / "README.md").read_text()
    readme = re.sub(
        r"- Commit: `[0-9a-f]{40}` \(committed [0-9-]+\), rule-set `minVersion = \"[^\"]*\"`,\n  \d+ rules\.",
        f'- Commit: `{commit}` (committed {when}), rule-set `minVersion = "{config.get("minVersion", "")}"`,\n'
        f"  {len(config.get('rules', []))} rules.",
        readme,
    )
    (HERE / "README.md").write_text(readme)
    print(f"gitleaks rules at {commit}: {len(config.get('rules', []))} rules")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
