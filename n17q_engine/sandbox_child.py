"""The sandbox child: the first code that runs inside a replay sandbox (DESIGN §6 "Sandbox").

Started by :func:`n17q_engine.sandbox.run_sandboxed` as
``python -P -S -c CHILD_CODE ENTRY [--allow-test-entries]`` (see :data:`CHILD_CODE`)
inside its own network namespace, with an allowlisted environment, resource limits and no capabilities.

Protocol: the payload arrives on stdin; the entry's output bytes leave on stdout; stderr carries one JSON
object per line (``sandbox.started`` first, then ``sandbox.violation`` / ``sandbox.error`` events).

The audit hook installed here is telemetry that also stops the run: any socket connect/bind/send, DNS
lookup, subprocess/exec/fork, or file write outside the working folder is recorded on stderr and refused
(the hook raises :class:`SandboxViolation`, a ``BaseException`` so ``except Exception`` cannot swallow it),
and the child exits with :data:`EXIT_VIOLATION` even if the entry caught it. The network namespace, not
this hook, is the boundary.

Agent replays (``n17q_engine.agent``): the engine may start exactly one agent program and serve it one listening
socket on the namespace's own loopback. :func:`grant_agent` asks the hook for both, once per sandbox run: the hook
then lets through one ``subprocess.Popen`` of exactly that executable (the event the agent starter's request raises:
:func:`n17q_engine.agent_starter.start_agent`) and one ``bind`` to :data:`NAMESPACE_HOST`, and
nothing else, ever (a second grant is refused; a second launch or bind is a violation like any other). The agent
itself is not bound by this hook at all; what holds it is the kernel boundary it inherits.
"""

from __future__ import annotations

import importlib
import json
import os
import re
import sys
from collections.abc import Callable
from typing import Any

# The child's first statement, run by ``python -c`` before anything else is imported: the launcher measures
# spawn -> this marker (CLOCK_MONOTONIC is system-wide, so the two clocks agree). Importing this module
# has no side effects; the launcher imports it for the entry rules and exit codes.
CHILD_CODE = (
    "import os, time; "
    'os.write(2, b\'{"event":"sandbox.started","t_monotonic_ns":%d}\\n\' % time.monotonic_ns()); '
    "import n17q_engine.sandbox_child as c; raise SystemExit(c.main())"
)

EXIT_OK = 0
EXIT_BAD_ENTRY = 64
EXIT_BAD_OUTPUT = 65
EXIT_ENTRY_FAILED = 70
EXIT_VIOLATION = 86

# An agent replay's network (``run_sandboxed(..., network_watch=True)``): the namespace's own address, on its ``lo``,
# where the engine serves the agent its model endpoint (127.0.0.1 is not local there: it leaves by the watch's TUN),
# and the environment variable naming the TUN's descriptor, which only the engine holds.
NAMESPACE_HOST = "198.18.0.1"
NETWATCH_ENV = "N17Q_NETWATCH_FD"

ENTRY_RE = re.compile(r"^(?P<module>[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+):(?P<func>[A-Za-z_]\w*)$")
ENGINE_PREFIX = "n17q_engine."
TEST_PREFIX = "tests."

_SOCKET_EVENTS = {"socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg"}
_DNS_EVENTS = {"socket.getaddrinfo", "socket.gethostbyname", "socket.gethostbyaddr", "socket.getnameinfo"}
_PROCESS_EVENTS = {
    "subprocess.Popen",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.fork",
    "os.forkpty",
    "os.spawn",
    "pty.spawn",
}
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
_WRITABLE_DEVICES = {"/dev/null", "/dev/stdout", "/dev/stderr"}


class SandboxViolation(BaseException):
    """Raised by the audit hook to stop a forbidden operation (BaseException on purpose)."""


def entry_allowed(entry: str, *, allow_test_entries: bool) -> bool:
    """Entries are ``module:function`` under ``n17q_engine.`` (or ``tests.`` when the flag says so)."""
    if not ENTRY_RE.match(entry):
        return False
    if entry.startswith(ENGINE_PREFIX):
        return True
    return allow_test_entries and entry.startswith(TEST_PREFIX)


def emit(event: dict[str, Any]) -> None:
    """One JSON line on stderr, written with a raw os.write (no buffering, no audit recursion)."""
    os.write(2, (json.dumps(event, sort_keys=True, separators=(",", ":"), default=repr) + "\n").encode())


def _format_address(address: object) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        host, port = address[0], address[1]
        host_s = host.decode(errors="replace") if isinstance(host, bytes) else str(host)
        return f"[{host_s}]:{port}" if ":" in host_s else f"{host_s}:{port}"
    if isinstance(address, bytes):
        address = address.decode(errors="replace")
    if isinstance(address, str):
        return "@" + address[1:] if address.startswith("\0") else address  # "@name": abstract unix socket
    return repr(address)


def _dns_target(event: str, args: tuple[Any, ...]) -> str:
    if event == "socket.getaddrinfo":
        host, port = args[0], args[1]
        host_s = host.decode(errors="replace") if isinstance(host, bytes) else str(host)
        return host_s if port is None else f"{host_s}:{port}"
    return _format_address(args[0]) if args else ""


