"""Issue 33: an agent's wheels are installed by unpacking them (n17q_engine.agent.unpack), never by running them.

The service-level attack tests (a wheel planting `.pth`, `sitecustomize`, entry points, registered through
`replays.agents.agent_register` and the admin form) are in tests/replays/test_agents.py; these pin the unpacker's
own refusals on a bare prefix (no venv, no interpreter: nothing here starts one)."""

from __future__ import annotations

import base64
import hashlib
import os
import zipfile
from pathlib import Path

import pytest

from n17q_engine.agent.spec import AgentError
from n17q_engine.agent.unpack import installed, scheme, unpack_wheel, venv_files

DIST = "toy-1.0.dist-info"


def make_wheel(where: Path, files: dict[str, str], *, record: dict[str, str] | None = None) -> Path:
    """toy-1.0: the given members plus METADATA, WHEEL and a RECORD of their sha256 (`record` overrides rows)."""
    members = {
        **files,
        f"{DIST}/METADATA": "Metadata-Version: 2.1\nName: toy\nVersion: 1.0\n",
        f"{DIST}/WHEEL": "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    rows = []
    for name, text in members.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
        rows.append(f"{name},{(record or {}).get(name, f'sha256={digest}')},{len(text)}")
    members[f"{DIST}/RECORD"] = "\n".join([*rows, f"{DIST}/RECORD,,"]) + "\n"
    path = where / "toy-1.0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, text in members.items():
            info = zipfile.ZipInfo(name)
            info.external_attr = (0o100000 | 0o644) << 16
            zf.writestr(info, text)
    return path


@pytest.fixture
def prefix(tmp_path: Path) -> Path:
    """A venv's own files, as `python -m venv --without-pip` leaves them (the interpreter a link)."""
    root = tmp_path / "env"
    (root / "bin").mkdir(parents=True)
    (root / "bin" / "python").symlink_to("/usr/bin/false")
    (root / "pyvenv.cfg").write_text("home = /usr/bin\n")
    scheme(root)["purelib"].mkdir(parents=True)
    return root


def test_a_wheel_is_unpacked_with_its_scripts_pointed_at_the_environment_and_recorded(tmp_path, prefix):
    wheel = make_wheel(
        tmp_path,
        {
            "toy/__init__.py": "def main():\n    return 0\n",
            "toy.pth": "import sys; sys.exit(3)\n",  # a file like any other here: only an interpreter acts on it
            "toy-1.0.data/scripts/toy-tool": "#!python\nprint('tool')\n",
            f"{DIST}/entry_points.txt": "[console_scripts]\ntoy = toy:main\n",
        },
    )
    assert unpack_wheel(wheel, prefix, protected=venv_files(prefix)).version == "1.0"
    site = scheme(prefix)["purelib"]
    assert (site / "toy.pth").read_text() == "import sys; sys.exit(3)\n"
    python = prefix / "bin" / "python"
    assert (prefix / "bin" / "toy-tool").read_text() == f"#!{python}\nprint('tool')\n"
    launcher = (prefix / "bin" / "toy").read_text()
    assert (
        launcher.startswith(f"#!{python}\n") and "from toy import main" in launcher and "sys.exit(main())" in launcher
    )
    assert os.access(prefix / "bin" / "toy", os.X_OK) and os.access(prefix / "bin" / "toy-tool", os.X_OK)
    assert installed(prefix) == ("toy==1.0",)


@pytest.mark.parametrize(
    ("files", "record", "message"),
    [
        ({"toy/a.py": "x = 1\n"}, {"toy/a.py": "sha256=AAAA"}, "toy/a.py does not match the sha256 its RECORD gives"),
        ({"toy-1.0.data/purelib/../../../../escape.py": ""}, None, "is outside the wheel"),
        ({"toy-1.0.data/elsewhere/x.py": ""}, None, "names no install scheme directory"),
        ({"toy-1.0.data/data/pyvenv.cfg": ""}, None, "pyvenv.cfg would replace the environment's own file"),
        ({f"{DIST}/entry_points.txt": "[console_scripts]\npython = toy:main\n"}, None, "bin/python would replace"),
        ({f"{DIST}/entry_points.txt": "[gui_scripts]\nx = toy:main; import os\n"}, None, "not NAME = module:attr"),
        ({f"{DIST}/entry_points.txt": "[console_scripts]\n../x = toy:main\n"}, None, "not NAME = module:attr"),
    ],
)
def test_a_member_or_entry_point_that_does_not_belong_is_refused_in_one_line(tmp_path, prefix, files, record, message):
    wheel = make_wheel(tmp_path, files, record=record)
    with pytest.raises(AgentError, match=message.replace("(", r"\(")) as raised:
        unpack_wheel(wheel, prefix, protected=venv_files(prefix))
    assert "\n" not in str(raised.value)
    assert (prefix / "bin" / "python").is_symlink() and (prefix / "pyvenv.cfg").read_text() == "home = /usr/bin\n"


def test_nothing_is_written_through_a_link(tmp_path, prefix):
    outside = tmp_path / "outside"
    outside.mkdir()
    site = scheme(prefix)["purelib"]
    (site / "linked").symlink_to(outside)
    (site / "one.py").symlink_to(outside / "one.py")
    for files, message in (({"linked/x.py": "x"}, "reached through a symlink"), ({"one.py": "x"}, "replace a link")):
        with pytest.raises(AgentError, match=message):
            unpack_wheel(make_wheel(tmp_path, files), prefix, protected=frozenset())
    assert list(outside.iterdir()) == []
