#!/bin/bash
# A hostile agent that is not Python at all: bash's /dev/tcp and /dev/udp, a file read, a signal. It reads its
# targets from targets.sh next to it, tries each, reports on stderr in the agent report format, exits 3.
here="$(dirname "$0")"
. "$here/targets.sh"
try() { if eval "$1" >/dev/null 2>&1; then echo reached; else echo "denied:exit-$?"; fi; }
# Inside, nothing answers a SYN (the network watch only records it): the connect is given 2 s.
tcp=$(try "timeout 2 bash -c 'exec 3<>/dev/tcp/127.0.0.1/$TCP_PORT && echo agent >&3'")
udp=$(try "exec 3<>/dev/udp/127.0.0.1/$UDP_PORT && echo agent >&3 && exec 3>&- && test -e /proc/self")
file=$(try "head -c 40 '$HOST_FILE'")
sig=$(try "kill -0 $HOST_PID")
printf 'n17q.sandbox.attempt {"attempts": [{"attempted": "socket", "target": "tcp 127.0.0.1:%s", "result": "%s"}, {"attempted": "socket", "target": "udp 127.0.0.1:%s", "result": "%s"}, {"attempted": "file", "target": "read %s", "result": "%s"}, {"attempted": "signal", "target": "pid %s", "result": "%s"}]}\n' \
  "$TCP_PORT" "$tcp" "$UDP_PORT" "$udp" "$HOST_FILE" "$file" "$HOST_PID" "$sig" >&2
exit 3
