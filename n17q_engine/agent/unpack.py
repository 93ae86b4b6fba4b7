"""Install a wheel into an agent's environment by unpacking it, never by running anything of it (issue 33).

A wheel is a zip laid out by the wheel spec (PEP 427/491): installing one is copying its members where the
environment's scheme says, writing the launchers of its entry points, and nothing else. `pip install` does the
same copying, but pip runs in the environment's own interpreter, whose start-up processes every `.pth` file already
in site-packages (an `import` line there is code) and imports `sitecustomize`/`usercustomize`: an agent's wheel or
one of its requirements could then run on the host, as the worker's user. So the agent's environment is filled here,
in the worker's own process, from bytes: no interpreter whose site directories hold the environment is ever
started on the host. Its code runs only when the sandbox starts the agent.

`unpack_wheel(wheel, prefix)` copies the members (the root to purelib or platlib per `Root-Is-Purelib`,
`{dist}.data/{purelib,platlib,scripts,headers,data}/` to theirs), checks each file against the sha256 its
`RECORD` gives (a mismatch refuses the wheel), rewrites a `#!python` script's first line to the environment's
interpreter, writes a launcher per `console_scripts`/`gui_scripts` entry (text from a checked `module:attr`), and
returns the distribution's name and version read from its `METADATA`. It refuses, in one line, a member outside
its scheme directory, a symlink on the way to a member, and a file the venv itself made (`bin/python`,
`pyvenv.cfg`, `activate`): a wheel must not replace the interpreter the sandbox starts.
"""

from __future__ import annotations

import base64
import configparser
import csv
import hashlib
import io
import os
import re
import sysconfig
import zipfile
from dataclasses import dataclass
from email.parser import HeaderParser
from pathlib import Path

from .spec import AgentError

SCHEME_KEYS = ("purelib", "platlib", "scripts", "headers", "data")
# An entry point's object reference (`module.sub:attr.attr`, optional `[extras]`) and a launcher's file name: the
# launcher is Python source written from them, so nothing else may pass.
ENTRY_RE = re.compile(
    r"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)\s*:\s*(?P<attr>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*)"
    r"\s*(?:\[[\w\s,.-]*\])?$"
)
SCRIPT_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
CHUNK = 1 << 20


@dataclass(frozen=True)
class Unpacked:
    name: str  # as its METADATA says
    version: str


def scheme(prefix: str | os.PathLike[str]) -> dict[str, Path]:
    """Where a venv at `prefix` keeps each kind of file (the worker's interpreter's own layout for a venv)."""
    base = str(prefix)
    name = "venv" if "venv" in sysconfig.get_scheme_names() else "posix_prefix"
    paths = sysconfig.get_paths(scheme=name, vars={"base": base, "platbase": base, "installed_base": base})
    version = sysconfig.get_python_version()
    return {
        "purelib": Path(paths["purelib"]),
        "platlib": Path(paths["platlib"]),
        "scripts": Path(paths["scripts"]),
        # pip's place for a venv's headers (the interpreter's include folder is not the environment's)
        "headers": Path(base, "include", "site", f"python{version}"),
        "data": Path(base),
    }


def venv_files(prefix: str | os.PathLike[str]) -> frozenset[str]:
    """Every file and link the venv itself made under `prefix` (before any wheel): no wheel may replace one."""
    out: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(os.path.normpath(prefix)):
        out.update(os.path.join(dirpath, n) for n in filenames)
        out.update(os.path.join(dirpath, d) for d in dirnames if os.path.islink(os.path.join(dirpath, d)))
    return frozenset(out)


