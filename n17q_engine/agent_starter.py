"""The agent starter (issue 33): the one process that may start an agent, in a PID namespace of the agent's own.

The sandbox's pre-exec step (``n17q_engine.sandbox._StarterSetup``) forks it from the engine's first process while
that still holds its capabilities, inside the view. The starter unshares ``CLONE_NEWPID`` and ``CLONE_NEWNS`` and
forks at once the new PID namespace's first process, which mounts that namespace's own ``/proc`` (so the agent sees
only its own tree there) and waits, as :func:`main` ``first``, for the one request to become the agent. Both keep one
socket each and /dev/null (stderr stays the sandbox's event channel, for a line if the agent cannot be started),
close every other inherited descriptor, drop their privileges as the engine does (limits, bounding set, nobody's uid
when root, capabilities, ``no_new_privs``, the death signal; non-dumpable once running) and exec a fresh
interpreter running :func:`main` here. The engine holds the other end of the starter's socket, at the number in
:data:`STARTER_ENV`. So the engine itself never unshares a PID namespace and stays free to make threads (Linux
refuses ``clone(CLONE_THREAD)`` to a process whose namespace for children differs from its own), while the agent is
the first process of a namespace below the engine's: ``getppid()`` is 0 there, ``kill(1, ...)`` names only itself,
``kill(-1, ...)`` only its own tree, its ``/proc`` lists only its own tree, and no pid it can name is the engine's or
the starter's. When it exits, the kernel ends everything it left in its namespace.

Protocol (``SOCK_SEQPACKET``, one JSON object a message): the engine sends ONE request ``{"argv", "env", "cwd"}``
with the agent's stdin, stdout and stderr attached (``SCM_RIGHTS``); the starter hands it to the waiting first
process (which leads a session of its own and execs the agent on those descriptors), answers ``{"pid": N}`` (the
agent's pid as the engine sees it) or ``{"error": ...}``, waits for it and sends ``{"exit": returncode}`` (negative:
the signal that ended it, as ``subprocess`` says it). Every further request is answered ``{"error": "refused: ..."}``.
When the engine's end closes, the starter kills the agent (if it still runs) and exits.

The engine's side is :func:`start_agent` (a ``subprocess.Popen``-like :class:`StartedAgent`): it raises the same
``subprocess.Popen`` audit event a launch would, so the sandbox's audit hook lets exactly the one granted start
through (:func:`n17q_engine.sandbox_child.grant_agent`) and stops any other. Messages go through libc's
``sendmsg``/``recvmsg`` (ctypes: the engine imports no network client).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import subprocess
import sys
import threading
from typing import IO, Any

STARTER_ENV = "N17Q_AGENT_STARTER_FD"
STARTER_FD = 3  # the starter's end of the engine's socket, in the starter
FIRST_FD = 4  # the socket between the starter and the namespace's first process, in both
STARTER_CODE = "import n17q_engine.agent_starter as s; raise SystemExit(s.main())"
MESSAGE_BYTES = 1 << 20  # a request: the agent's argv, environment and folder
_SOL_SOCKET, _SCM_RIGHTS, _MSG_CMSG_CLOEXEC = 1, 1, 0x40000000
_PR_SET_DUMPABLE = 4
_STD_FDS = 3
ENGINE_PROCESS_RESERVE = 32  # processes and threads of the uid the agent can never take from the engine

_libc = ctypes.CDLL(None, use_errno=True)


class _Iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class _Msghdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32), ("iov", ctypes.POINTER(_Iovec)),
                ("iovlen", ctypes.c_size_t), ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]  # fmt: skip


_libc.sendmsg.argtypes = [ctypes.c_int, ctypes.POINTER(_Msghdr), ctypes.c_int]
_libc.sendmsg.restype = ctypes.c_ssize_t
_libc.recvmsg.argtypes = [ctypes.c_int, ctypes.POINTER(_Msghdr), ctypes.c_int]
_libc.recvmsg.restype = ctypes.c_ssize_t
_CMSG_HEADER = ctypes.sizeof(ctypes.c_size_t) + 2 * ctypes.sizeof(ctypes.c_int)  # struct cmsghdr


def _cmsg_space(nfds: int) -> int:
    align = ctypes.sizeof(ctypes.c_size_t)
    return _CMSG_HEADER + (nfds * 4 + align - 1) // align * align


def send(fd: int, message: dict[str, Any], fds: tuple[int, ...] = ()) -> None:
    """One message on the starter's socket, with `fds` attached (SCM_RIGHTS)."""
    data = json.dumps(message, sort_keys=True).encode()
    body = ctypes.create_string_buffer(data, len(data))
    iov = _Iovec(ctypes.cast(body, ctypes.c_void_p), len(data))
    msg = _Msghdr(None, 0, ctypes.pointer(iov), 1, None, 0, 0)
    control = None
    if fds:
        control = ctypes.create_string_buffer(_cmsg_space(len(fds)))
        header = (_CMSG_HEADER + 4 * len(fds)).to_bytes(ctypes.sizeof(ctypes.c_size_t), sys.byteorder)
        header += _SOL_SOCKET.to_bytes(4, sys.byteorder) + _SCM_RIGHTS.to_bytes(4, sys.byteorder)
        payload = b"".join(f.to_bytes(4, sys.byteorder) for f in fds)
        ctypes.memmove(control, header + payload, len(header) + len(payload))
        msg.control, msg.controllen = ctypes.cast(control, ctypes.c_void_p), len(control)
    while True:
        sent = _libc.sendmsg(fd, ctypes.byref(msg), 0)
        if sent >= 0:
            return
        err = ctypes.get_errno()
        if err != 4:  # EINTR
            raise OSError(err, os.strerror(err))


