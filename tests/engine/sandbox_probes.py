"""Probes for the sandbox tests and the CI egress check: NOT engine code, never shipped as a replay entry.

Each probe is an entry ``tests.engine.sandbox_probes:<name>`` with the sandbox entry signature
``(payload: bytes) -> bytes``; the payload is JSON. They live under ``tests/`` because they need ``socket``,
which the import-linter contract forbids in ``n17q_engine``. ``run_sandboxed`` only accepts them with
``allow_test_entries=True``. Every probe is also called in-process (without the sandbox) by the tests as
the positive control: the same code must reach the canary there.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import socket
import subprocess
import time


def _args(payload: bytes) -> dict:
    return json.loads(payload or b"{}")


def _outcome(fn) -> bytes:
    try:
        fn()
    except OSError as exc:
        return f"denied:{type(exc).__name__}:{exc.errno}".encode()
    return b"connected"


def _made(family: int, kind: int, wrap: bool) -> socket.socket:
    """A socket object: built by `socket.socket` (the sandbox stops that as a client being built), or, with `wrap`, a
    descriptor libc made wrapped in one (past the construction check, so the connect itself meets the hook)."""
    if not wrap:
        return socket.socket(family, kind)
    fd = ctypes.CDLL(None, use_errno=True).socket(family, kind, 0)
    if fd < 0:
        raise OSError(ctypes.get_errno(), "socket")
    return socket.socket(family, kind, 0, fd)


def tcp_connect(payload: bytes) -> bytes:
    """TCP connect to {"host", "port"} (IPv4 or IPv6), send one byte; {"wrap": true}: on a libc-made descriptor."""
    a = _args(payload)
    family = socket.AF_INET6 if ":" in a["host"] else socket.AF_INET

    def go() -> None:
        with _made(family, socket.SOCK_STREAM, bool(a.get("wrap"))) as s:
            s.settimeout(2)
            s.connect((a["host"], a["port"]))
            with contextlib.suppress(OSError):  # the canary may already have closed: connecting is the point
                s.sendall(b"x")

    return _outcome(go)


def udp_send(payload: bytes) -> bytes:
    """One UDP datagram to {"host", "port"}; {"wrap": true}: on a libc-made descriptor."""
    a = _args(payload)

    def go() -> None:
        with _made(socket.AF_INET, socket.SOCK_DGRAM, bool(a.get("wrap"))) as s:
            s.sendto(b"probe", (a["host"], a["port"]))

    return _outcome(go)


def dns_lookup(payload: bytes) -> bytes:
    """getaddrinfo({"name"}): "localhost" resolves from /etc/hosts outside the sandbox."""
    a = _args(payload)
    try:
        infos = socket.getaddrinfo(a["name"], 80)
    except OSError as exc:
        return f"denied:{type(exc).__name__}".encode()
    return ("resolved:" + ",".join(sorted({str(i[4][0]) for i in infos}))).encode()


def unix_abstract_connect(payload: bytes) -> bytes:
    """Connect to the abstract unix socket {"name"} (abstract sockets belong to the network namespace)."""
    a = _args(payload)

    def go() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect("\0" + a["name"])
            with contextlib.suppress(OSError):  # the canary may already have closed: connecting is the point
                s.sendall(b"x")

    return _outcome(go)


def raw_libc_connect(payload: bytes) -> bytes:
    """TCP connect through libc directly, bypassing the audit hook: only the namespace can stop this."""
    a = _args(payload)
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    if fd < 0:
        return f"denied:socket:{ctypes.get_errno()}".encode()
    addr = (ctypes.c_ubyte * 16)()
    addr[0:2] = list(socket.AF_INET.to_bytes(2, "little"))
    addr[2:4] = list(a["port"].to_bytes(2, "big"))
    addr[4:8] = list(socket.inet_aton(a["host"]))
    rc = libc.connect(fd, addr, 16)
    err = ctypes.get_errno()
    if rc == 0:
        libc.write(fd, b"x", 1)
    libc.close(fd)
    return b"connected" if rc == 0 else f"denied:connect:{err}".encode()


def build_socket(payload: bytes) -> bytes:
    """Build an internet socket and do nothing with it: no connect, no send."""
    family = socket.AF_INET6 if _args(payload).get("family") == "AF_INET6" else socket.AF_INET
    socket.socket(family, socket.SOCK_STREAM).close()
    return b"built"


def build_http_client(payload: bytes) -> bytes:
    """Build a standard-library HTTP client ({"client": "http.client" | "urllib.request"}) and send nothing."""
    if _args(payload).get("client") == "urllib.request":
        import urllib.request

        urllib.request.build_opener()
    else:
        import http.client

        http.client.HTTPSConnection("api.example.com")
    return b"built"


def local_plumbing(payload: bytes) -> bytes:
    """What the engine's own machinery builds: a unix socket pair and an asyncio loop (its self-pipe)."""
    import asyncio

    a, b = socket.socketpair()
    a.close()
    b.close()
    asyncio.new_event_loop().close()
    return b"ok"


