"""Build the `n17q-replay` wheel: the engine and its pytest plugin, for a user's CI (docs/replay-in-ci.md).

    python scripts/build_replay_wheel.py [OUT_DIR]        (default: dist/)

The repository's own pyproject is the console's and ships no package, so this copies `n17q_engine/` (without byte
code) and `packaging/n17q-replay/pyproject.toml` into a temporary tree, writes its README, and builds it with
`pip wheel --no-deps` (setuptools, from the package registry pip is configured with, in an isolated build). Prints
the wheel's path.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = """# n17q-replay

The N17Q engine and its pytest plugin: replay an agent against scenario packages offline, each (case, branch point)
one pytest test, JUnit XML through pytest's `--junitxml`. See docs/replay-in-ci.md in the N17Q repository.

    pip install n17q-replay-*.whl
    pytest --n17q-suite replays.n17q.toml --junitxml=replays.xml
"""


def build(out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="n17q-replay-build-") as tmp:
        tree = Path(tmp) / "src"
        shutil.copytree(ROOT / "n17q_engine", tree / "n17q_engine", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copy2(ROOT / "packaging" / "n17q-replay" / "pyproject.toml", tree / "pyproject.toml")
        (tree / "README.md").write_text(README)
        wheels = Path(tmp) / "wheels"
        done = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(tree)],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            tail = " | ".join(done.stderr.strip().splitlines()[-3:])
            raise SystemExit(f"build_replay_wheel: pip wheel failed: {tail}")
        (wheel,) = wheels.glob("n17q_replay-*.whl")
        target = out / wheel.name
        if target.exists():
            target.unlink()
        shutil.move(str(wheel), target)
    return target


def main(argv: list[str]) -> int:
    print(build(Path(argv[0]) if argv else ROOT / "dist"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