def receive(fd: int, max_fds: int = _STD_FDS) -> tuple[dict[str, Any] | None, list[int]]:
    """One message and the descriptors attached to it (close-on-exec); (None, []) when the other end closed."""
    body = ctypes.create_string_buffer(MESSAGE_BYTES)
    iov = _Iovec(ctypes.cast(body, ctypes.c_void_p), MESSAGE_BYTES)
    control = ctypes.create_string_buffer(_cmsg_space(max_fds))
    msg = _Msghdr(None, 0, ctypes.pointer(iov), 1, ctypes.cast(control, ctypes.c_void_p), len(control), 0)
    while True:
        got = _libc.recvmsg(fd, ctypes.byref(msg), _MSG_CMSG_CLOEXEC)
        if got >= 0:
            break
        err = ctypes.get_errno()
        if err != 4:
            raise OSError(err, os.strerror(err))
    fds: list[int] = []
    raw = control.raw[: msg.controllen]
    size = ctypes.sizeof(ctypes.c_size_t)
    while len(raw) >= _CMSG_HEADER:
        length = int.from_bytes(raw[:size], sys.byteorder)
        level = int.from_bytes(raw[size : size + 4], sys.byteorder)
        kind = int.from_bytes(raw[size + 4 : size + 8], sys.byteorder)
        if level == _SOL_SOCKET and kind == _SCM_RIGHTS:
            data = raw[_CMSG_HEADER:length]
            fds += [int.from_bytes(data[i : i + 4], sys.byteorder) for i in range(0, len(data) - 3, 4)]
        step = _cmsg_space((length - _CMSG_HEADER + 3) // 4)
        raw = raw[step:]
    if got == 0:
        for extra in fds:
            os.close(extra)
        return None, []
    try:
        message = json.loads(body.raw[:got])
    except ValueError:
        message = None
    return (message if isinstance(message, dict) else {}), fds


# --- the starter ---------------------------------------------------------------------------------------------------


def _request_problem(request: dict[str, Any], fds: list[int]) -> str | None:
    argv, env, cwd = request.get("argv"), request.get("env"), request.get("cwd")
    if len(fds) != _STD_FDS:
        return f"a start request carries the agent's stdin, stdout and stderr ({len(fds)} descriptors came)"
    if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)):
        return "argv: a non-empty list of strings"
    if not (isinstance(env, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())):
        return "env: an object of strings"
    if not isinstance(cwd, str):
        return "cwd: a folder"
    return None


