"""The replay sandbox launcher (DESIGN §6 "Sandbox"): run one engine callable in an isolated child process.

``run_sandboxed("n17q_engine.module:function", payload, allow_degraded=False, limits=Limits(), timeout_s=30)``
spawns ``n17q_engine.sandbox_child`` which reads ``payload`` from stdin, calls ``function(payload) -> bytes``
and writes the bytes to stdout; stderr carries one JSON audit event per line.

Isolation, applied in the forked child before the interpreter starts (``preexec_fn``):

* its own network namespace (``unshare(CLONE_NEWNET)``; ``CLONE_NEWUSER|CLONE_NEWNET`` when not root): only a
  loopback interface, left down, so nothing at all is reachable, not even 127.0.0.1 or abstract unix sockets
  of the host. If the namespace cannot be made the launcher raises :class:`IsolationUnavailable` and nothing
  runs, unless ``allow_degraded=True``, in which case the run goes ahead and reports ``isolation="degraded"``;
* resource limits (CPU seconds, address space, open files, processes, file size, no core dumps);
* every capability dropped (bounding set emptied, ``no_new_privs``), so a root child cannot leave the
  namespace again (``setns`` needs CAP_SYS_ADMIN) or raise its limits;
* ``PR_SET_PDEATHSIG=SIGKILL``: the child dies with the launcher; the child leads its own session and the
  whole process group is killed on timeout;
* an exact environment allowlist (:func:`child_environment`), ``close_fds`` (only 0, 1, 2 are inherited)
  and a fresh temporary working folder, removed afterwards.

Inside, the child installs an audit hook that records and stops socket, DNS, subprocess and out-of-folder
file-write attempts (see :mod:`n17q_engine.sandbox_child`).

This module imports no network client (import-linter contract); it needs ``subprocess`` and ``ctypes`` only.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .sandbox_child import CHILD_CODE, EXIT_VIOLATION, entry_allowed

__all__ = [
    "EXIT_VIOLATION",
    "IsolationUnavailable",
    "Limits",
    "SandboxError",
    "SandboxResult",
    "child_environment",
    "run_sandboxed",
]

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_LINUX_CAPABILITY_VERSION_3 = 0x20080522

# Exit codes used by the pre-exec set-up (the interpreter never started, so no marker was written).
_EXIT_NO_NAMESPACE = 87
_EXIT_SETUP_FAILED = 88

REPO_ROOT = Path(__file__).resolve().parent.parent


class SandboxError(RuntimeError):
    """The sandbox could not be set up."""


class IsolationUnavailable(SandboxError):
    """No network namespace could be made and degraded isolation was not allowed: nothing ran."""


@dataclass(frozen=True)
class Limits:
    cpu_s: int = 60
    memory_bytes: int = 1 << 30  # RLIMIT_AS
    open_files: int = 64
    processes: int = 64  # RLIMIT_NPROC (per user; not enforced by the kernel for uid 0)
    file_size_bytes: int = 64 << 20


@dataclass(frozen=True)
class SandboxResult:
    isolation: str  # "netns" | "degraded"
    returncode: int
    output: bytes
    violations: list[dict[str, Any]]
    wall_s: float
    start_s: float | None  # spawn -> first engine instruction (the child's marker); None if it never started
    timed_out: bool = False
    events: list[dict[str, Any]] = field(default_factory=list)
    stderr: str = ""  # whatever on stderr was not a JSON event line (interpreter crashes, say)

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.violations and not self.timed_out


def child_environment(isolation: str = "netns") -> dict[str, str]:
    """The complete environment of a sandbox child: an allowlist, nothing inherited.

    `N17Q_SANDBOX_ISOLATION` tells the engine the isolation level the launcher made, so the replay's own
    log can name it; it is written by the launcher, never by anything the model or a fixture controls.
    """
    return {
        "PATH": "/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": str(REPO_ROOT),
        "N17Q_SANDBOX_ISOLATION": isolation,
    }


class _Libc:
    """The few libc calls the pre-exec step needs, resolved in the parent (nothing is loaded after fork)."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(None, use_errno=True)
        self.unshare_fn = lib.unshare
        self.unshare_fn.argtypes = [ctypes.c_int]
        self.prctl_fn = lib.prctl
        self.prctl_fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
        self.capset_fn = lib.capset
        try:
            self.cap_last = int(Path("/proc/sys/kernel/cap_last_cap").read_text())
        except (OSError, ValueError):
            self.cap_last = 40
        self.cap_header = (ctypes.c_uint32 * 2)(_LINUX_CAPABILITY_VERSION_3, 0)
        self.cap_data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable} words, all zero

    @staticmethod
    def _check(rc: int) -> None:
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err))

    def unshare(self, flags: int) -> None:
        self._check(self.unshare_fn(flags))

    def prctl(self, option: int, arg: int) -> None:
        self._check(self.prctl_fn(option, arg, 0, 0, 0))

    def drop_capabilities(self, *, required: bool) -> None:
        for cap in range(self.cap_last + 1):
            if self.prctl_fn(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and required:
                self._check(-1)
        self.prctl(_PR_SET_NO_NEW_PRIVS, 1)
        self._check(self.capset_fn(self.cap_header, self.cap_data))


_libc: _Libc | None = None


def _get_libc() -> _Libc:
    global _libc
    if _libc is None:
        _libc = _Libc()
    return _libc


def _rlimits(limits: Limits) -> list[tuple[int, int]]:
    return [
        (resource.RLIMIT_CPU, limits.cpu_s),
        (resource.RLIMIT_AS, limits.memory_bytes),
        (resource.RLIMIT_NOFILE, limits.open_files),
        (resource.RLIMIT_NPROC, limits.processes),
        (resource.RLIMIT_FSIZE, limits.file_size_bytes),
        (resource.RLIMIT_CORE, 0),
    ]


def _make_preexec(
    *, isolate: bool, limits: Limits, unshare: Callable[[int], None] | None, parent_pid: int
) -> Callable[[], None]:
    libc = _get_libc()
    root = os.geteuid() == 0
    flags = CLONE_NEWNET if root else CLONE_NEWUSER | CLONE_NEWNET
    do_unshare = unshare if unshare is not None else libc.unshare
    rlimits = _rlimits(limits)

    def preexec() -> None:  # runs in the forked child, before exec; keep it to plain system calls
        if isolate:
            try:
                do_unshare(flags)
            except BaseException:
                os._exit(_EXIT_NO_NAMESPACE)
        try:
            for which, value in rlimits:
                _soft, hard = resource.getrlimit(which)
                if hard != resource.RLIM_INFINITY and value > hard and not root:
                    value = hard
                resource.setrlimit(which, (value, value))
            libc.drop_capabilities(required=root)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
            if os.getppid() != parent_pid:  # the launcher died before the death signal was armed
                os._exit(_EXIT_SETUP_FAILED)
        except BaseException:
            os._exit(_EXIT_SETUP_FAILED)

    return preexec


_ENTRY_SHAPE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+:[A-Za-z_]\w*$")


def _parse_stderr(raw: bytes) -> tuple[list[dict[str, Any]], str]:
    events: list[dict[str, Any]] = []
    other: list[str] = []
    for line in raw.decode(errors="replace").splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            obj = None
        if isinstance(obj, dict) and isinstance(obj.get("event"), str):
            events.append(obj)
        elif line:
            other.append(line)
    return events, "\n".join(other)


def _spawn(
    entry: str,
    payload: bytes,
    *,
    isolate: bool,
    limits: Limits,
    timeout_s: float,
    unshare: Callable[[int], None] | None,
    allow_test_entries: bool,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> tuple[int, bytes, bytes, float, int, bool]:
    argv = [sys.executable, "-P", "-S", "-c", CHILD_CODE, entry]
    if allow_test_entries:
        argv.append("--allow-test-entries")
    workdir = tempfile.mkdtemp(prefix="n17q-sandbox-")
    preexec = _make_preexec(isolate=isolate, limits=limits, unshare=unshare, parent_pid=os.getpid())
    timed_out = False
    try:
        spawn_ns = time.monotonic_ns()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=child_environment("netns" if isolate else "degraded"),
            close_fds=True,
            start_new_session=True,
            preexec_fn=preexec,
        )
        try:
            if on_event is not None:
                out, err, timed_out = _communicate_streaming(proc, payload, timeout_s, on_event)
            else:
                try:
                    out, err = proc.communicate(payload, timeout=timeout_s)
                except subprocess.TimeoutExpired:
                    timed_out = True
                    _kill_group(proc)
                    out, err = proc.communicate()
        except BaseException:
            _kill_group(proc)
            proc.wait()
            raise
        wall_s = (time.monotonic_ns() - spawn_ns) / 1e9
        _kill_group(proc)  # anything the child left behind in its group
        return proc.returncode, out, err, wall_s, spawn_ns, timed_out
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _communicate_streaming(
    proc: subprocess.Popen[bytes], payload: bytes, timeout_s: float, on_event: Callable[[dict[str, Any]], None]
) -> tuple[bytes, bytes, bool]:
    """`communicate`, but each JSON event line on stderr reaches `on_event` as it arrives (in this thread).

    stdin and stdout are served by two threads so a large payload or output never blocks the pipe; a timer
    kills the child's group at the deadline. An exception from `on_event` is not the child's fault: it is
    dropped, and the line is kept with the rest of stderr either way.
    """
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    stdin, stdout, stderr = proc.stdin, proc.stdout, proc.stderr
    chunks: list[bytes] = []

    def feed() -> None:
        with contextlib.suppress(BrokenPipeError, OSError):
            stdin.write(payload)
        with contextlib.suppress(BrokenPipeError, OSError):
            stdin.close()

    def drain() -> None:
        chunks.append(stdout.read())

    expired = threading.Event()

    def expire() -> None:
        expired.set()
        _kill_group(proc)

    threads = [threading.Thread(target=feed, daemon=True), threading.Thread(target=drain, daemon=True)]
    timer = threading.Timer(timeout_s, expire)
    timer.daemon = True
    for t in threads:
        t.start()
    timer.start()
    err_lines: list[bytes] = []
    try:
        for line in stderr:
            err_lines.append(line)
            if line.startswith(b"{"):
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                if isinstance(event, dict):
                    with contextlib.suppress(Exception):
                        on_event(event)
        proc.wait()
    finally:
        timer.cancel()
    for t in threads:
        t.join()
    return b"".join(chunks), b"".join(err_lines), expired.is_set()


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_sandboxed(
    entry: str,
    payload: bytes,
    *,
    allow_degraded: bool,
    limits: Limits,
    timeout_s: float,
    allow_test_entries: bool = False,
    on_event: Callable[[dict[str, Any]], None] | None = None,
    _unshare: Callable[[int], None] | None = None,
) -> SandboxResult:
    """Run ``entry`` ("n17q_engine.module:function") on ``payload`` in a sandboxed child process.

    ``allow_test_entries`` lets entries under ``tests.`` run (the test suite's probes only).
    ``on_event`` receives every JSON event line of the child's stderr as it is written (the replay's
    ``replay.progress`` lines, say), in the calling thread, while the child runs.
    ``_unshare`` replaces the ``unshare(2)`` call, so tests can make namespace creation fail.
    Raises :class:`IsolationUnavailable` when no namespace can be made and ``allow_degraded`` is false.
    """
    if not _ENTRY_SHAPE.match(entry) or not entry_allowed(entry, allow_test_entries=allow_test_entries):
        raise ValueError(f"sandbox entry must be 'n17q_engine.module:function', got {entry!r}")
    isolation = "netns"
    common: dict[str, Any] = {
        "limits": limits,
        "timeout_s": timeout_s,
        "unshare": _unshare,
        "allow_test_entries": allow_test_entries,
        "on_event": on_event,
    }
    rc, out, err, wall_s, spawn_ns, timed_out = _spawn(entry, payload, isolate=True, **common)
    events, other = _parse_stderr(err)
    started = [e for e in events if e.get("event") == "sandbox.started"]
    if not started and rc == _EXIT_NO_NAMESPACE:
        if not allow_degraded:
            raise IsolationUnavailable("no network namespace could be made; refusing to run without one")
        isolation = "degraded"
        rc, out, err, wall_s, spawn_ns, timed_out = _spawn(entry, payload, isolate=False, **common)
        events, other = _parse_stderr(err)
        started = [e for e in events if e.get("event") == "sandbox.started"]
    if not started and rc == _EXIT_SETUP_FAILED:
        raise SandboxError("the sandbox child could not apply its limits or drop its privileges")
    start_s = (int(started[0]["t_monotonic_ns"]) - spawn_ns) / 1e9 if started else None
    violations = [
        {"attempted": e["attempted"], "target": e["target"], "stopped": e["stopped"]}
        for e in events
        if e.get("event") == "sandbox.violation"
    ]
    return SandboxResult(
        isolation=isolation,
        returncode=rc,
        output=out,
        violations=violations,
        wall_s=wall_s,
        start_s=start_s,
        timed_out=timed_out,
        events=events,
        stderr=other,
    )