class AuditPolicy:
    """The audit hook: record and stop forbidden operations; remember that the run was stopped."""

    def __init__(self, workdir: str) -> None:
        self.workdir = os.path.abspath(workdir)
        self.violated = False
        self.granted = False  # an agent launch and its endpoint were granted (once per run, see grant_agent)
        self._launch: str | None = None  # the one executable that may still be started
        self._listen = False  # one bind to NAMESPACE_HOST may still be made

    def grant(self, executable: str) -> None:
        if self.granted:
            raise SandboxViolation("sandbox: an agent was already granted in this run")
        self.granted = True
        self._launch = os.path.abspath(executable)
        self._listen = True

    def _granted_launch(self, event: str, args: tuple[Any, ...]) -> bool:
        if event != "subprocess.Popen" or self._launch is None or not args:
            return False
        executable = args[0]
        if isinstance(executable, bytes):
            executable = os.fsdecode(executable)
        if not isinstance(executable, str) or os.path.abspath(executable) != self._launch:
            return False
        self._launch = None
        return True

    def _granted_bind(self, event: str, args: tuple[Any, ...]) -> bool:
        if event != "socket.bind" or not self._listen or len(args) < 2:
            return False
        address = args[1]
        if not (isinstance(address, tuple) and len(address) == 2 and address[0] == NAMESPACE_HOST):
            return False
        self._listen = False
        return True

    def _stop(self, attempted: str, target: str) -> None:
        self.violated = True
        emit({"event": "sandbox.violation", "attempted": attempted, "target": target, "stopped": True})
        raise SandboxViolation(f"sandbox: {attempted} attempt stopped: {target}")

    def _file_write_outside(self, path: object, flags: object) -> str | None:
        if not isinstance(flags, int) or not flags & _WRITE_FLAGS:
            return None
        if isinstance(path, int):  # an already-open descriptor
            return None
        if isinstance(path, bytes):
            path = path.decode(errors="replace")
        path_s = os.path.abspath(os.fspath(path)) if isinstance(path, str | os.PathLike) else repr(path)
        if path_s in _WRITABLE_DEVICES or path_s == self.workdir or path_s.startswith(self.workdir + os.sep):
            return None
        return path_s

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if self.granted and (self._granted_launch(event, args) or self._granted_bind(event, args)):
            return
        if event in _SOCKET_EVENTS:
            self._stop("socket", _format_address(args[1]) if len(args) > 1 else "")
        elif event in _DNS_EVENTS:
            self._stop("dns", _dns_target(event, args))
        elif event in _PROCESS_EVENTS:
            target = args[0] if args else ""
            if event in {"subprocess.Popen", "os.exec", "os.posix_spawn", "os.spawn"} and len(args) > 1:
                target = args[0] if args[0] is not None else args[1]
            if event in {"os.fork", "os.forkpty"}:
                target = event
            if isinstance(target, list | tuple):
                target = " ".join(os.fsdecode(t) if isinstance(t, str | bytes) else repr(t) for t in target)
            self._stop("subprocess", os.fsdecode(target) if isinstance(target, str | bytes) else repr(target))
        elif event == "open" and len(args) >= 3:
            outside = self._file_write_outside(args[0], args[2])
            if outside is not None:
                self._stop("file", outside)


_ACTIVE: AuditPolicy | None = None


def grant_agent(executable: str) -> None:
    """Let the running sandbox start `executable` once and bind one listener on NAMESPACE_HOST once (see the module
    docstring). Raises RuntimeError outside a sandbox child: an agent is never started where no boundary is."""
    if _ACTIVE is None:
        raise RuntimeError("an agent runs only inside the sandbox (no sandbox audit hook is installed here)")
    _ACTIVE.grant(executable)


def echo(payload: bytes) -> bytes:
    """The smallest entry: the launcher's health check and the start-time benchmark's subject."""
    return payload


def _load(entry: str) -> Callable[[bytes], bytes]:
    module_name, func_name = entry.split(":", 1)
    func = getattr(importlib.import_module(module_name), func_name)
    if not callable(func):
        raise TypeError(f"{entry} is not callable")
    return func


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    allow_tests = "--allow-test-entries" in argv
    positional = [a for a in argv if not a.startswith("--")]
    if len(positional) != 1 or not entry_allowed(positional[0], allow_test_entries=allow_tests):
        emit({"event": "sandbox.error", "type": "BadEntry", "message": f"entry not allowed: {positional!r}"})
        return EXIT_BAD_ENTRY
    entry = positional[0]
    payload = sys.stdin.buffer.read()
    global _ACTIVE
    policy = AuditPolicy(os.getcwd())
    sys.addaudithook(policy)
    _ACTIVE = policy
    out_stream = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print() in the entry lands on stderr, never in the output bytes
    try:
        output = _load(entry)(payload)
    except SandboxViolation:
        return EXIT_VIOLATION
    except BaseException as exc:
        if policy.violated:
            return EXIT_VIOLATION
        emit({"event": "sandbox.error", "type": type(exc).__name__, "message": str(exc)[:2000]})
        return EXIT_ENTRY_FAILED
    if policy.violated:  # the entry caught the stop and carried on: the run still counts as stopped
        return EXIT_VIOLATION
    if not isinstance(output, bytes | bytearray | memoryview):
        emit({"event": "sandbox.error", "type": "BadOutput", "message": f"entry returned {type(output).__name__}"})
        return EXIT_BAD_OUTPUT
    out_stream.write(bytes(output))
    out_stream.flush()
    return EXIT_OK