def _leave_the_engine_its_processes() -> None:
    """RLIMIT_NPROC counts every process and thread of the uid, the engine's included: the agent's limit (soft and
    hard, so it cannot raise it back) is the engine's less ENGINE_PROCESS_RESERVE, so an agent that forks until the
    kernel refuses leaves the engine the threads it needs to end the run and write its record."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
    if soft == resource.RLIM_INFINITY:
        return
    lowered = max(1, soft - ENGINE_PROCESS_RESERVE)
    resource.setrlimit(
        resource.RLIMIT_NPROC, (lowered, lowered if hard == resource.RLIM_INFINITY else min(hard, lowered))
    )


def _exec_agent(request: dict[str, Any], fds: list[int]) -> None:
    """In the forked child, the new namespace's pid 1: the agent on the three descriptors, nothing else open."""
    try:
        os.setsid()  # its own session and group: kill(0, ...) reaches its own tree, not the engine's group
        _leave_the_engine_its_processes()
        for number in (signal.SIGPIPE, signal.SIGXFSZ):  # the interpreter ignores these; the agent starts as exec does
            signal.signal(number, signal.SIG_DFL)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)  # inheritable copies; the originals are close-on-exec
        os.closerange(_STD_FDS, 1 << 20)
        os.chdir(request["cwd"])
        os.execve(request["argv"][0], request["argv"], request["env"])
    except BaseException as exc:
        with contextlib.suppress(BaseException):
            os.write(2, f"n17q agent starter: cannot start {request['argv'][0]}: {exc}\n".encode())
    os._exit(127)


def _told(fd: int, message: dict[str, Any]) -> bool:
    try:
        send(fd, message)
    except OSError:  # the engine's end is closed
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    """``starter <pid of the namespace's first process>`` or ``first``: see the module docstring."""
    argv = sys.argv[1:] if argv is None else argv
    if _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:  # the agent's uid is ours: no ptrace, no /proc of us
        return 1
    if argv[:1] == ["first"]:
        return _first()
    if argv[:1] == ["starter"] and len(argv) == 2 and argv[1].isdigit():
        return _starter(int(argv[1]))
    os.write(2, b"n17q agent starter: usage: starter <pid> | first\n")
    return 2


def _first() -> int:
    """The agent's namespace's first process, until it becomes the agent: one request from the starter (on
    :data:`FIRST_FD`), then exec; nothing, if the starter closes its end first."""
    request, fds = receive(FIRST_FD)
    if request is None:
        return 0
    os.close(FIRST_FD)
    _exec_agent(request, fds)
    return 127  # not reached: _exec_agent execs or exits


def _starter(first: int) -> int:
    """The starter's loop on the engine's socket (:data:`STARTER_FD`); `first` is the namespace's first process (the
    agent to be), waiting on the other end of :data:`FIRST_FD`."""
    fd = STARTER_FD
    pidfd = os.pidfd_open(first)  # readable when the agent (or the waiting first process) has ended
    first_fd: int | None = pidfd
    started = False
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    poller.register(pidfd, select.POLLIN)
    while True:
        for ready, _events in poller.poll():
            if ready == first_fd and first_fd is not None:
                _pid, status = os.waitpid(first, 0)
                poller.unregister(first_fd)
                os.close(first_fd)
                first_fd = None
                if started and not _told(fd, {"exit": os.waitstatus_to_exitcode(status)}):
                    return 0
                continue
            request, fds = receive(fd)
            if request is None:  # the engine is gone (or done): so is its agent
                if first_fd is not None:
                    with contextlib.suppress(OSError):
                        signal.pidfd_send_signal(first_fd, signal.SIGKILL)
                return 0
            if started:
                problem: str | None = "refused: this starter started its agent"
            elif first_fd is None:
                problem = "refused: the agent's namespace is gone"
            else:
                problem = _request_problem(request, fds)
            if problem is None:
                try:
                    send(FIRST_FD, request, tuple(fds))
                except OSError as exc:
                    problem = f"the agent's namespace did not take the request ({exc.strerror})"
            for extra in fds:
                os.close(extra)
            if problem is not None:
                if not _told(fd, {"error": problem}):
                    return 0
                continue
            started = True
            os.close(FIRST_FD)
            if not _told(fd, {"pid": first}):
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(pidfd, signal.SIGKILL)
                return 0


# --- the engine's side ---------------------------------------------------------------------------------------------


class StarterError(RuntimeError):
    """The starter refused the request or is gone: no agent runs."""


