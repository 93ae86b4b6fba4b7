"""What every benchmark module shares: its configuration, the machine description, child processes."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULT_MARK = "N17Q-BENCH-RESULT "
BUDGET_EVENTS = 100_000


@dataclass(frozen=True)
class Config:
    """What `python -m benchmarks.run` was asked for. At the defaults the figures are budget figures."""

    events: int = BUDGET_EVENTS
    repeat: int | None = None  # None: each benchmark's own default (3 for imports, 5 for lineage)

    @property
    def at_budget_scale(self) -> bool:
        return self.events == BUDGET_EVENTS


def row(what: str, budget: str, measured: str, ok: bool | None, config: Config) -> dict[str, Any]:
    """One line of the results table. `ok` is None when there is nothing to judge (skipped, off scale)."""
    if ok is not None and not config.at_budget_scale:
        ok, measured = None, f"{measured} [at {config.events:,} events, not the budget's scale]"
    return {"what": what, "budget": budget, "measured": measured, "ok": ok}


def median(values: list[float]) -> float:
    return statistics.median(values)


def child_env(
    data_dir: Path, database_url: str | None, *, debug: bool = False, extra: dict[str, str] | None = None
) -> dict[str, str]:
    """The environment of a measuring child: production settings (N17Q_DEBUG=0) unless `debug`.

    With DEBUG on, Django's debug cursor formats and keeps the SQL of every query (up to 9,000 of them, the
    bulk inserts included), which costs time and, above all, memory that a deployed console never spends.
    """
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "N17Q_BLOB_STORAGE_BACKEND")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": "n17q_site.settings",
            "N17Q_DATA_DIR": str(data_dir),
            "N17Q_DEBUG": "1" if debug else "0",
            "N17Q_SECRET_KEY": env.get("N17Q_SECRET_KEY") or "n17q-benchmark-only-" + "x" * 40,
            "N17Q_LOG_LEVEL": "WARNING",
            "PYTHONHASHSEED": "0",
        }
    )
    if database_url:
        env["DATABASE_URL"] = database_url
    env.update(extra or {})
    return env


def run_child(
    args: list[str],
    *,
    data_dir: Path,
    database_url: str | None,
    debug: bool = False,
    timeout: float = 900,
    extra_env: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run `python -m benchmarks._child ARGS` in a fresh interpreter and return the result it printed."""
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks._child", *args],
        cwd=REPO,
        env=child_env(data_dir, database_url, debug=debug, extra=extra_env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    result = None
    for line in proc.stdout.splitlines():
        if line.startswith(RESULT_MARK):
            result = json.loads(line[len(RESULT_MARK) :])
    if proc.returncode != 0 or result is None:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise RuntimeError(f"benchmark child {' '.join(args[:1])} failed (exit {proc.returncode}):\n" + "\n".join(tail))
    return result


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _filesystem_of(path: Path) -> str:
    best, fstype = "", "unknown"
    for line in _read("/proc/mounts").splitlines():
        parts = line.split()
        if len(parts) >= 3 and str(path).startswith(parts[1]) and len(parts[1]) > len(best):
            best, fstype = parts[1], parts[2]
    return fstype


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def machine(temp_dir: Path | None = None) -> dict[str, Any]:
    import sqlite3

    import django

    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown",
    )
    mem_kb = next(
        (int(line.split()[1]) for line in _read("/proc/meminfo").splitlines() if line.startswith("MemTotal:")), 0
    )
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 0
    commit = _git("rev-parse", "--short", "HEAD")
    # With local changes (tracked diffs and untracked files), a digest of them: two runs that show the same
    # digest measured the same code.
    h = hashlib.sha256(_git("diff", "HEAD").encode())
    untracked = sorted(_git("ls-files", "--others", "--exclude-standard").splitlines())
    for name in untracked:
        h.update(name.encode())
        with contextlib.suppress(OSError):
            h.update((REPO / name).read_bytes())
    local = bool(_git("status", "--porcelain"))
    dirty = f"+local-changes@{h.hexdigest()[:10]}" if local else ""
    return {
        "nproc": usable,
        "cpu_count": os.cpu_count(),
        "cpu": cpu,
        "memory_mb": mem_kb // 1024,
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "platform": platform.platform(),
        "django": django.get_version(),
        "sqlite": sqlite3.sqlite_version,
        "temp_filesystem": _filesystem_of(temp_dir) if temp_dir else None,
        "commit": commit + dirty,
    }


def machine_line(m: dict[str, Any]) -> str:
    return (
        f"machine: {m['nproc']} CPUs ({m['cpu']}), {m['memory_mb']:,} MB RAM, {m['python']}, Django {m['django']}, "
        f"SQLite {m['sqlite']}, temp on {m['temp_filesystem']}, load {m['loadavg']}, commit {m['commit']}"
    )
