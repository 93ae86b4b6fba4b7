"""An agent shipped as a wheel (issue 18): what a `.whl` must hold before it is installed as an agent.

`inspect_wheel(path)` reads the wheel as the wheel spec (PEP 427/491) lays it out and refuses, in one line, a file
that is not a zip, a file name that is not `{name}-{version}(-{build})?-{python}-{abi}-{platform}.whl`, or an archive
without its `{name}-{version}.dist-info/` holding `WHEEL`, `METADATA` and `RECORD` (nor a member outside the wheel's
root, nor a `Requires-Dist` naming a URL: `name @ URL` would be fetched from there, not the package registry).
`entry_check(info, command)` says whether the entry command names something the wheel provides: a console script
of its `entry_points.txt`, or `python -m MODULE` of a module in it.
The wheel's sha256 is its pin: the registration keeps a copy whose digest is checked at every launch.
"""

from __future__ import annotations

import configparser
import os
import re
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from .spec import AgentError, file_digest

# The wheel file name convention: distribution and version never hold a '-' (they are escaped to '_').
WHEEL_NAME_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-(?P<version>[A-Za-z0-9_.!+]+)"
    r"(?:-(?P<build>\d[A-Za-z0-9_.]*))?-(?P<python>[A-Za-z0-9_.]+)-(?P<abi>[A-Za-z0-9_.]+)"
    r"-(?P<platform>[A-Za-z0-9_.]+)\.whl$"
)
MAX_WHEEL_BYTES = 64 << 20
MAX_MEMBERS = 5000
MODULE_RE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


@dataclass(frozen=True)
class WheelInfo:
    filename: str
    name: str  # as METADATA says it
    version: str
    digest: str  # "sha256:<hex>" of the wheel file
    console_scripts: tuple[str, ...]
    modules: frozenset[str]  # dotted names `python -m` can run: packages (with __main__) and plain modules
    requires: tuple[str, ...]  # Requires-Dist: installed from the package registry with it


def inspect_wheel(path: str | os.PathLike[str]) -> WheelInfo:
    """The wheel at `path`, checked (see the module docstring); raises AgentError in one line."""
    wheel = Path(path)
    if not wheel.is_file():
        raise AgentError(f"agent wheel {wheel} is not a file")
    match = WHEEL_NAME_RE.match(wheel.name)
    if match is None:
        raise AgentError(
            f"agent wheel {wheel.name!r}: not a wheel file name "
            "({name}-{version}-{python}-{abi}-{platform}.whl)"
        )
    if wheel.stat().st_size > MAX_WHEEL_BYTES:
        raise AgentError(f"agent wheel {wheel.name} is larger than {MAX_WHEEL_BYTES} bytes")
    if not zipfile.is_zipfile(wheel):
        raise AgentError(f"agent wheel {wheel.name} is not a zip archive")
    dist_info = f"{match['name']}-{match['version']}.dist-info"
    try:
        with zipfile.ZipFile(wheel) as zf:
            names = zf.namelist()
            if len(names) > MAX_MEMBERS:
                raise AgentError(f"agent wheel {wheel.name} holds more than {MAX_MEMBERS} files")
            for member in names:
                if member.startswith("/") or ".." in member.split("/"):
                    raise AgentError(f"agent wheel {wheel.name}: member {member!r} is outside the wheel")
            for required in ("WHEEL", "METADATA", "RECORD"):
                if f"{dist_info}/{required}" not in names:
                    raise AgentError(f"agent wheel {wheel.name} has no {dist_info}/{required}")
            metadata = HeaderParser().parsestr(zf.read(f"{dist_info}/METADATA").decode("utf-8", "replace"))
            entry_points = (
                zf.read(f"{dist_info}/entry_points.txt").decode("utf-8", "replace")
                if f"{dist_info}/entry_points.txt" in names
                else ""
            )
    except zipfile.BadZipFile as exc:
        raise AgentError(f"agent wheel {wheel.name} is not a readable zip archive: {exc}") from None
    if not metadata.get("Name") or not metadata.get("Version"):
        raise AgentError(f"agent wheel {wheel.name}: its METADATA names no Name or Version")
    requires = tuple(str(r) for r in metadata.get_all("Requires-Dist") or ())
    for requirement in requires:
        # `name @ URL`: pip would fetch it from there, not the registry (and a link to a source tree builds it)
        if "@" in requirement.split(";", 1)[0]:
            raise AgentError(
                f"agent wheel {wheel.name}: Requires-Dist {requirement[:120]!r} names a URL; its requirements come "
                "from the package registry"
            )
    scripts: tuple[str, ...] = ()
    if entry_points:
        parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
        parser.optionxform = str  # type: ignore[assignment,method-assign]  # script names keep their case
        try:
            parser.read_string(entry_points)
        except configparser.Error as exc:
            raise AgentError(f"agent wheel {wheel.name}: entry_points.txt is unreadable: {exc}") from None
        if parser.has_section("console_scripts"):
            scripts = tuple(sorted(parser.options("console_scripts")))
    return WheelInfo(
        filename=wheel.name,
        name=str(metadata["Name"]),
        version=str(metadata["Version"]),
        digest=file_digest(wheel),
        console_scripts=scripts,
        modules=_modules(names),
        requires=requires,
    )


def _modules(names: list[str]) -> frozenset[str]:
    """Dotted names `python -m` runs from the wheel's purelib/platlib root: `a/b.py` -> a.b, `a/__main__.py` -> a."""
    out: set[str] = set()
    for member in names:
        top = member.split("/", 1)[0]
        if not member.endswith(".py") or top.endswith((".dist-info", ".data")):
            continue
        parts = member[:-3].split("/")
        if parts[-1] == "__main__":
            parts = parts[:-1]
        elif parts[-1] == "__init__":
            continue  # `python -m package` needs its __main__
        dotted = ".".join(parts)
        if parts and MODULE_RE.match(dotted):
            out.add(dotted)
    return frozenset(out)


def entry_check(info: WheelInfo, command: list[str] | tuple[str, ...]) -> None:
    """Refuse (one line) an entry command the wheel does not provide: `SCRIPT [args]` for one of its console scripts,
    or `python -m MODULE [args]` for one of its modules."""
    if not command:
        raise AgentError("agent command: the wheel's console script, or python -m MODULE")
    head = command[0]
    if head == "python":
        if len(command) < 3 or command[1] != "-m":
            raise AgentError("agent command for a wheel: its console script, or python -m MODULE (no script path)")
        if command[2] not in info.modules:
            known = ", ".join(sorted(info.modules)[:8]) or "none"
            raise AgentError(f"agent wheel {info.filename} has no module {command[2]!r} to run (modules: {known})")
        return
    if "/" in head:
        raise AgentError(f"agent command {head!r}: for a wheel, a console script's name or python -m MODULE")
    if head not in info.console_scripts:
        known = ", ".join(info.console_scripts) or "none"
        raise AgentError(f"agent wheel {info.filename} has no console script {head!r} (its console scripts: {known})")
