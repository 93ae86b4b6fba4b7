"""The amplification suite's harness (issue 35, point 4): every upload door, fed hostile inputs, in a child process of
its own (tests/bounds/door.py) with a migrated SQLite database copied in. Each case asserts the answer (a 4xx with
one line, or success), a generous bound on the peak memory the request added to that process (and on its children's,
the converting process's), and a hang guard that is the subprocess timeout only: no wall-clock assertion. The tight
figures are `make bench`'s.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# A door that has not answered by then is hung (a busy two-core machine answers every case here in seconds).
HANG_S = 180
MIB = 1024 * 1024


@dataclass(frozen=True)
class Answer:
    status: int
    message: str
    grew_mib: float
    children_mib: float

    def refused_in_one_line(self) -> bool:
        return 400 <= self.status < 500 and bool(self.message) and "\n" not in self.message


def _environment(data_dir: Path) -> dict[str, str]:
    env = {
        name: os.environ[name]
        for name in ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "PYTHONHASHSEED", "VIRTUAL_ENV")
        if name in os.environ
    }
    # SQLite and a folder broker and cache in the case's own data directory: no shared Redis or PostgreSQL.
    env.update({"N17Q_DATA_DIR": str(data_dir), "DJANGO_SETTINGS_MODULE": "n17q_site.settings", "N17Q_DEBUG": "1"})
    return env


class DoorServer:
    """tests/bounds/door.py, started once (Django set up, the operator and its token made in the migrated database),
    asked one case at a time; restarted after a case that hung."""

    def __init__(self, template_dir: Path) -> None:
        self.template_dir = template_dir
        self.process: subprocess.Popen[str] | None = None
        self.fresh = template_dir / "fresh.sqlite3"  # the database as migrated, for a server started again
        shutil.copyfile(template_dir / "n17q.sqlite3", self.fresh)

    def _start(self) -> subprocess.Popen[str]:
        shutil.copyfile(self.fresh, self.template_dir / "n17q.sqlite3")
        process = subprocess.Popen(
            [sys.executable, "-m", "tests.bounds.door"],
            cwd=ROOT,
            env=_environment(self.template_dir),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            start_new_session=True,  # its own process group: a hung case is killed with everything it started
        )
        line = self._line(process, HANG_S)
        assert line is not None and json.loads(line).get("ready"), "the door server did not start"
        return process

    @staticmethod
    def _line(process: subprocess.Popen[str], timeout: float) -> str | None:
        assert process.stdout is not None
        ready, _, _ = select.select([process.stdout], [], [], timeout)
        return process.stdout.readline() if ready else None

    def ask(self, case: dict[str, str]) -> dict | None:
        """The case's answer; None when it hung (the server is killed, to be started again for the next case)."""
        if self.process is None or self.process.poll() is not None:
            self.process = self._start()
        # The template database holds the operator and its token once the server has started: each case its copy.
        shutil.copyfile(self.template_dir / "n17q.sqlite3", case["database"])
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(case) + "\n")
        self.process.stdin.flush()
        line = self._line(self.process, HANG_S)
        if not line:
            self.stop()
            return None
        return json.loads(line)

    def stop(self) -> None:
        if self.process is None:
            return
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()
        self.process = None


@pytest.fixture(scope="session")
def door_server(tmp_path_factory):
    template_dir = tmp_path_factory.mktemp("bounds-template")
    done = subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v0"],
        cwd=ROOT,
        env=_environment(template_dir),
        capture_output=True,
        text=True,
        timeout=HANG_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    server = DoorServer(template_dir)
    yield server
    server.stop()


@pytest.fixture
def door(door_server, tmp_path):
    """door(name, data, *, file_name=..., content_type=..., encoding=..., query=...) -> Answer."""

    def run(
        name: str,
        data: bytes,
        *,
        file_name: str = "upload.bin",
        content_type: str = "application/json",
        encoding: str = "",
        query: str = "",
    ) -> Answer:
        case = tmp_path / uuid.uuid4().hex
        case.mkdir()
        source = case / file_name
        source.write_bytes(data)
        answer = door_server.ask(
            {
                "door": name,
                "input": str(source),
                "content_type": content_type,
                "encoding": encoding,
                "query": query,
                "database": str(case / "n17q.sqlite3"),
            }
        )
        if answer is None:
            pytest.fail(f"the {name} door did not answer within {HANG_S} s: hung", pytrace=False)
        return Answer(
            status=answer["status"],
            message=answer["message"],
            grew_mib=answer["grew_kib"] / 1024,
            children_mib=answer["children_kib"] / 1024,
        )

    return run


def assert_answered(answer: Answer, *, max_grew_mib: float, max_children_mib: float | None = None) -> None:
    """A 4xx in one line or success (2xx, or 0 for a command), within the memory bounds."""
    if os.environ.get("N17Q_BOUNDS_SHOW"):  # the figures against their bounds, to see the margins (pytest -s)
        case = os.environ.get("PYTEST_CURRENT_TEST", "").split("::")[-1]
        grew, child = f"{answer.grew_mib:.0f}/{max_grew_mib:.0f}", f"{answer.children_mib:.0f}"
        print(f"\nBOUNDS {case}: grew {grew} MiB, child {child} MiB")
    assert answer.status in (0, 1, 200, 201, 202) or answer.refused_in_one_line(), answer
    if answer.status == 1:  # a command's refusal: one line too
        assert answer.message and "\n" not in answer.message, answer
    assert answer.grew_mib <= max_grew_mib, f"the request added {answer.grew_mib:.0f} MiB (bound {max_grew_mib})"
    if max_children_mib is not None:
        assert answer.children_mib <= max_children_mib, (
            f"its child process peaked at {answer.children_mib:.0f} MiB (bound {max_children_mib})"
        )
