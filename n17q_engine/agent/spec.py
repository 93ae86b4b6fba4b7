"""A registered agent: folder (or wheel) + entry command + digest of its files, and the environment it runs in."""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
MAX_FILES = 2000
MAX_BYTES = 64 << 20


class AgentError(ValueError):
    """An agent that cannot be registered or run as given (one line)."""


def folder_digest(folder: str | os.PathLike[str]) -> str:
    """sha256 over the sorted (relative path, file digest) pairs of every regular file under `folder`.

    Symlinks and special files are refused (a link could point outside the folder the digest pins);
    `__pycache__` folders are skipped (the interpreter's, not the agent's)."""
    root = Path(folder)
    if not root.is_dir():
        raise AgentError(f"agent folder {root} is not a folder")
    entries: list[tuple[str, str]] = []
    total = 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for d in dirnames:
            if os.path.islink(os.path.join(dirpath, d)):
                raise AgentError(f"agent folder holds a symlink: {os.path.join(dirpath, d)}")
        for name in sorted(filenames):
            path = Path(dirpath, name)
            if path.is_symlink() or not path.is_file():
                raise AgentError(f"agent folder holds something that is not a regular file: {path}")
            data = path.read_bytes()
            total += len(data)
            if len(entries) >= MAX_FILES or total > MAX_BYTES:
                raise AgentError(f"agent folder is larger than {MAX_FILES} files or {MAX_BYTES} bytes")
            entries.append((path.relative_to(root).as_posix(), hashlib.sha256(data).hexdigest()))
    h = hashlib.sha256()
    for rel, digest in sorted(entries):
        h.update(f"{rel}\0{digest}\n".encode())
    return "sha256:" + h.hexdigest()


def file_digest(path: str | os.PathLike[str]) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def environment_digest(root: str | os.PathLike[str]) -> str:
    """sha256 over the sorted (relative path, file digest or link target) pairs of an agent's environment;
    `__pycache__` folders are skipped (byte-code the interpreter may write, never the agent's code)."""
    base = Path(root)
    entries: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(base):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            rel = path.relative_to(base).as_posix()
            if path.is_symlink():
                entries.append((rel, "link:" + os.readlink(path)))
            elif name in filenames and path.is_file():
                entries.append((rel, file_digest(path)[7:]))
    h = hashlib.sha256()
    for rel, what in sorted(entries):
        h.update(f"{rel}\0{what}\n".encode())
    return "sha256:" + h.hexdigest()


@dataclass(frozen=True)
class AgentSpec:
    """`command[0]` is `python` (the environment's interpreter), an absolute path, or a path inside the folder; for
    an agent shipped as a wheel, a bare name is one of the console scripts its environment installed."""

    name: str
    folder: str  # absolute host path, bound read-only inside the sandbox at the same path
    command: tuple[str, ...]
    digest: str  # folder_digest at registration (a wheel: the wheel file's sha256): a change since is refused
    environment: str  # a Python environment (a venv's prefix), bound read-only; its interpreter runs `python`
    wheel: str = ""  # the wheel's file name inside `folder` (an agent shipped as a wheel), else ""
    environment_digest: str = ""  # environment_digest of an environment built for the agent ("": the worker's own)

    def check(self) -> None:
        if not NAME_RE.match(self.name):
            raise AgentError(f"agent name {self.name!r}: lower-case letters, digits, '.', '_' or '-'")
        if not os.path.isabs(self.folder) or not os.path.isdir(self.folder):
            raise AgentError(f"agent folder {self.folder!r} must be an absolute path to a folder")
        if not self.command or not all(isinstance(a, str) and a and "\0" not in a for a in self.command):
            raise AgentError("agent command must be a non-empty list of strings")
        if not os.path.isabs(self.environment) or not os.path.isfile(os.path.join(self.environment, "bin", "python")):
            raise AgentError(f"agent environment {self.environment!r} has no bin/python")
        if self.wheel:
            path = os.path.join(self.folder, self.wheel)
            if os.path.basename(self.wheel) != self.wheel or not os.path.isfile(path):
                raise AgentError(f"agent {self.name}: its wheel {self.wheel} is gone from {self.folder}")
            actual = file_digest(path)
            if actual != self.digest:
                raise AgentError(f"agent {self.name}: its wheel changed since registration ({actual} != {self.digest})")
        else:
            actual = folder_digest(self.folder)
            if actual != self.digest:
                raise AgentError(
                    f"agent {self.name}: its folder changed since registration ({actual} != {self.digest})"
                )
        if self.environment_digest:
            built = environment_digest(self.environment)
            if built != self.environment_digest:
                raise AgentError(
                    f"agent {self.name}: its environment changed since it was built ({built} != "
                    f"{self.environment_digest})"
                )

    @property
    def decider_name(self) -> str:
        return f"agent:{self.name}"

    def executable(self) -> str:
        head = self.command[0]
        if head == "python":
            return os.path.join(self.environment, "bin", "python")
        if self.wheel and "/" not in head:  # a console script the wheel's installation put in its environment
            return os.path.join(self.environment, "bin", head)
        return head if os.path.isabs(head) else os.path.normpath(os.path.join(self.folder, head))

    def resolved(self) -> AgentSpec:
        """The same agent with its folder and environment at their real paths: the sandbox binds real paths only, so
        a folder or venv reached through a symlink on the host (`/srv/app/.venv -> /data/venvs/app`) is named as it
        exists inside (issue 36)."""
        return replace(self, folder=os.path.realpath(self.folder), environment=os.path.realpath(self.environment))

    def interpreter_home(self) -> str | None:
        """The base interpreter's installation prefix a venv environment runs on (`home` in its `pyvenv.cfg` names
        its `bin`), at its real path; None when the environment is not a venv."""
        try:
            with open(os.path.join(self.environment, "pyvenv.cfg"), encoding="utf-8") as fh:
                for line in fh:
                    key, _, value = line.partition("=")
                    if key.strip() == "home" and value.strip():
                        prefix = os.path.dirname(os.path.realpath(value.strip()))
                        return prefix if prefix != "/" else None
        except OSError:
            return None
        return None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "folder": self.folder,
            "command": list(self.command),
            "digest": self.digest,
            "environment": self.environment,
            "wheel": self.wheel,
            "environment_digest": self.environment_digest,
        }

    @classmethod
    def from_dict(cls, data: Any) -> AgentSpec:
        try:
            return cls(
                str(data["name"]),
                str(data["folder"]),
                tuple(str(a) for a in data["command"]),
                str(data["digest"]),
                str(data["environment"]),
                str(data.get("wheel") or ""),
                str(data.get("environment_digest") or ""),
            )
        except (KeyError, TypeError, AttributeError) as exc:
            raise AgentError(f"agent spec is not {{name, folder, command, digest, environment}}: {exc}") from None
