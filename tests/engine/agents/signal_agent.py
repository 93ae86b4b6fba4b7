"""A hostile agent (issue 33): it tries to stop the replay's engine, and so its record, by signalling everything it
can name: its parent, pid 1, its process group (0) and every process it may signal (-1), with every signal an agent
might hope stops an engine (SIGKILL last), and every process its /proc shows outside its own tree, through a
descriptor of that /proc entry (pidfd_send_signal, SIGKILL). It ignores the catchable ones itself, so what it sends
to its own group or to itself does not end it first; then it says what it sent and exits 3, so the run records its
behaviour (the run's record, written by the engine after the agent has gone, is what shows the engine survived).

It prints two lines on stderr: `ppid=<its parent> pid=<itself>`, then `signals <target>:<outcomes> ...`, each
target's distinct outcomes (`sent`, or the error's name) joined by `/`; /proc entries are named `proc<n>`."""

import contextlib
import ctypes
import errno
import fcntl
import os
import signal
import sys

CATCHABLE = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE]
CATCHABLE += [signal.SIGQUIT, signal.SIGALRM]
SYS_PIDFD_SEND_SIGNAL = 424  # x86_64 and aarch64 alike
for s in CATCHABLE:
    signal.signal(s, signal.SIG_IGN)

outcomes: dict[str, list[str]] = {}


def note(target: str, outcome: str) -> None:
    seen = outcomes.setdefault(target, [])
    if outcome not in seen:
        seen.append(outcome)


# The kernel's own signal on its behalf: SIGIO to the owner of an O_ASYNC descriptor, which it sets to pid 1 and to
# its parent (a signal the kernel forces past a namespace's first process's protection, unless that process ignores it).
for owner in sorted({1, os.getppid()} - {0}):
    r, w = os.pipe()
    try:
        fcntl.fcntl(r, fcntl.F_SETOWN, owner)
        fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
        os.write(w, b"x")
        note(f"SIGIO{owner}", "sent")
    except OSError as exc:
        note(f"SIGIO{owner}", errno.errorcode.get(exc.errno or 0, "?"))
for target in sorted({os.getppid(), 1, 0, -1}):
    for s in [*CATCHABLE, signal.SIGSTOP, signal.SIGKILL]:
        if target in (0, os.getpid()) and s in (signal.SIGKILL, signal.SIGSTOP):
            continue  # its own group holds itself: those it cannot ignore
        try:
            os.kill(target, s)
            note(str(target), "sent")
        except OSError as exc:
            note(str(target), errno.errorcode.get(exc.errno or 0, "?"))
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
me = os.readlink("/proc/self")
for entry in sorted((e for e in os.listdir("/proc") if e.isdigit() and e != me), key=int):
    with contextlib.suppress(OSError), open(f"/proc/{entry}/stat") as f:
        if f.read().rsplit(")", 1)[1].split()[1] == me:
            continue  # its own child
    try:
        fd = os.open(f"/proc/{entry}", os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        note(f"proc{entry}", errno.errorcode.get(exc.errno or 0, "?"))
        continue
    if libc.syscall(SYS_PIDFD_SEND_SIGNAL, fd, int(signal.SIGKILL), None, 0) == -1:
        note(f"proc{entry}", errno.errorcode.get(ctypes.get_errno(), "?"))
    else:
        note(f"proc{entry}", "sent")
    os.close(fd)
print(f"ppid={os.getppid()} pid={os.getpid()}", file=sys.stderr, flush=True)
print("signals " + " ".join(f"{t}:{'/'.join(o)}" for t, o in outcomes.items()), file=sys.stderr, flush=True)
sys.exit(3)