def interfaces(payload: bytes) -> bytes:
    """The interfaces of this process's network namespace (/proc/self/net/dev; /sys is the host's view)."""
    with open("/proc/self/net/dev") as f:
        names = [line.split(":", 1)[0].strip() for line in f.readlines()[2:]]
    return json.dumps(sorted(names)).encode()


def spawn_process(payload: bytes) -> bytes:
    subprocess.run(["/bin/true"], check=False)
    return b"spawned"


def swallow_violation(payload: bytes) -> bytes:
    """Try a connect, catch everything, carry on: the run must still count as stopped."""
    with contextlib.suppress(BaseException):  # deliberately swallowing the sandbox's stop
        socket.create_connection(("127.0.0.1", 9), timeout=1)
    return b"carried on"


def environment(payload: bytes) -> bytes:
    return json.dumps(dict(os.environ), sort_keys=True).encode()


def open_fds(payload: bytes) -> bytes:
    return json.dumps(sorted(int(fd) for fd in os.listdir("/proc/self/fd"))).encode()


def identity(payload: bytes) -> bytes:
    """cwd, capabilities, and limits seen from inside."""
    import resource

    status = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in {"CapEff", "CapPrm", "CapBnd", "NoNewPrivs", "Uid"}:
                status[key] = value.strip()
    limits = {
        name: resource.getrlimit(getattr(resource, name))[0]
        for name in ("RLIMIT_CPU", "RLIMIT_AS", "RLIMIT_NOFILE", "RLIMIT_NPROC", "RLIMIT_FSIZE")
    }
    return json.dumps({"cwd": os.getcwd(), "pid": os.getpid(), "status": status, "limits": limits}).encode()


def write_file(payload: bytes) -> bytes:
    """Write {"path"} (the marker file of the 'nothing ran' test)."""
    a = _args(payload)
    with open(a["path"], "w") as f:
        f.write("ran")
    return b"written"


def write_in_cwd(payload: bytes) -> bytes:
    with open("scratch.txt", "w") as f:
        f.write("ok")
    with open("scratch.txt") as f:
        return f.read().encode()


def list_cwd(payload: bytes) -> bytes:
    return json.dumps(sorted(os.listdir("."))).encode()


def allocate(payload: bytes) -> bytes:
    a = _args(payload)
    try:
        block = bytearray(a["bytes"])
    except MemoryError:
        return b"MemoryError"
    return f"allocated:{len(block)}".encode()


def sleep(payload: bytes) -> bytes:
    time.sleep(_args(payload).get("seconds", 60))
    return b"woke"


def chatty(payload: bytes) -> bytes:
    print("a stray print from the entry")
    return b"the output"


def echo(payload: bytes) -> bytes:
    return payload


def fail(payload: bytes) -> bytes:
    raise ValueError("probe failure")


# --- the host boundary, with the audit hook bypassed (assume a breach: only the kernel can stop these) ----------


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def raw_read_file(payload: bytes) -> bytes:
    """Read {"path"} through libc's open/read."""
    libc = _libc()
    fd = libc.open(_args(payload)["path"].encode(), os.O_RDONLY)
    if fd < 0:
        return f"denied:open:{ctypes.get_errno()}".encode()
    buf = ctypes.create_string_buffer(64)
    n = libc.read(fd, buf, 64)
    libc.close(fd)
    return b"read:" + buf.raw[: max(n, 0)]


