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

A network client is stopped when it is built, before any request (seed 000, "Missing mutations were treated most
strictly": "Replay failed if any constructor ran, even if no request followed"): a new socket of any family but
``AF_UNIX`` (the ``socket.__new__`` audit event; a socket object wrapping a descriptor that already exists, as
``accept`` makes, builds nothing new), and the constructors of the HTTP, FTP and mail clients in
:data:`CLIENT_CONSTRUCTORS`, whichever of their modules is imported (a finder on ``sys.meta_path`` wraps them as
their module loads). Each is a ``sandbox.violation`` with ``attempted: client`` and the constructor as ``target``.

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
# Seed 000: the clients whose construction alone stops the run, by module: HTTP (the standard library's, and urllib3,
# requests, httpx and aiohttp when importable), FTP and mail. A subclass (HTTPSConnection, ProxyManager) calls its
# base's constructor, so the base is enough.
CLIENT_CONSTRUCTORS: dict[str, tuple[str, ...]] = {
    "http.client": ("HTTPConnection",),
    "urllib.request": ("OpenerDirector",),
    "ftplib": ("FTP",),
    "smtplib": ("SMTP",),
    "imaplib": ("IMAP4",),
    "poplib": ("POP3",),
    "urllib3.poolmanager": ("PoolManager",),
    "urllib3.connectionpool": ("HTTPConnectionPool",),
    "requests.sessions": ("Session",),
    "httpx._client": ("Client", "AsyncClient"),
    "aiohttp.client": ("ClientSession",),
}
# Socket families and types by number (the engine imports no `socket` module: the import-linter contract).
_AF_UNIX = 1
_FAMILIES = {2: "AF_INET", 10: "AF_INET6", 16: "AF_NETLINK", 17: "AF_PACKET"}
_TYPES = {1: "SOCK_STREAM", 2: "SOCK_DGRAM", 3: "SOCK_RAW", 5: "SOCK_SEQPACKET"}
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


def _wraps_a_descriptor() -> bool:
    """Whether the `socket.__new__` being audited wraps a descriptor that already exists (`accept`, `dup`, `fromfd`):
    `socket.socket.__init__`'s own `fileno` argument, read from its frame (above this function and the hook's call).
    A socket built by `_socket.socket` directly has no such frame: it builds a new one."""
    try:
        frame = sys._getframe(2)
    except ValueError:
        return False
    code = frame.f_code
    return (
        code.co_name == "__init__"
        and code.co_filename.endswith("socket.py")
        and frame.f_locals.get("fileno") is not None
    )


def _socket_target(args: tuple[Any, ...]) -> str:
    family, kind = (args[1], args[2]) if len(args) > 2 else (None, None)
    family_s = _FAMILIES.get(family, str(family)) if isinstance(family, int) else "?"
    kind_s = _TYPES.get(kind & 0xF, str(kind)) if isinstance(kind, int) else "?"
    return f"socket.socket({family_s}, {kind_s})"


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
        self._listener = False  # one internet socket may still be built (the listener that bind is for)

    def grant(self, executable: str) -> None:
        if self.granted:
            raise SandboxViolation("sandbox: an agent was already granted in this run")
        self.granted = True
        self._launch = os.path.abspath(executable)
        self._listen = True
        self._listener = True

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

    def _granted_listener(self, event: str, args: tuple[Any, ...]) -> bool:
        if event != "socket.__new__" or not self._listener or len(args) < 2 or args[1] not in (2, 10):
            return False
        self._listener = False
        return True

    def client_built(self, target: str) -> None:
        """A client constructor ran (the wrappers `watch_clients` installs): stop the run, naming it."""
        self._stop("client", target)

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
        if self.granted and (
            self._granted_launch(event, args) or self._granted_bind(event, args) or self._granted_listener(event, args)
        ):
            return
        if event == "socket.__new__":
            if len(args) > 1 and args[1] != _AF_UNIX and not _wraps_a_descriptor():
                self._stop("client", _socket_target(args))
        elif event in _SOCKET_EVENTS:
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


def _constructor_watch(policy: AuditPolicy, cls: type) -> Callable[..., None]:
    # The constructor the class runs (its own or the nearest base's), read from the class dicts, not an instance.
    original: Callable[..., None] = next(c.__dict__["__init__"] for c in cls.__mro__ if "__init__" in c.__dict__)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        first = next((a for a in (*args, kwargs.get("host"), kwargs.get("base_url")) if isinstance(a, str)), None)
        # Named when built, as the class names itself then (httpx re-homes its classes after their module loads).
        built = f"{type(self).__module__}.{type(self).__qualname__}"
        policy.client_built(f"{built}({first})" if first else built)
        original(self, *args, **kwargs)

    return __init__


def _watch_module(policy: AuditPolicy, module: Any) -> None:
    for class_name in CLIENT_CONSTRUCTORS.get(module.__name__, ()):
        cls = getattr(module, class_name, None)
        if isinstance(cls, type):
            cls.__init__ = _constructor_watch(policy, cls)  # type: ignore[misc]


class _WatchingLoader:
    """A module loader that, after its module ran, wraps the module's client constructors."""

    def __init__(self, loader: Any, policy: AuditPolicy) -> None:
        self.loader, self.policy = loader, policy

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self.loader.exec_module(module)
        _watch_module(self.policy, module)


class ClientWatch:
    """The `sys.meta_path` finder of the client modules (`CLIENT_CONSTRUCTORS`): the spec the other finders give,
    with a loader that wraps the constructors once the module is loaded."""

    def __init__(self, policy: AuditPolicy) -> None:
        self.policy = policy

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in CLIENT_CONSTRUCTORS:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _WatchingLoader(spec.loader, self.policy)  # type: ignore[assignment]
                return spec
        return None


def watch_clients(policy: AuditPolicy) -> None:
    """Stop the run when a client of `CLIENT_CONSTRUCTORS` is built: wrap those already imported, and the rest as
    they are imported."""
    for module_name in CLIENT_CONSTRUCTORS:
        module = sys.modules.get(module_name)
        if module is not None:
            _watch_module(policy, module)
    sys.meta_path.insert(0, ClientWatch(policy))


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
    watch_clients(policy)
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
