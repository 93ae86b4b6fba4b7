"""The replay sandbox launcher (DESIGN §6 "Sandbox"): run one engine callable in an isolated child process.

``run_sandboxed("n17q_engine.module:function", payload, allow_degraded=False, limits=Limits(), timeout_s=30)``
spawns ``n17q_engine.sandbox_child`` which reads ``payload`` from stdin, calls ``function(payload) -> bytes``
and writes the bytes to stdout; stderr carries one JSON audit event per line.

Isolation, applied in the forked child before the interpreter starts (``preexec_fn``), a kernel boundary that holds
even if code inside gets past the audit hook:

* its own network namespace: only a loopback interface, left down, so nothing at all is reachable, not even
  127.0.0.1 or abstract unix sockets of the host;
* its own mount namespace and root (:class:`_View`): an empty tmpfs holding read-only binds of the interpreter and
  the engine package, four device nodes, a private /tmp, the working folder and its own /proc. The host's data
  folder, database files, settings, pathname sockets (PostgreSQL's) and other files are not in it;
* its own PID namespace (the child is its pid 1; the launcher's fork waits outside it), so no host process can be
  signalled or seen, and IPC and UTS namespaces;
* an unprivileged uid: nobody (65534) when the launcher is root, else the launcher's own uid inside a user
  namespace (``CLONE_NEWUSER``, the only way an unprivileged process makes the others);
* if any of it cannot be made the launcher raises :class:`IsolationUnavailable` and nothing runs, unless
  ``allow_degraded=True``, in which case the run goes ahead without namespaces and reports
  ``isolation="degraded"`` (the run's label stays ``netns`` for a bounded one: DESIGN's contract);
* resource limits (CPU seconds, address space, open files, processes, file size, no core dumps);
* every capability dropped (bounding set emptied, ``no_new_privs``), so a root child cannot leave the
  namespace again (``setns`` needs CAP_SYS_ADMIN) or raise its limits;
* ``PR_SET_PDEATHSIG=SIGKILL``: the child dies with the launcher; the child leads its own session and the
  whole process group is killed on timeout;
* an exact environment allowlist (:func:`child_environment`), ``close_fds`` (only 0, 1, 2 are inherited)
  and a fresh temporary working folder, removed afterwards.

An agent replay (``n17q_engine.agent``) asks for two more things, both inside the same boundary:
``extra_read_only`` host folders bound read-only at the same path (the agent's folder and its Python environment),
and ``loopback=True``: the namespace's own ``lo`` is brought up (the host's loopback stays unreachable: a network
namespace has its own), so the engine can serve the agent its model endpoint on 127.0.0.1 inside.

With ``network_watch=True`` (agent replays) the namespace's network is also *watched*, by the kernel, in a way the
agent cannot switch off (:class:`_NetWatchSetup`): a TUN device ``n17q0`` is made inside the namespace before the
interpreter starts, while the set-up still holds CAP_NET_ADMIN there, and is the default route for IPv4 and IPv6;
``lo`` loses 127.0.0.1 and ::1 and holds only :data:`NAMESPACE_HOST` (the agent's model endpoint); the view's
``/etc/resolv.conf`` names a nameserver behind the TUN. So every TCP SYN, UDP datagram or DNS query the agent sends
anywhere, the host's loopback addresses included, arrives as a packet on the TUN's descriptor, which only the engine
holds (at the number in ``N17Q_NETWATCH_FD``, close-on-exec once the engine runs: the agent never inherits it).
Nothing is forwarded or answered. The agent holds no capability to change a route, an address or a device, and
``/dev/net/tun`` is not in its view.

With ``agent_starter=True`` (agent replays) the pre-exec step also forks the agent starter
(:class:`_StarterSetup`, :mod:`n17q_engine.agent_starter`): the one process that may start the agent, as the first
process of a PID namespace (with its own /proc) below the engine's, so the agent cannot name the engine; the engine
never unshares a PID namespace itself (it would lose its threads).

Inside, the child installs an audit hook that records and stops socket, DNS, subprocess and out-of-folder
file-write attempts (see :mod:`n17q_engine.sandbox_child`).

This module imports no network client (import-linter contract); it needs ``subprocess`` and ``ctypes`` only.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import fcntl
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

from .agent_starter import FIRST_FD, STARTER_CODE, STARTER_ENV, STARTER_FD
from .sandbox_child import CHILD_CODE, EXIT_VIOLATION, NAMESPACE_HOST, NETWATCH_ENV, entry_allowed

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
CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUTS = 0x04000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x1, 0x2, 0x4, 0x8
_MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 0x20, 0x1000, 0x4000, 0x40000
# The uid and gid a sandbox started by root runs as: nobody's, owning nothing on the host.
SANDBOX_UID = SANDBOX_GID = 65534
WORKDIR_INSIDE = "/.n17q-sandbox-work"  # the working folder inside: a name no bound host path has
_PR_SET_PDEATHSIG = 1
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 0x1
_AF_INET, _SOCK_DGRAM = 2, 2
_PR_CAPBSET_DROP = 24
_TUNSETIFF, _IFF_TUN, _IFF_NO_PI = 0x400454CA, 0x0001, 0x1000
_SIOCSIFADDR, _SIOCSIFNETMASK, _SIOCDIFADDR, _SIOCGIFINDEX, _SIOCADDRT = 0x8916, 0x891C, 0x8936, 0x8933, 0x890B
_AF_INET6, _RTF_UP = 10, 0x0001
WATCH_DEVICE = b"n17q0"
WATCH_LOCAL = "198.18.0.2"  # the namespace's own address on the watch device (RFC 2544's benchmarking block)
WATCH_LOCAL6 = "100::2"  # and its IPv6 one (RFC 6666's discard-only prefix)
WATCH_NAMESERVER = "198.51.100.53"  # /etc/resolv.conf inside: a documentation address, reached only through the TUN
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
        self.mount_fn = lib.mount
        self.mount_fn.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
        self.socket_fn = lib.socket
        self.socketpair_fn = lib.socketpair
        self.socketpair_fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
        self.socket_fn.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        self.ioctl_fn = lib.ioctl
        self.ioctl_fn.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p]
        self.ifreq = ctypes.create_string_buffer(40)  # struct ifreq: name[16], then the flags (a short)
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

    def mount(self, source: bytes | None, target: bytes, fstype: bytes | None, flags: int, data: bytes | None) -> None:
        self._check(self.mount_fn(source, target, fstype, flags, data))

    def loopback_up(self) -> None:
        """Bring this network namespace's own `lo` up (SIOCSIFFLAGS through libc: no Python socket module)."""
        fd = self.socket_fn(_AF_INET, _SOCK_DGRAM, 0)
        if fd < 0:
            self._check(-1)
        try:
            ctypes.memset(self.ifreq, 0, 40)
            self.ifreq.value = b"lo"
            self._check(self.ioctl_fn(fd, _SIOCGIFFLAGS, self.ifreq))
            flags = int.from_bytes(self.ifreq.raw[16:18], sys.byteorder) | _IFF_UP
            ctypes.memmove(ctypes.addressof(self.ifreq) + 16, flags.to_bytes(2, sys.byteorder), 2)
            self._check(self.ioctl_fn(fd, _SIOCSIFFLAGS, self.ifreq))
        finally:
            os.close(fd)

    def ioctl(self, fd: int, request: int, buffer: Any) -> None:
        self._check(self.ioctl_fn(fd, request, buffer))

    def prctl(self, option: int, arg: int) -> None:
        self._check(self.prctl_fn(option, arg, 0, 0, 0))

    def drop_bounding_set(self, *, required: bool) -> None:
        for cap in range(self.cap_last + 1):
            if self.prctl_fn(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 and required:
                self._check(-1)

    def drop_capabilities(self, *, required: bool) -> None:
        self.drop_bounding_set(required=required)
        self.prctl(_PR_SET_NO_NEW_PRIVS, 1)
        self._check(self.capset_fn(self.cap_header, self.cap_data))


class _SockaddrIn(ctypes.Structure):
    _fields_ = [("family", ctypes.c_ushort), ("port", ctypes.c_ushort), ("addr", ctypes.c_ubyte * 4),
                ("zero", ctypes.c_ubyte * 8)]  # fmt: skip


class _Rtentry(ctypes.Structure):  # struct rtentry (linux/route.h): SIOCADDRT for IPv4
    _fields_ = [("pad1", ctypes.c_ulong), ("dst", _SockaddrIn), ("gateway", _SockaddrIn), ("genmask", _SockaddrIn),
                ("flags", ctypes.c_ushort), ("pad2", ctypes.c_short), ("pad3", ctypes.c_ulong),
                ("pad4", ctypes.c_void_p), ("metric", ctypes.c_short), ("dev", ctypes.c_char_p),
                ("mtu", ctypes.c_ulong), ("window", ctypes.c_ulong), ("irtt", ctypes.c_ushort)]  # fmt: skip


class _In6Ifreq(ctypes.Structure):  # struct in6_ifreq: SIOCSIFADDR / SIOCDIFADDR for IPv6
    _fields_ = [("addr", ctypes.c_ubyte * 16), ("prefixlen", ctypes.c_uint32), ("ifindex", ctypes.c_int)]


class _In6Rtmsg(ctypes.Structure):  # struct in6_rtmsg (linux/ipv6_route.h): SIOCADDRT for IPv6
    _fields_ = [("dst", ctypes.c_ubyte * 16), ("src", ctypes.c_ubyte * 16), ("gateway", ctypes.c_ubyte * 16),
                ("type", ctypes.c_uint32), ("dst_len", ctypes.c_uint16), ("src_len", ctypes.c_uint16),
                ("metric", ctypes.c_uint32), ("info", ctypes.c_ulong), ("flags", ctypes.c_uint32),
                ("ifindex", ctypes.c_int)]  # fmt: skip


def _ifreq(name: bytes, tail: bytes = b"") -> Any:
    """A struct ifreq (40 bytes): the interface name, then the union (an address, flags or an index)."""
    buffer = ctypes.create_string_buffer(40)
    ctypes.memmove(buffer, name, len(name))
    ctypes.memmove(ctypes.addressof(buffer) + 16, tail, len(tail))
    return buffer


def _sockaddr_in(address: str) -> bytes:
    return _AF_INET.to_bytes(2, sys.byteorder) + b"\0\0" + bytes(int(p) for p in address.split(".")) + b"\0" * 8


def _ipv6(address: str) -> bytes:
    import ipaddress

    return ipaddress.IPv6Address(address).packed


class _NetWatchSetup:
    """Everything the pre-exec step needs to make the network watch (see the module docstring), built in the
    launcher: after fork only open(2), ioctl(2), dup2(2) and write(2) run, on these prepared buffers."""

    def __init__(self, fd_slot: int) -> None:
        self.fd_slot = fd_slot  # the descriptor number the TUN is moved to (kept across exec: pass_fds)
        self.tunsetiff = _ifreq(WATCH_DEVICE, (_IFF_TUN | _IFF_NO_PI).to_bytes(2, sys.byteorder))
        self.lo_addr = _ifreq(b"lo", _sockaddr_in(NAMESPACE_HOST))
        self.lo_mask = _ifreq(b"lo", _sockaddr_in("255.255.255.255"))
        self.tun_addr = _ifreq(WATCH_DEVICE, _sockaddr_in(WATCH_LOCAL))
        self.tun_mask = _ifreq(WATCH_DEVICE, _sockaddr_in("255.255.255.255"))
        self.tun_flags = _ifreq(WATCH_DEVICE)
        self.tun_index = _ifreq(WATCH_DEVICE)
        self.lo_index = _ifreq(b"lo")
        self.route = _Rtentry()
        self.route.dst.family = self.route.genmask.family = _AF_INET  # 0.0.0.0/0
        self.route.flags = _RTF_UP
        self.device_name = ctypes.create_string_buffer(WATCH_DEVICE)
        self.route.dev = ctypes.cast(self.device_name, ctypes.c_char_p)
        self.lo6 = _In6Ifreq()
        self.lo6.addr[:] = list(_ipv6("::1"))
        self.lo6.prefixlen = 128
        self.tun6 = _In6Ifreq()
        self.tun6.addr[:] = list(_ipv6(WATCH_LOCAL6))
        self.tun6.prefixlen = 128
        self.route6 = _In6Rtmsg()  # ::/0
        self.route6.flags = _RTF_UP
        self.route6.metric = 1
        self.resolv = f"nameserver {WATCH_NAMESERVER}\noptions timeout:1 attempts:1\n".encode()

    def open_device(self, libc: _Libc) -> None:
        """In the namespace's first process, before the view hides /dev: the TUN, moved to `fd_slot`."""
        fd = os.open(b"/dev/net/tun", os.O_RDWR)
        try:
            libc.ioctl(fd, _TUNSETIFF, self.tunsetiff)
            if fd != self.fd_slot:
                os.dup2(fd, self.fd_slot)  # dup2 leaves the copy inheritable: it survives the interpreter's exec
        finally:
            if fd != self.fd_slot:
                os.close(fd)

    def configure(self, libc: _Libc) -> None:
        """Addresses and routes (after `loopback_up`, with CAP_NET_ADMIN in the namespace still held)."""
        fd = libc.socket_fn(_AF_INET, _SOCK_DGRAM, 0)
        if fd < 0:
            libc._check(-1)
        try:
            libc.ioctl(fd, _SIOCSIFADDR, self.lo_addr)  # replaces 127.0.0.1: the loopback addresses leave by the TUN
            libc.ioctl(fd, _SIOCSIFNETMASK, self.lo_mask)
            libc.ioctl(fd, _SIOCSIFADDR, self.tun_addr)
            libc.ioctl(fd, _SIOCSIFNETMASK, self.tun_mask)
            flags = self.tun_flags
            libc.ioctl(fd, _SIOCGIFFLAGS, flags)
            up = int.from_bytes(flags.raw[16:18], sys.byteorder) | _IFF_UP
            ctypes.memmove(ctypes.addressof(flags) + 16, up.to_bytes(2, sys.byteorder), 2)
            libc.ioctl(fd, _SIOCSIFFLAGS, flags)
            libc.ioctl(fd, _SIOCADDRT, ctypes.addressof(self.route))
            libc.ioctl(fd, _SIOCGIFINDEX, self.tun_index)
            libc.ioctl(fd, _SIOCGIFINDEX, self.lo_index)
        finally:
            os.close(fd)
        fd6 = libc.socket_fn(_AF_INET6, _SOCK_DGRAM, 0)
        if fd6 < 0:  # no IPv6 in this kernel: nothing to route
            return
        try:
            self.lo6.ifindex = int.from_bytes(self.lo_index.raw[16:20], sys.byteorder, signed=True)
            self.tun6.ifindex = self.route6.ifindex = int.from_bytes(
                self.tun_index.raw[16:20], sys.byteorder, signed=True
            )
            libc.ioctl(fd6, _SIOCDIFADDR, ctypes.addressof(self.lo6))  # ::1 leaves by the TUN too
            libc.ioctl(fd6, _SIOCSIFADDR, ctypes.addressof(self.tun6))
            libc.ioctl(fd6, _SIOCADDRT, ctypes.addressof(self.route6))
        finally:
            os.close(fd6)


_AF_UNIX, _SOCK_SEQPACKET = 1, 5


class _StarterSetup:
    """The agent starter (:mod:`n17q_engine.agent_starter`), prepared in the launcher: after fork only socketpair(2),
    fork(2), unshare(2), mount(2), dup2(2), close_range(2), the privilege drop and execve(2) run, on these values.

    Forked from the engine's first process in the pre-exec step, inside the view and while the capabilities are still
    held: the starter unshares ``CLONE_NEWPID`` and ``CLONE_NEWNS`` (so the engine never does, and keeps its threads)
    and forks the new namespace's first process, which mounts the namespace's own /proc over the engine's. Each keeps
    one socket (the starter: the engine's at :data:`STARTER_FD` and its own to the first process at :data:`FIRST_FD`;
    the first process: its end at :data:`FIRST_FD`), /dev/null for stdin and stdout and the event channel as stderr,
    closes every other descriptor (the launcher's, the engine's pipes), drops its privileges as the engine does and
    execs a fresh interpreter. The engine's end lands on `fd_slot` (kept across exec: pass_fds), named by
    ``N17Q_AGENT_STARTER_FD``."""

    def __init__(self, fd_slot: int) -> None:
        self.fd_slot = fd_slot
        self.pair = (ctypes.c_int * 2)()
        self.inner = (ctypes.c_int * 2)()
        python = os.path.realpath(sys.executable)
        self.argv_first = [python, "-P", "-S", "-c", STARTER_CODE, "first"]
        self.argv_starter = [python, "-P", "-S", "-c", STARTER_CODE, "starter"]
        self.env = {k: v for k, v in child_environment().items() if k != "N17Q_SANDBOX_ISOLATION"}

    @staticmethod
    def _keep(fds: tuple[tuple[int, int], ...]) -> None:
        """/dev/null on 0 and 1, `fds` moved (source, target), every other descriptor above 2 closed."""
        null = os.open(b"/dev/null", os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        top = max(target for _s, target in fds)
        # copies above every target first, so no move overwrites a source still to be moved
        moved = [fcntl.fcntl(source, fcntl.F_DUPFD_CLOEXEC, top + 1) for source, _target in fds]
        for copy, (_source, target) in zip(moved, fds, strict=True):
            os.dup2(copy, target)  # inheritable: kept across the exec
        os.closerange(top + 1, 1 << 20)
        for number in range(3, top):
            if number not in {target for _s, target in fds}:
                with contextlib.suppress(OSError):
                    os.close(number)

    def spawn(self, libc: _Libc, drop: Callable[[], None]) -> None:
        """In the engine's first process: fork the starter; `drop` is the engine's own privilege drop."""
        libc._check(libc.socketpair_fn(_AF_UNIX, _SOCK_SEQPACKET, 0, self.pair))
        ours, theirs = self.pair[0], self.pair[1]
        engine = os.getpid()
        if os.fork() == 0:
            try:
                libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != engine:
                    os._exit(_EXIT_SETUP_FAILED)
                libc.unshare(CLONE_NEWPID | CLONE_NEWNS)  # for its children: the agent's namespace, its own /proc
                libc._check(libc.socketpair_fn(_AF_UNIX, _SOCK_SEQPACKET, 0, self.inner))
                starter = os.getpid()
                first = os.fork()
                if first == 0:  # pid 1 of the agent's namespace
                    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                    libc.mount(b"proc", b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
                    self._keep(((self.inner[1], FIRST_FD),))
                    drop()
                    os.execve(self.argv_first[0], self.argv_first, self.env)
                    os._exit(_EXIT_SETUP_FAILED)
                self._keep(((theirs, STARTER_FD), (self.inner[0], FIRST_FD)))
                drop()
                if os.getppid() != engine or os.getpid() != starter:
                    os._exit(_EXIT_SETUP_FAILED)
                os.execve(self.argv_starter[0], [*self.argv_starter, str(first)], self.env)
            except BaseException:
                pass
            os._exit(_EXIT_SETUP_FAILED)
        os.close(theirs)
        if ours != self.fd_slot:
            os.dup2(ours, self.fd_slot)  # inheritable: it survives the interpreter's exec
            os.close(ours)


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


@dataclass(frozen=True)
class _View:
    """What the sandbox sees of the host, worked out in the launcher (nothing is looked up after fork): read-only
    binds of the interpreter (its prefix, and /usr for the libraries it links), the engine package (and the tests'
    probes when test entries are allowed), the merged-/usr links, four device nodes; the rest of the new root is
    an empty tmpfs with a private writable /tmp, the working folder and the PID namespace's own /proc. No data
    folder, database, settings, sockets or processes of the host are in it."""

    new_root: bytes  # the (empty) folder the tmpfs root is mounted on
    read_only: tuple[bytes, ...]  # host paths bound read-only at the same path inside
    links: tuple[tuple[bytes, bytes], ...]  # (path, target) symlinks made inside (/lib -> usr/lib)
    owner: tuple[int, int] | None = None  # (uid, gid) the working folder is given to, when root starts it
    devices: tuple[bytes, ...] = (b"/dev/null", b"/dev/zero", b"/dev/urandom", b"/dev/random")
    resolv: bytes = b""  # /etc/resolv.conf inside (the network watch's nameserver), or none


def symlink_chain(path: str) -> tuple[list[tuple[str, str]], str]:
    """Every symlink met while resolving the absolute `path` component by component, as (link, its target), and the
    real path it ends at. Inside the sandbox only real paths are bound: these links are made there too, so a path
    through them (a venv's `bin/python -> python3 -> /opt/python/bin/python3.11`, a linked venv folder) resolves
    inside as it does outside (issue 36)."""
    links: list[tuple[str, str]] = []
    parts = [p for p in path.split("/") if p]
    current = "/"
    hops = 0
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        if os.path.islink(candidate):
            hops += 1
            if hops > 40:
                raise OSError(f"too many levels of symbolic links resolving {path}")
            target = os.readlink(candidate)
            links.append((candidate, target))
            if target.startswith("/"):
                current = "/"
            parts[:0] = [p for p in target.split("/") if p]
        else:
            current = candidate
    return links, current


def _view(
    new_root: str,
    *,
    allow_test_entries: bool,
    extra_read_only: tuple[str, ...] = (),
    extra_links: tuple[str, ...] = (),
) -> _View:
    interpreter = os.path.realpath(sys.executable)
    prefix = os.path.realpath(sys.base_prefix)
    paths = {"/usr", prefix, str(REPO_ROOT / "n17q_engine")}
    if not interpreter.startswith(prefix + os.sep):
        paths.add(os.path.dirname(interpreter))
    if allow_test_entries:
        paths.add(str(REPO_ROOT / "tests"))
    paths.update(os.path.realpath(p) for p in extra_read_only)
    links = []
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            links.append((top.encode(), os.readlink(top).encode()))
        elif os.path.isdir(top):
            paths.add(top)
    for path in extra_links:  # the links on the way to a program the sandbox starts by a path through them
        for link, target in symlink_chain(path)[0]:
            if (link.encode(), target.encode()) not in links:
                links.append((link.encode(), target.encode()))
    return _View(
        new_root=new_root.encode(),
        read_only=tuple(sorted(p.encode() for p in paths if os.path.isdir(p))),
        links=tuple(links),
        owner=(SANDBOX_UID, SANDBOX_GID) if os.geteuid() == 0 else None,
    )


def _enter_view(libc: _Libc, view: _View) -> None:
    """In the forked child, inside its new mount namespace: build the new root and move into it."""
    root = view.new_root
    libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None)  # nothing of this namespace propagates back
    libc.mount(b"tmpfs", root, b"tmpfs", _MS_NOSUID | _MS_NODEV, b"size=67108864,mode=0755")
    for path in view.read_only:
        inside = root + path
        os.makedirs(inside, exist_ok=True)
        libc.mount(path, inside, None, _MS_BIND | _MS_REC, None)
        libc.mount(None, inside, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV, None)
    for path, target in view.links:
        if not os.path.lexists(root + path):  # one inside a bound folder is there already, as the host has it
            os.makedirs(os.path.dirname(root + path), exist_ok=True)
            os.symlink(target, root + path)
    os.makedirs(root + b"/dev", exist_ok=True)
    for device in view.devices:
        if os.path.exists(device):
            os.close(os.open(root + device, os.O_CREAT | os.O_WRONLY, 0o666))
            libc.mount(device, root + device, None, _MS_BIND, None)
    if view.resolv:
        os.makedirs(root + b"/etc", exist_ok=True)
        fd = os.open(root + b"/etc/resolv.conf", os.O_CREAT | os.O_WRONLY, 0o644)
        try:
            os.write(fd, view.resolv)
        finally:
            os.close(fd)
    for folder, mode in ((b"/tmp", 0o1777), (WORKDIR_INSIDE.encode(), 0o700)):
        os.makedirs(root + folder, exist_ok=True)
        os.chmod(root + folder, mode)
    if view.owner is not None:  # root's sandbox runs as nobody: the working folder is nobody's
        os.chown(root + WORKDIR_INSIDE.encode(), *view.owner)
    # This PID namespace's own /proc: its processes only (this one and what it starts), its network's devices.
    os.makedirs(root + b"/proc", exist_ok=True)
    libc.mount(b"proc", root + b"/proc", b"proc", _MS_NOSUID | _MS_NODEV | _MS_NOEXEC, None)
    os.chroot(root)
    os.chdir(WORKDIR_INSIDE)


def _as_pid_one() -> None:
    """Continue as the first process of the new PID namespace: fork; the parent, outside it, only waits and
    passes the exit status on (it keeps no file open, so the launcher sees the child's pipes close with it)."""
    child = os.fork()
    if child == 0:
        return
    os.closerange(0, 65536)
    while True:
        try:
            _pid, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _make_preexec(
    *,
    isolate: bool,
    limits: Limits,
    unshare: Callable[[int], None] | None,
    parent_pid: int,
    view: _View | None = None,
    loopback: bool = False,
    watch: _NetWatchSetup | None = None,
    starter: _StarterSetup | None = None,
) -> Callable[[], None]:
    libc = _get_libc()
    root = os.geteuid() == 0
    uid, gid = os.getuid(), os.getgid()
    flags = CLONE_NEWNET if root else CLONE_NEWUSER | CLONE_NEWNET
    if view is not None:
        flags |= CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS
    do_unshare = unshare if unshare is not None else libc.unshare
    rlimits = _rlimits(limits)

    def drop() -> None:  # the limits and the privilege drop, the engine's and the agent starter's alike
        for which, value in rlimits:
            _soft, hard = resource.getrlimit(which)
            if hard != resource.RLIM_INFINITY and value > hard and not root:
                value = hard
            resource.setrlimit(which, (value, value))
        if view is not None and root:  # root leaves its bounding set empty, then becomes nobody
            libc.drop_bounding_set(required=True)
            os.setgroups([])
            os.setgid(SANDBOX_GID)
            os.setuid(SANDBOX_UID)
        libc.drop_capabilities(required=root and view is None)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid, which clears it

    def preexec() -> None:  # runs in the forked child, before exec; keep it to plain system calls
        if isolate:
            try:
                do_unshare(flags)
            except BaseException:
                os._exit(_EXIT_NO_NAMESPACE)
        try:
            if view is not None:
                if not root:  # the same unprivileged ids inside the user namespace, so the mounts can be made
                    _write(b"/proc/self/setgroups", b"deny")
                    _write(b"/proc/self/uid_map", b"%d %d 1" % (uid, uid))
                    _write(b"/proc/self/gid_map", b"%d %d 1" % (gid, gid))
                libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != parent_pid:
                    os._exit(_EXIT_SETUP_FAILED)
                _as_pid_one()
                try:
                    if watch is not None:  # the TUN is made while /dev is still the host's
                        watch.open_device(libc)
                    _enter_view(libc, view)
                    if loopback:  # the namespace's own lo, while the capabilities that allow it are still held
                        libc.loopback_up()
                    if watch is not None:
                        watch.configure(libc)
                except BaseException:  # no boundary could be made: as good as no namespace (refused, or degraded)
                    os._exit(_EXIT_NO_NAMESPACE)
            if starter is not None:  # the agent's starter: forked now, with the view entered and capabilities held
                starter.spawn(libc, drop)
            drop()
            if view is None and os.getppid() != parent_pid:  # the launcher died before the death signal was armed
                os._exit(_EXIT_SETUP_FAILED)
        except BaseException:
            os._exit(_EXIT_SETUP_FAILED)

    return preexec


def _write(path: bytes, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


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
    extra_read_only: tuple[str, ...] = (),
    extra_links: tuple[str, ...] = (),
    loopback: bool = False,
    relay: Callable[[bytes], bytes] | None = None,
    network_watch: bool = False,
    agent_starter: bool = False,
) -> tuple[int, bytes, bytes, float, int, bool]:
    workdir = tempfile.mkdtemp(prefix="n17q-sandbox-")
    view = (
        _view(workdir, allow_test_entries=allow_test_entries, extra_read_only=extra_read_only, extra_links=extra_links)
        if isolate
        else None
    )
    # The network watch's descriptor number: a slot held open here until the child has started, so the number
    # is free in the child (pass_fds keeps it across exec) and the TUN made in the child lands on it.
    slot = os.open(os.devnull, os.O_RDONLY) if network_watch and view is not None else None
    watch = _NetWatchSetup(slot) if slot is not None else None
    if watch is not None and view is not None:
        view = dataclasses.replace(view, resolv=watch.resolv)
    # The agent starter's socket: the engine's end lands on a slot reserved the same way.
    starter_slot = os.open(os.devnull, os.O_RDONLY) if agent_starter and view is not None else None
    starter = _StarterSetup(starter_slot) if starter_slot is not None else None
    # Inside the new root the interpreter is found at its real path (the venv's link is not in the view).
    argv = [os.path.realpath(sys.executable) if view else sys.executable, "-P", "-S", "-c", CHILD_CODE, entry]
    if allow_test_entries:
        argv.append("--allow-test-entries")
    preexec = _make_preexec(
        isolate=isolate,
        limits=limits,
        unshare=unshare,
        parent_pid=os.getpid(),
        view=view,
        loopback=loopback or watch is not None,
        watch=watch,
        starter=starter,
    )
    timed_out = False
    env = child_environment("netns" if isolate else "degraded")
    if slot is not None:
        env[NETWATCH_ENV] = str(slot)
    if starter_slot is not None:
        env[STARTER_ENV] = str(starter_slot)
    channel = _RelayChannel(relay, env) if relay is not None else None
    try:
        spawn_ns = time.monotonic_ns()
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=workdir,
            env=env,
            close_fds=True,
            pass_fds=(
                *(channel.child_fds if channel else ()),
                *(fd for fd in (slot, starter_slot) if fd is not None),
            ),
            start_new_session=True,
            preexec_fn=preexec,
        )
        if channel is not None:
            channel.start()
        for reserved in (slot, starter_slot):
            if reserved is not None:
                os.close(reserved)
        slot = starter_slot = None
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
        for reserved in (slot, starter_slot):  # the child never started
            if reserved is not None:
                os.close(reserved)
        if channel is not None:
            channel.close()
        shutil.rmtree(workdir, ignore_errors=True)


RELAY_ENV = "N17Q_RELAY_FDS"
RELAY_LINE = 16 << 20


def relay_answer(relay: Callable[[bytes], bytes], line: bytes) -> bytes:
    """The answer to one line the child sent out. A line carrying a replay-namespaced idempotency key or namespace is
    refused here, before the relay (a live connection) sees it: the launcher's own defence, apart from the relay's
    (seed 001, docs/live-boundary.md)."""
    from .live_boundary import ReplayKeyRefused, refuse_replay_keys  # the launcher's side only, when a relay runs

    try:
        request = json.loads(line)
    except ValueError:
        request = None  # not JSON: the relay says so
    try:
        refuse_replay_keys(request, connection="the sandbox's relay channel")
    except ReplayKeyRefused as exc:
        return json.dumps({"error": str(exc)[:500]}).encode()
    try:
        return relay(line)
    except Exception as exc:  # the relay's failure is an answer, never the launcher's crash
        return json.dumps({"error": f"{type(exc).__name__}: {exc}"[:500]}).encode()


class _RelayChannel:
    """An extra pipe pair out of the sandbox (issue 18's live model relay): the child writes one JSON request a
    line on one fd and reads one JSON answer a line on the other (their numbers in ``N17Q_RELAY_FDS``, "read,write"
    as the child sees them); ``relay`` answers each, in a thread of the launcher, which alone holds what it needs
    (a credential, say). Nothing but these lines crosses; the child cannot open anything through them."""

    def __init__(self, relay: Callable[[bytes], bytes], env: dict[str, str]) -> None:
        self.relay = relay
        self.req_r, self.req_w = os.pipe()
        self.resp_r, self.resp_w = os.pipe()
        self.child_fds: tuple[int, ...] = (self.resp_r, self.req_w)
        env[RELAY_ENV] = f"{self.resp_r},{self.req_w}"
        self.thread = threading.Thread(target=self._serve, name="n17q-sandbox-relay", daemon=True)

    def start(self) -> None:
        for fd in self.child_fds:
            os.close(fd)
        self.child_fds = ()
        self.thread.start()

    def _serve(self) -> None:
        buffer = b""
        with contextlib.suppress(OSError):
            while True:
                chunk = os.read(self.req_r, 65536)
                if not chunk:
                    return
                buffer += chunk
                if len(buffer) > RELAY_LINE:
                    return
                while b"\n" in buffer:
                    line, _, buffer = buffer.partition(b"\n")
                    answer = relay_answer(self.relay, line)
                    data = answer.replace(b"\n", b" ") + b"\n"
                    while data:
                        data = data[os.write(self.resp_w, data) :]

    def close(self) -> None:
        for fd in self.child_fds:  # only when the child was never started
            with contextlib.suppress(OSError):
                os.close(fd)
        self.child_fds = ()
        if self.thread.ident is not None:
            self.thread.join(timeout=5)  # the child is gone: its end closed, the read sees the end
        for fd in (self.req_r, self.resp_w):
            with contextlib.suppress(OSError):
                os.close(fd)


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
    extra_read_only: tuple[str, ...] = (),
    extra_links: tuple[str, ...] = (),
    loopback: bool = False,
    relay: Callable[[bytes], bytes] | None = None,
    network_watch: bool = False,
    agent_starter: bool = False,
    _unshare: Callable[[int], None] | None = None,
) -> SandboxResult:
    """Run ``entry`` ("n17q_engine.module:function") on ``payload`` in a sandboxed child process.

    ``allow_test_entries`` lets entries under ``tests.`` run (the test suite's probes only).
    ``on_event`` receives every JSON event line of the child's stderr as it is written (the replay's
    ``replay.progress`` lines, say), in the calling thread, while the child runs.
    ``extra_read_only`` host folders are bound read-only at their real path inside; ``extra_links`` are paths whose
    symlinks (every one met resolving them: :func:`symlink_chain`) are made inside too; ``loopback`` brings the
    namespace's own ``lo`` up (both for an agent replay, ``n17q_engine.agent``; neither makes degraded isolation
    any wider: without namespaces there is no view and no ``lo`` of its own, so agent replays refuse it).
    ``relay`` answers the child's lines on an extra pipe pair (``_RelayChannel``: an agent replay's live model
    calls, relayed by the launcher that alone holds the credential).
    ``network_watch`` routes every address through a TUN whose descriptor only the engine holds (see the module
    docstring; it implies ``loopback``, with :data:`NAMESPACE_HOST` as the namespace's own address, and is never
    made without namespaces: a degraded run has no watch, and ``N17Q_NETWATCH_FD`` is then not set).
    ``agent_starter`` forks the agent starter (:mod:`n17q_engine.agent_starter`) in the pre-exec step: the one
    process that may start an agent, in a PID namespace below the engine's; the engine finds its end of the starter's
    socket in ``N17Q_AGENT_STARTER_FD`` (never made without namespaces: a degraded run has no starter).
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
        "extra_read_only": tuple(extra_read_only),
        "extra_links": tuple(extra_links),
        "loopback": loopback,
        "relay": relay,
        "network_watch": network_watch,
        "agent_starter": agent_starter,
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
