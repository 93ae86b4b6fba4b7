"""An agent's own Python environment: a venv filled with wheels from the package registry, read-only.

`build_environment(requirements, dest)` makes `dest` with `python -m venv --without-pip` (the worker's interpreter),
has the worker's own pip fetch the requirements and everything they require as wheels only (`pip download
--only-binary=:all:`, from the package registry pip is configured with: no source distribution is ever built, since
a build runs its setup code), and unpacks each wheel into the venv (`n17q_engine.agent.unpack`: copying files, no
code of theirs run); then every file is made read-only (the sandbox binds it read-only as well). Requirements are
plain specifiers (`name`, `name==1.2`, `name[extra]>=1`), one a line: options, paths, URLs and editable installs are
refused, so the environment comes from the registry and nowhere else. What was installed (`name==version`, read from
the dist-info METADATA files) is returned, to be pinned beside it.

An agent shipped as a wheel (`wheel=`, checked by `n17q_engine.agent.wheel`) is unpacked into the same kind of
environment: its own `Requires-Dist` come from the registry. Every environment is pinned by `environment_digest`
(its files and links, not the interpreter's byte-code caches), checked before each launch.

Nothing of the agent's or its requirements' runs on the host (issue 33): the environment's interpreter is never
started here, since its start-up would process the `.pth` files and `sitecustomize`/`usercustomize` the wheels put
in its site-packages. The worker's interpreter runs pip and `compileall` with `-I`, its own site directories only;
byte-compiling parses the sources, it executes none. The agent's code first runs inside the sandbox.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from .spec import AgentError, environment_digest
from .unpack import installed, scheme, unpack_wheel, venv_files

SPECIFIER_RE = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]+\])?\s*([<>=!~]=?\s*[A-Za-z0-9.*+!_-]+\s*,?\s*)*$"
)
MAX_REQUIREMENTS = 200
INSTALL_TIMEOUT_S = 900


@dataclass(frozen=True)
class Environment:
    path: str  # the venv's prefix: its bin/python runs the agent's `python`
    requirements_digest: str
    installed: tuple[str, ...]  # `name==version` of every distribution in it, read from its METADATA files
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
    target = Path(os.path.normpath(os.path.abspath(dest)))
    if target.exists():
        raise AgentError(f"agent environment {target} exists already")
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        # without pip: ensurepip would start the new interpreter (harmless while empty, but never needed here)
        _run([sys.executable, "-I", "-m", "venv", "--without-pip", str(target)], "python -m venv")
        if lines:
            req = target / "requirements.txt"
            req.write_text("\n".join(lines) + "\n")
        protected = venv_files(target)
        # the fetched wheels wait outside the environment: a wheel's data files cannot swap the next one
        with tempfile.TemporaryDirectory(prefix="n17q-wheels-") as house:
            wheels = _download(Path(house), target, lines, wheel)
            for path in wheels:
                unpack_wheel(path, target, protected=protected)
        site = scheme(target)
        if wheels:
            _compile({site["purelib"], site["platlib"]})
        built = installed(target)
        _read_only(target)
        digest = environment_digest(target)
    except BaseException:
        remove_environment(target)
        raise
    return Environment(str(target), requirements_digest(lines), built, digest)


def _download(house: Path, target: Path, lines: list[str], wheel: str | os.PathLike[str] | None) -> list[Path]:
    """The wheels to unpack: every wheel the requirements (and the agent's wheel's Requires-Dist) need, fetched by
    the worker's pip into `house` (wheels only, see above), then the agent's own (the pinned copy, never pip's)."""
    own = Path(wheel) if wheel is not None else None
    if not lines and own is None:
        return []
    argv = [sys.executable, "-I", "-m", "pip", "download", "--only-binary=:all:", "--disable-pip-version-check"]
    argv += ["--no-input", "-q", "-d", str(house)]
    if lines:
        argv += ["-r", str(target / "requirements.txt")]
    if own is not None:
        argv.append(str(own))
    _run(argv, "pip download (wheels only: nothing is built on the host)")
    fetched = sorted(p for p in house.glob("*.whl") if own is None or p.name != own.name)
    got = {p.name for p in house.iterdir()} - {p.name for p in fetched} - ({own.name} if own else set())
    if got:
        raise AgentError(f"pip download fetched something that is not a wheel: {sorted(got)[0]}")
    return [*fetched, *([own] if own is not None else [])]


def _compile(folders: set[Path]) -> None:
    """Byte-compile the environment's sources once (read-only later, so the sandbox could not cache them): the
    worker's interpreter in isolated mode parses them; compiling executes nothing. Errors (a file of another Python
    version in a package's tests) are ignored, as pip ignores them."""
    argv = [sys.executable, "-I", "-m", "compileall", "-q", *(str(f) for f in sorted(folders) if f.is_dir())]
    try:
        subprocess.run(argv, capture_output=True, timeout=INSTALL_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise AgentError(f"byte-compiling the agent environment took longer than {INSTALL_TIMEOUT_S} s") from None


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
