"""A hostile agent (issue 33): it tries to stop the replay's engine, and so its record, by signalling everything it
can name: its parent, pid 1, its process group (0) and every process it may signal (-1), with every signal an agent
might hope stops an engine (SIGKILL last). It ignores the catchable ones itself, so what it sends to its own group
or to itself does not end it first; then it says what it sent and exits 3, so the run records its behaviour."""

import contextlib
import fcntl
import os
import signal
import sys
import time

CATCHABLE = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGUSR1, signal.SIGUSR2, signal.SIGPIPE]
CATCHABLE += [signal.SIGQUIT, signal.SIGALRM]
for s in CATCHABLE:
    signal.signal(s, signal.SIG_IGN)

sent = []
# The kernel's own signal on its behalf: SIGIO to the owner of an O_ASYNC descriptor, which it sets to pid 1 and to
# its parent (a signal the kernel forces past a namespace's first process's protection, unless that process ignores it).
for owner in sorted({1, os.getppid()}):
    r, w = os.pipe()
    with contextlib.suppress(OSError):
        fcntl.fcntl(r, fcntl.F_SETOWN, owner)
        fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
        os.write(w, b"x")
        sent.append(f"{owner}:SIGIO:sent")
for target in sorted({os.getppid(), 1, 0, -1}):
    for s in [*CATCHABLE, signal.SIGSTOP, signal.SIGKILL]:
        if target in (0, os.getpid()) and s in (signal.SIGKILL, signal.SIGSTOP):
            continue  # its own group holds itself: those it cannot ignore
        try:
            os.kill(target, s)
            sent.append(f"{target}:{s.name}:sent")
        except OSError as exc:
            sent.append(f"{target}:{s.name}:{type(exc).__name__}")
print(f"ppid={os.getppid()}", file=sys.stderr, flush=True)
time.sleep(0.5)  # the engine, had it been reached, has had time to die
print("signals " + " ".join(sent), file=sys.stderr, flush=True)
sys.exit(3)
