"""Real Inspect AI logs for tests: `produce(out, home)` runs tests/engine/inspect_producer.py (a small real eval
with the mock model) in a child process, offline and without a display, and returns the logs it wrote by name.
`produce_once(tmp_path_factory)` gives every test module of a pytest run the same logs, made once for the run."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

PRODUCER = Path(__file__).parent / "inspect_producer.py"
TOKEN_PRODUCER = Path(__file__).parent / "inspect_token_producer.py"


def _environment(out: Path, home: Path) -> dict[str, str]:
    env = {
        **os.environ,
        "INSPECT_DISPLAY": "none",
        "INSPECT_LOG_DIR": str(out),
        "HOME": str(home),
        "XDG_DATA_HOME": str(home / "data"),
        "XDG_CACHE_HOME": str(home / "cache"),
        "XDG_CONFIG_HOME": str(home / "config"),
        "INSPECT_TELEMETRY": "",
        "NO_COLOR": "1",
    }
    env.pop("INSPECT_EVAL_MODEL", None)
    return env


def produce_with_secret(out: Path, home: Path, secret: str, fmt: str = "eval") -> Path:
    """The log (`fmt`: eval or json) of tests/engine/inspect_token_producer.py: one sample whose input and answer hold
    `secret`."""
    env = {**_environment(out, home), "N17Q_TEST_SECRET": secret, "N17Q_TEST_LOG_FORMAT": fmt}
    done = subprocess.run(
        [sys.executable, str(TOKEN_PRODUCER), str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if done.returncode != 0:
        raise AssertionError(done.stderr[-3000:])
    paths = sorted(out.glob(f"*.{fmt}"))
    if len(paths) != 1:
        raise AssertionError(f"expected one log, found {paths}: {done.stderr[-2000:]}")
    return paths[0]


def produce(out: Path, home: Path) -> dict[str, Path]:
    env = _environment(out, home)
    done = subprocess.run(
        [sys.executable, str(PRODUCER), str(out)], env=env, capture_output=True, text=True, timeout=300, check=False
    )
    if done.returncode != 0:
        raise AssertionError(done.stderr[-3000:])
    found = {}
    for name, pattern in (
        ("eval", "eval/*.eval"),
        ("json", "json/*.json"),
        ("broken", "broken/*.eval"),
        ("limited", "limited/*.eval"),
        ("report", "report/*.eval"),
    ):
        paths = sorted(out.glob(pattern))
        if len(paths) != 1:
            raise AssertionError(f"{name}: expected one log, found {paths}: {done.stderr[-2000:]}")
        found[name] = paths[0]
    return found


def produce_once(tmp_path_factory) -> dict[str, Path]:
    """`produce`'s logs, made once for the whole pytest run and shared by its modules and its xdist workers: the first
    to ask runs the eval (6 s of a core, mostly importing Inspect AI), the others wait on a lock and read the same
    files. Every module that asks only reads them (each wrote its own copies of the same eval's logs before)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's folder, which holds each worker's (popen-gwN)
    shared = root / "inspect-logs-once"
    with open(root / "inspect-logs-once.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = shared / "made.json"
        if made.exists():
            return {name: Path(path) for name, path in json.loads(made.read_text()).items()}
        shutil.rmtree(shared, ignore_errors=True)
        logs = produce(shared / "logs", shared / "home")
        made.write_text(json.dumps({name: str(path) for name, path in logs.items()}))
        return logs