def raw_write_file(payload: bytes) -> bytes:
    """Create {"path"} through libc's open, write a byte."""
    libc = _libc()
    fd = libc.open(_args(payload)["path"].encode(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    if fd < 0:
        return f"denied:open:{ctypes.get_errno()}".encode()
    libc.write(fd, b"x", 1)
    libc.close(fd)
    return b"written"


def raw_rename(payload: bytes) -> bytes:
    """Rename {"path"} to {"to"} through libc."""
    a = _args(payload)
    rc = _libc().rename(a["path"].encode(), a["to"].encode())
    return b"renamed" if rc == 0 else f"denied:rename:{ctypes.get_errno()}".encode()


def raw_unix_connect(payload: bytes) -> bytes:
    """Connect to the pathname unix socket {"path"} (PostgreSQL's, say) through libc."""
    libc = _libc()
    fd = libc.socket(socket.AF_UNIX, socket.SOCK_STREAM, 0)
    if fd < 0:
        return f"denied:socket:{ctypes.get_errno()}".encode()
    path = _args(payload)["path"].encode()
    addr = (ctypes.c_ubyte * 110)()
    addr[0:2] = list(socket.AF_UNIX.to_bytes(2, "little"))
    addr[2 : 2 + len(path)] = list(path)
    rc = libc.connect(fd, addr, 2 + len(path) + 1)
    err = ctypes.get_errno()
    libc.close(fd)
    return b"connected" if rc == 0 else f"denied:connect:{err}".encode()


def raw_signal(payload: bytes) -> bytes:
    """Signal 0 to {"pid"} through libc: whether this process could signal it at all."""
    rc = _libc().kill(int(_args(payload)["pid"]), 0)
    return b"signalled" if rc == 0 else f"denied:kill:{ctypes.get_errno()}".encode()


def whoami(payload: bytes) -> bytes:
    return json.dumps({"uid": os.getuid(), "gid": os.getgid(), "pid": os.getpid()}).encode()


def netwatch_connect(payload: bytes) -> bytes:
    """Under `network_watch=True`: a raw libc connect (past the audit hook) to {"host", "port"} left unanswered, then
    what the engine's watch read from the TUN (the JSON list of attempts)."""
    from n17q_engine.agent.netwatch import NetWatch

    a = _args(payload)
    watch = NetWatch.from_env(os.environ.get("N17Q_NETWATCH_FD"))
    if watch is None:
        return b"no watch"
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_NONBLOCK, 0)
    addr = socket.inet_aton(a["host"])
    sockaddr = (ctypes.c_ubyte * 16)(*(socket.AF_INET.to_bytes(2, "little") + a["port"].to_bytes(2, "big") + addr))
    libc.connect(fd, sockaddr, 16)
    deadline = time.monotonic() + 10
    found: list = []
    while not found and time.monotonic() < deadline:
        found = watch.drain()
        time.sleep(0.01)
    os.close(fd)
    return json.dumps(found).encode()


_STARTED = "import os, sys; print(f'pid={os.getpid()} ppid={os.getppid()}', flush=True); sys.exit(7)"


def agent_starter_twice(payload: bytes) -> bytes:
    """Start one program through the agent starter (granted, as the agent decider does), then send the starter a
    second start request directly (no audit event: the starter itself must refuse it). With {"through_hook": true}
    the second start goes through `start_agent` again, which the audit hook stops."""
    import sys

    from n17q_engine import agent_starter, sandbox_child

    fd = agent_starter.starter_from_env(os.environ.get(agent_starter.STARTER_ENV))
    if fd is None:
        return b'{"starter": null}'
    python = os.path.realpath(sys.executable)
    sandbox_child.grant_agent(python)
    agent = agent_starter.start_agent(fd, [python, "-S", "-c", _STARTED], {"PATH": "/usr/bin"}, "/")
    assert agent.stdout is not None and agent.stdin is not None and agent.stderr is not None
    first = {"pid": agent.pid, "said": agent.stdout.read().decode().strip(), "returncode": agent.wait(timeout=30)}
    # the starter, the same uid as this engine, is non-dumpable: its environment cannot be read
    starters = []
    for entry in (e for e in os.listdir("/proc") if e.isdigit()):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"starter" in argv and agent_starter.STARTER_CODE.encode() in argv:
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    f.read()
                starters.append("readable")
            except OSError as exc:
                starters.append(errno.errorcode.get(exc.errno or 0, "?"))
    first["starter_environ"] = starters
    if _args(payload).get("through_hook"):
        agent_starter.start_agent(fd, [python, "-S", "-c", _STARTED], {"PATH": "/usr/bin"}, "/")
    ends = [os.pipe() for _ in range(3)]
    agent_starter.send(
        fd, {"argv": [python, "-S", "-c", _STARTED], "env": {}, "cwd": "/"}, (ends[0][0], ends[1][1], ends[2][1])
    )
    second, _fds = agent_starter.receive(fd)
    return json.dumps({"first": first, "second": second}).encode()
