"""Run a snippet in a fresh interpreter with a chosen hash seed: determinism claims must hold across processes.

Two runs in one process share every cache, every interned string and one string-hash seed, so "the same
twice" there says little; set iteration order, for one, changes only between processes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_fresh(code: str, *, hash_seed: int) -> str:
    env = {**os.environ, "PYTHONHASHSEED": str(hash_seed), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]
