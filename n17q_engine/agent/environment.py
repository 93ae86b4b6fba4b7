"""An agent's own Python environment: a venv built from its requirements, from the package registry, read-only.

`build_environment(requirements, dest)` makes `dest` with `python -m venv` (the worker's interpreter) and installs
the requirements with `pip install -r`, from the package registry pip is configured with; then every file is made
read-only (the sandbox binds it read-only as well). Requirements are plain specifiers (`name`, `name==1.2`,
`name[extra]>=1`), one a line: options, paths, URLs and editable installs are refused, so the environment comes
from the registry and nowhere else. What was installed (`pip freeze`) is returned, to be pinned beside it.

An agent shipped as a wheel (`wheel=`, checked by `n17q_engine.agent.wheel`) is installed into the same kind of
environment with `pip install WHEEL`: its own `Requires-Dist` come from the registry. Every environment is pinned
by `environment_digest` (its files and links, not the interpreter's byte-code caches), checked before each launch.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from .spec import AgentError, environment_digest

SPECIFIER_RE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?\s*([<>=!~]=?\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)*$"
)
MAX_REQUIREMENTS = 200
INSTALL_TIMEOUT_S = 900


@dataclass(frozen=True)
class Environment:
    path: str  # the venv's prefix: its bin/python runs the agent's `python`
    requirements_digest: str
    installed: tuple[str, ...]  # `pip freeze` of the built environment
    digest: str = ""  # environment_digest once built and made read-only


def requirement_lines(text: str) -> list[str]:
    """The requirement specifiers of a requirements text, checked; comments and blank lines dropped."""
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-") or "://" in line or "@" in line or "/" in line or ";" in line:
            raise AgentError(
                f"requirements line {number}: {line!r}: only package specifiers from the registry (no options, "
                "paths, URLs or markers)"
            )
        if not SPECIFIER_RE.match(line):
            raise AgentError(f"requirements line {number}: {line!r} is not a package specifier")
        lines.append(line)
    if len(lines) > MAX_REQUIREMENTS:
        raise AgentError(f"more than {MAX_REQUIREMENTS} requirements")
    return lines


def requirements_digest(lines: list[str]) -> str:
    return "sha256:" + hashlib.sha256("\n".join(lines).encode()).hexdigest()


def build_environment(
    requirements: str, dest: str | os.PathLike[str], *, wheel: str | os.PathLike[str] | None = None
) -> Environment:
    """Build the agent's environment at `dest` (which must not exist yet); see the module docstring.

    Raises AgentError (one line: the last line pip wrote) when the venv or the install fails; nothing is left."""
    lines = requirement_lines(requirements)
    target = Path(dest)
    if target.exists():
        raise AgentError(f"agent environment {target} exists already")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        _run([sys.executable, "-m", "venv", str(target)], "python -m venv")
        python = str(target / "bin" / "python")
        install = [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-input", "-q"]
        if lines:
            req = target / "requirements.txt"
            req.write_text("\n".join(lines) + "\n")
            install += ["-r", str(req)]
        if wheel is not None:
            install.append(str(wheel))
        if lines or wheel is not None:
            _run(install, "pip install")
        frozen = subprocess.run(
            [python, "-m", "pip", "freeze", "--disable-pip-version-check"],
            capture_output=True,
            timeout=120,
            check=False,
        )
        installed = tuple(line for line in frozen.stdout.decode().splitlines() if line.strip())
        _read_only(target)
        digest = environment_digest(target)
    except BaseException:
        remove_environment(target)
        raise
    return Environment(str(target), requirements_digest(lines), installed, digest)


def _run(argv: list[str], what: str) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, timeout=INSTALL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise AgentError(f"{what} took longer than {INSTALL_TIMEOUT_S} s") from None
    if done.returncode != 0:
        said = [line for line in done.stderr.decode("utf-8", "replace").splitlines() if line.strip()]
        errors = [line for line in said if "ERROR" in line] or said
        raise AgentError(f"{what} failed: {(errors[-1] if errors else f'exit {done.returncode}').strip()[:300]}")


def _read_only(root: Path) -> None:
    """Every file and folder readable by all, writable by none (the sandbox's uid reads it)."""
    for dirpath, dirnames, filenames in os.walk(root):
        for name in [*dirnames, *filenames]:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                continue
            mode = os.stat(path).st_mode
            os.chmod(path, (mode | stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH) & ~0o222)
    mode = os.stat(root).st_mode
    os.chmod(root, (mode | 0o555) & ~0o222)


def remove_environment(path: str | os.PathLike[str]) -> None:
    """Delete an environment this module built (it is read-only: writable again first)."""
    root = Path(path)
    if not root.exists():
        return
    for dirpath, dirnames, _filenames in os.walk(root):
        for name in dirnames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o755)
    os.chmod(root, 0o755)
    shutil.rmtree(root, ignore_errors=True)
