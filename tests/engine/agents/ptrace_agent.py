"""A hostile agent (issue 33): it tries to get into the replay's engine through ptrace(2) and /proc, the ways a process
of the same uid reaches another: PTRACE_ATTACH and PTRACE_SEIZE, and /proc/<pid>/mem, environ, fd/ and maps, against
every pid it can name that is not its own (its parent, pid 1) and every /proc entry that is not its own tree's (with
pidfd_send_signal of signal 0 through that entry: can it name the process at all). The positive control: the same
probes against its own child succeed. It prints one line per target group on stderr and exits 4.

Deliberately free of N17Q imports: it is a program the sandbox runs, not engine code.
"""

import ctypes
import errno
import os
import signal
import sys

PTRACE_ATTACH, PTRACE_DETACH, PTRACE_SEIZE = 16, 17, 0x4206
SYS_PIDFD_SEND_SIGNAL = 424  # x86_64 and aarch64 alike
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
libc.ptrace.restype = ctypes.c_long
libc.syscall.restype = ctypes.c_long


def name(err: int) -> str:
    return errno.errorcode.get(err, str(err))


def call(fn) -> str:
    try:
        fn()
    except OSError as exc:
        return name(exc.errno or 0)
    return "ok"


def ptrace(request: int, pid: int) -> None:
    if libc.ptrace(request, pid, None, None) == -1:
        raise OSError(ctypes.get_errno(), "ptrace")


def files(path: str) -> list[str]:
    def read(what: str) -> None:
        with open(f"{path}/{what}", "rb") as f:
            f.read(64)

    def mem() -> None:
        os.close(os.open(f"{path}/mem", os.O_RDONLY))

    def signal_0() -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if libc.syscall(SYS_PIDFD_SEND_SIGNAL, fd, 0, None, 0) == -1:
                raise OSError(ctypes.get_errno(), "pidfd_send_signal")
        finally:
            os.close(fd)

    return [
        f"mem={call(mem)}",
        f"environ={call(lambda: read('environ'))}",
        f"fd={call(lambda: os.listdir(f'{path}/fd'))}",
        f"maps={call(lambda: read('maps'))}",
        f"signal={call(signal_0)}",
    ]


def by_pid(pid: int, entry: int, *, own: bool = False) -> list[str]:
    """ptrace by `pid` (as the agent names it), /proc by `entry` (as the /proc in its view numbers it)."""
    out = [f"attach={call(lambda: ptrace(PTRACE_ATTACH, pid))}"]
    if own and out[0] == "attach=ok":
        os.waitpid(pid, 0)  # the attach stopped it: let it go again before seizing it
        ptrace(PTRACE_DETACH, pid)
    out.append(f"seize={call(lambda: ptrace(PTRACE_SEIZE, pid))}")
    return out + files(f"/proc/{entry}")


child = os.fork()
if child == 0:
    while True:
        signal.pause()
mine = {os.getpid(), child}
# Its own tree's /proc entries as that /proc numbers them (the /proc in its view may be an ancestor namespace's)
me = int(os.readlink("/proc/self"))
children = []
for entry in os.listdir("/proc"):
    if entry.isdigit():
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        if ppid == me:
            children.append(int(entry))
own_entries = {me, *children}
targets = sorted({os.getppid(), 1} - {0} - mine)
others = sorted(int(e) for e in os.listdir("/proc") if e.isdigit() and int(e) not in own_entries)
print("by pid: " + " ".join(f"{p}:" + ",".join(by_pid(p, p)) for p in targets) + " ppid=" + str(os.getppid()),
      file=sys.stderr, flush=True)  # fmt: skip
print("by proc: " + " ".join(f"{p}:" + ",".join(files(f"/proc/{p}")) for p in others), file=sys.stderr, flush=True)
print("own child: " + ",".join(by_pid(child, children[0], own=True)), file=sys.stderr, flush=True)
os.kill(child, signal.SIGKILL)
os.waitpid(child, 0)
sys.exit(4)