def unpack_wheel(
    wheel: str | os.PathLike[str], prefix: str | os.PathLike[str], *, protected: frozenset[str]
) -> Unpacked:
    """Unpack `wheel` into the venv at `prefix` (see the module docstring); `protected`: `venv_files(prefix)`.

    Raises AgentError in one line; what was written until then stays (the caller removes the environment)."""
    path = Path(wheel)
    root = Path(os.path.normpath(prefix))
    places = scheme(root)
    python = str(places["scripts"] / "python")
    try:
        with zipfile.ZipFile(path) as zf:
            members = [m for m in zf.infolist() if not m.is_dir()]
            dist_info = _dist_info(path.name, [m.filename for m in members])
            data_dir = dist_info[: -len(".dist-info")] + ".data"
            wheel_meta = HeaderParser().parsestr(zf.read(f"{dist_info}/WHEEL").decode("utf-8", "replace"))
            metadata = HeaderParser().parsestr(zf.read(f"{dist_info}/METADATA").decode("utf-8", "replace"))
            record = _record(zf.read(f"{dist_info}/RECORD").decode("utf-8", "replace"))
            purelib = str(wheel_meta.get("Root-Is-Purelib", "true")).strip().lower() == "true"
            for member in members:
                name = member.filename
                if name.startswith("/") or "\\" in name or "\0" in name or ".." in name.split("/"):
                    raise AgentError(f"wheel {path.name}: member {name!r} is outside the wheel")
                if name.startswith(data_dir + "/"):
                    key, _, rest = name[len(data_dir) + 1 :].partition("/")
                    if key not in SCHEME_KEYS or not rest:
                        raise AgentError(f"wheel {path.name}: member {name!r} names no install scheme directory")
                    base = places[key]
                else:
                    key, rest = "root", name
                    base = places["purelib" if purelib else "platlib"]
                target = _inside(root, base, rest, path.name, protected)
                executable = key == "scripts" or bool((member.external_attr >> 16) & 0o111)
                _copy(zf, member, target, record.get(name), path.name, executable, python if key == "scripts" else "")
            entry_points = (
                zf.read(f"{dist_info}/entry_points.txt").decode("utf-8", "replace")
                if f"{dist_info}/entry_points.txt" in zf.namelist()
                else ""
            )
    except zipfile.BadZipFile as exc:
        raise AgentError(f"wheel {path.name} is not a readable zip archive: {exc}") from None
    except KeyError as exc:
        raise AgentError(f"wheel {path.name} lacks {exc}") from None
    for script, reference in _launchers(entry_points, path.name):
        target = _inside(root, places["scripts"], script, path.name, protected)
        with _create(target) as out:
            out.write(_launcher(python, reference).encode())
        os.chmod(target, 0o755)
    if not metadata.get("Name") or not metadata.get("Version"):
        raise AgentError(f"wheel {path.name}: its METADATA names no Name or Version")
    return Unpacked(str(metadata["Name"]), str(metadata["Version"]))


def installed(prefix: str | os.PathLike[str]) -> tuple[str, ...]:
    """`name==version` of every distribution in the environment, read from its dist-info METADATA files (as pip
    freeze lists them, by name), without importing or starting anything of it."""
    found: dict[str, str] = {}
    places = scheme(prefix)
    for where in {places["purelib"], places["platlib"]}:
        if not where.is_dir():
            continue
        for dist_info in where.glob("*.dist-info"):
            meta = dist_info / "METADATA"
            if not meta.is_file() or meta.is_symlink():
                continue
            headers = HeaderParser().parsestr(meta.read_text("utf-8", "replace"))
            if headers.get("Name") and headers.get("Version"):
                found[str(headers["Name"])] = str(headers["Version"])
    return tuple(f"{name}=={found[name]}" for name in sorted(found, key=str.lower))


def _dist_info(filename: str, names: list[str]) -> str:
    """The one `{name}-{version}.dist-info` folder holding the wheel's METADATA."""
    found = {n.split("/", 1)[0] for n in names if n.count("/") == 1 and n.endswith(".dist-info/METADATA")}
    if len(found) != 1:
        raise AgentError(f"wheel {filename}: {len(found)} .dist-info folders with a METADATA, not one")
    return found.pop()


def _record(text: str) -> dict[str, str]:
    """member -> `sha256=<urlsafe b64>` from RECORD (rows without a hash, like RECORD's own, are left out)."""
    out = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 2 and row[1]:
            out[row[0]] = row[1]
    return out


