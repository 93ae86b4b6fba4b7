#!/bin/bash
# A quiet hostile agent, not Python: it tries TCP, UDP and DNS toward the targets in targets.sh, reports nothing and
# exits 0, as if all were well. The TCP connect runs in the background, given 2 s (inside, nothing answers a SYN).
here="$(dirname "$0")"
. "$here/targets.sh"
timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$TCP_PORT" >/dev/null 2>&1 &
(echo agent >"/dev/udp/127.0.0.1/$UDP_PORT") >/dev/null 2>&1
getent hosts "$DNS_NAME" >/dev/null 2>&1
wait
exit 0