class StartedAgent:
    """The agent the starter started, as ``subprocess.Popen`` shows a child: ``pid``, ``stdin``/``stdout``/``stderr``
    (binary files), ``poll``, ``wait`` (``subprocess.TimeoutExpired``), ``kill`` (SIGKILL through a pidfd: the
    namespace dies with it) and ``returncode`` (from the starter's report)."""

    def __init__(self, fd: int, pid: int, stdin: IO[bytes], stdout: IO[bytes], stderr: IO[bytes]) -> None:
        self.fd, self.pid = fd, pid
        self.stdin, self.stdout, self.stderr = stdin, stdout, stderr
        self.args = ()
        self.returncode: int | None = None
        self._ended = threading.Event()
        self._lock = threading.Lock()
        try:
            self._pidfd: int | None = os.pidfd_open(pid)
        except OSError:  # already ended and reaped: its exit is on its way
            self._pidfd = None
        self._reader = threading.Thread(target=self._read_exit, name="n17q-agent-starter", daemon=True)
        self._reader.start()

    def _read_exit(self) -> None:
        try:
            while True:
                message, fds = receive(self.fd)
                for extra in fds:
                    os.close(extra)
                if message is None:
                    self.returncode = -signal.SIGKILL if self.returncode is None else self.returncode
                    return
                if "exit" in message:
                    self.returncode = int(message["exit"])
                    return
        except (OSError, ValueError, TypeError):
            if self.returncode is None:
                self.returncode = -signal.SIGKILL
        finally:
            with self._lock:
                self._ended.set()
                if self._pidfd is not None:
                    with contextlib.suppress(OSError):
                        os.close(self._pidfd)
                    self._pidfd = None

    def poll(self) -> int | None:
        return self.returncode if self._ended.is_set() else None

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def kill(self) -> None:
        with self._lock:  # the reader closes the pidfd when the agent has ended: never a reused number
            if self._pidfd is not None and not self._ended.is_set():
                with contextlib.suppress(OSError):
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)


def inherited_descriptor(value: str | None) -> int | None:
    """An open descriptor the sandbox passed down under the number an environment variable holds (the starter's
    socket, the network watch's device), or None when the variable is unset, not a number or names nothing open."""
    if not value:
        return None
    try:
        fd = int(value)
        os.fstat(fd)
    except (ValueError, OSError):
        return None
    return fd


def starter_from_env(value: str | None) -> int | None:
    """The engine's end of the starter's socket (its number in :data:`STARTER_ENV`), close-on-exec from now on."""
    fd = inherited_descriptor(value)
    if fd is not None:
        os.set_inheritable(fd, False)
    return fd


def start_agent(fd: int, argv: list[str], env: dict[str, str], cwd: str, timeout_s: float = 30) -> StartedAgent:
    """Ask the starter on `fd` to start the agent; raises :class:`StarterError` when it refuses or is gone.

    The launch raises the ``subprocess.Popen`` audit event first: inside the sandbox the audit hook lets exactly one
    granted executable through and stops anything else (a second start is a violation)."""
    sys.audit("subprocess.Popen", argv[0], argv, cwd, env)
    ends = [os.pipe(), os.pipe(), os.pipe()]  # stdin, stdout, stderr: the agent's ends go to the starter
    theirs = (ends[0][0], ends[1][1], ends[2][1])
    ours = (ends[0][1], ends[1][0], ends[2][0])
    try:
        send(fd, {"argv": argv, "env": env, "cwd": cwd}, theirs)
    except OSError as exc:
        for end in (*theirs, *ours):
            os.close(end)
        raise StarterError(f"the agent starter is gone ({exc.strerror})") from None
    for end in theirs:
        os.close(end)
    answer: dict[str, Any] | None = None
    if select.select([fd], [], [], timeout_s)[0]:
        answer, extra = receive(fd)
        for stray in extra:
            os.close(stray)
    if answer is None or not isinstance(answer.get("pid"), int):
        for end in ours:
            os.close(end)
        why = answer.get("error") if answer else "it did not answer"
        raise StarterError(f"the agent starter did not start the agent: {why}")
    return StartedAgent(fd, answer["pid"], os.fdopen(ours[0], "wb"), os.fdopen(ours[1], "rb"), os.fdopen(ours[2], "rb"))