def _copy(
    zf: zipfile.ZipFile,
    member: zipfile.ZipInfo,
    target: Path,
    recorded: str | None,
    filename: str,
    executable: bool,
    python: str,
) -> None:
    """Stream the member to `target`, refused when RECORD gives it a sha256 it does not have (pip refuses the same);
    `python`: a script's `#!python` line becomes `#!<python>` (the hash is of the member as shipped)."""
    h = hashlib.sha256()
    with zf.open(member) as src, _create(target) as out:
        first = True
        for chunk in iter(lambda: src.read(CHUNK), b""):
            h.update(chunk)
            if first and python and re.match(rb"^#!pythonw?(\s|$)", chunk):
                end = chunk.find(b"\n")
                chunk = f"#!{python}".encode() + (chunk[end:] if end >= 0 else b"\n")
            first = False
            out.write(chunk)
    os.chmod(target, 0o755 if executable else 0o644)
    if recorded is not None:
        algorithm, _, expected = recorded.partition("=")
        if algorithm == "sha256":
            actual = base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()
            if actual != expected:
                raise AgentError(f"wheel {filename}: {member.filename} does not match the sha256 its RECORD gives")


def _inside(root: Path, base: Path, rest: str, filename: str, protected: frozenset[str]) -> Path:
    """`base/rest`, refused unless it stays inside `base` with no symlink on the way and is not one of the venv's own
    files (`data/pyvenv.cfg`, `scripts/python`, an entry point named `python` would replace it)."""
    target = Path(os.path.normpath(base / rest))
    if not target.is_relative_to(base) or target == base:
        raise AgentError(f"wheel {filename}: {rest!r} is outside its install directory")
    if str(target) in protected:
        raise AgentError(f"wheel {filename}: {target.relative_to(root)} would replace the environment's own file")
    probe = target.parent
    while probe != root and probe.is_relative_to(root):
        if probe.is_symlink():
            raise AgentError(f"wheel {filename}: {target.relative_to(root)} is reached through a symlink")
        probe = probe.parent
    return target


def _nofollow(path: str, flags: int) -> int:
    # never write through a link: a wheel member must land in the environment, nowhere the link points to
    return os.open(path, flags | os.O_NOFOLLOW, 0o644)


def _create(target: Path) -> io.BufferedWriter:
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_symlink() or target.is_dir():
        raise AgentError(f"{target.name}: a wheel member would replace a link or a folder")
    return open(target, "wb", opener=_nofollow)


def _launchers(entry_points: str, filename: str) -> list[tuple[str, str]]:
    """(script name, `module:attr`) of each console and gui script, checked (the launcher is written from them)."""
    if not entry_points.strip():
        return []
    parser = configparser.ConfigParser(delimiters=("=",), interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]  # script names keep their case
    try:
        parser.read_string(entry_points)
    except configparser.Error as exc:
        raise AgentError(f"wheel {filename}: entry_points.txt is unreadable: {exc}") from None
    out = []
    for section in ("console_scripts", "gui_scripts"):
        if not parser.has_section(section):
            continue
        for script, reference in parser.items(section):
            if not SCRIPT_NAME_RE.match(script) or not ENTRY_RE.match(reference.strip()):
                raise AgentError(f"wheel {filename}: entry point {script!r} = {reference!r} is not NAME = module:attr")
            out.append((script, reference.strip()))
    return out


def _launcher(python: str, reference: str) -> str:
    """The launcher pip writes for an entry point: import the module, call the attribute, exit with its result."""
    match = ENTRY_RE.match(reference)
    assert match is not None  # _launchers checked it
    module, attr = match["module"], match["attr"]
    head = attr.split(".", 1)[0]
    return (
        f"#!{python}\n"
        "import re\nimport sys\n\n"
        f"from {module} import {head}\n\n"
        'if __name__ == "__main__":\n'
        '    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])\n'
        f"    sys.exit({attr}())\n"
    )
