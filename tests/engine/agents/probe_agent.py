"""A hostile agent for the boundary tests: plain Python, no audit hook binds it. It tries to reach out in every
way listed in targets.json (next to it), then reports each attempt on stderr in the agent report format and
exits 3. Run outside the sandbox (the positive control) the same attempts succeed.

Deliberately free of N17Q imports: it is a program the sandbox runs, not engine code.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path


def _try(fn) -> str:
    try:
        out = fn()
    except OSError as exc:
        return f"denied:{type(exc).__name__}:{exc.errno}"
    return f"reached:{out}" if out is not None else "reached"


def main() -> int:
    t = json.loads((Path(__file__).parent / "targets.json").read_text())

    def tcp() -> None:
        with socket.create_connection(("127.0.0.1", t["tcp_port"]), timeout=1):  # inside, nothing answers
            pass  # connecting is the point: the canary may close at once

    def udp() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"agent", ("127.0.0.1", t["udp_port"]))

    def dns() -> str:
        return str(socket.getaddrinfo(t["dns_name"], 80)[0][4][0])

    def unix() -> None:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(2)
            s.connect(t["unix_path"])  # connecting is the point: the canary may close at once

    def read_outside() -> str:
        return Path(t["host_file"]).read_text()[:40]

    def write_outside() -> None:
        (Path(__file__).parent / "written-by-agent.txt").write_text("x")

    def signal_host() -> None:
        os.kill(t["host_pid"], 0)

    attempts = [
        {"attempted": "socket", "target": f"tcp 127.0.0.1:{t['tcp_port']}", "result": _try(tcp)},
        {"attempted": "socket", "target": f"udp 127.0.0.1:{t['udp_port']}", "result": _try(udp)},
        {"attempted": "dns", "target": t["dns_name"], "result": _try(dns)},
        {"attempted": "socket", "target": f"unix {t['unix_path']}", "result": _try(unix)},
        {"attempted": "file", "target": f"read {t['host_file']}", "result": _try(read_outside)},
        {"attempted": "file", "target": "write into its own (read-only) folder", "result": _try(write_outside)},
        {"attempted": "signal", "target": f"pid {t['host_pid']}", "result": _try(signal_host)},
    ]
    env = sorted(os.environ)
    print("n17q.sandbox.attempt " + json.dumps({"attempts": attempts, "environment": env}), file=sys.stderr)
    return 3


if __name__ == "__main__":
    sys.exit(main())
