"""The engine's side of the sandbox's network watch (issue 18 point 5): what the agent sent toward the outside.

Inside an agent replay's namespace every route leads into a TUN device whose descriptor only the engine holds
(`n17q_engine.sandbox`, `network_watch=True`). So a TCP SYN, a UDP datagram or a DNS query the agent sends, to any
address (the host's loopback addresses included: 127.0.0.1 and ::1 are not local there), arrives here as a
packet, whatever the agent is written in and whether or not it reports it. `NetWatch.drain()` reads what has
arrived, without blocking, and turns each new flow into an attempt (`attempted` from the vocabulary's
VIOLATION_TARGETS: `socket` or `dns`); nothing is ever forwarded or answered, so a connect waits unanswered until
the run stops it.

Seen: IPv4 and IPv6 TCP (the SYN), UDP (each destination once), DNS queries to any server (the question's name),
ICMP echo and any other protocol (its number). Not seen here: unix sockets, files and signals, which never leave
through a network device (the mount and PID namespaces deny them; an agent may report them itself).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
from typing import Any

from ..agent_starter import inherited_descriptor

MAX_ATTEMPTS = 64  # a flood is cut short: the run stops at the first anyway
_KERNEL_ICMP6 = frozenset({130, 131, 132, 133, 134, 135, 136, 137, 143})  # MLD and neighbour discovery chatter


class NetWatch:
    def __init__(self, fd: int) -> None:
        os.set_inheritable(fd, False)  # close-on-exec from now on: the agent never inherits it
        os.set_blocking(fd, False)
        self.fd = fd
        self.seen: set[tuple[Any, ...]] = set()
        self.count = 0

    @classmethod
    def from_env(cls, value: str | None) -> NetWatch | None:
        fd = inherited_descriptor(value)
        return None if fd is None else cls(fd)

    def drain(self) -> list[dict[str, str]]:
        """Every attempt that has arrived since the last call (new flows only), in arrival order."""
        found: list[dict[str, str]] = []
        while True:
            try:
                packet = os.read(self.fd, 65536)
            except OSError:  # EAGAIN: nothing more has arrived (EINTR is retried by os.read itself)
                break
            if not packet:
                break
            attempt = parse(packet)
            if attempt is None:
                continue
            key, item = attempt
            if key in self.seen or self.count >= MAX_ATTEMPTS:
                continue
            self.seen.add(key)
            self.count += 1
            found.append(item)
        return found

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self.fd)


def parse(packet: bytes) -> tuple[tuple[Any, ...], dict[str, str]] | None:
    """(flow key, attempt) of one IP packet as the TUN hands it over (no packet information header), or None for the
    kernel's own IPv6 neighbour-discovery chatter and for anything unreadable."""
    if not packet:
        return None
    version = packet[0] >> 4
    if version == 4 and len(packet) >= 20:
        header = (packet[0] & 0x0F) * 4
        proto, src, dst = packet[9], packet[12:16], packet[16:20]
        payload = packet[header:]
        host = str(ipaddress.IPv4Address(dst))
        source = str(ipaddress.IPv4Address(src))
    elif version == 6 and len(packet) >= 40:
        proto, src, dst = packet[6], packet[8:24], packet[24:40]
        payload = packet[40:]
        host = f"[{ipaddress.IPv6Address(dst)}]"
        source = str(ipaddress.IPv6Address(src))
        if proto == 58 and payload and payload[0] in _KERNEL_ICMP6:
            return None
    else:
        return None
    seen = "arrived at the sandbox's network watch (the namespace's only route out); nothing was forwarded"
    if proto == 6 and len(payload) >= 14:
        sport, dport = int.from_bytes(payload[0:2], "big"), int.from_bytes(payload[2:4], "big")
        flags = payload[13]
        if not flags & 0x02:  # not a SYN: a later segment of a flow already seen (or nothing to start one)
            return None
        return (("tcp", source, sport, host, dport), {
            "attempted": "socket",
            "target": f"tcp {host}:{dport}",
            "observed": f"a TCP SYN {seen}",
        })  # fmt: skip
    if proto == 17 and len(payload) >= 8:
        dport = int.from_bytes(payload[2:4], "big")
        if dport == 53:
            name = _dns_question(payload[8:])
            if name is not None:
                return (("dns", name), {
                    "attempted": "dns",
                    "target": name,
                    "observed": f"a DNS query to {host}:53 {seen}",
                })  # fmt: skip
        return (("udp", host, dport), {
            "attempted": "socket",
            "target": f"udp {host}:{dport}",
            "observed": f"a UDP datagram {seen}",
        })  # fmt: skip
    name = {1: "icmp", 58: "icmpv6"}.get(proto, f"ip protocol {proto}")
    return (("ip", proto, host), {
        "attempted": "socket",
        "target": f"{name} {host}",
        "observed": f"an {name} packet {seen}",
    })  # fmt: skip


def _dns_question(message: bytes) -> str | None:
    """The first question's name of a DNS query (labels only; a compressed or malformed name is None)."""
    if len(message) < 12 or int.from_bytes(message[4:6], "big") < 1:
        return None
    labels: list[str] = []
    at = 12
    while at < len(message):
        length = message[at]
        if length == 0:
            return ".".join(labels) if labels else "."
        if length & 0xC0 or at + 1 + length > len(message) or len(labels) > 127:
            return None
        labels.append(message[at + 1 : at + 1 + length].decode("ascii", "replace"))
        at += 1 + length
    return None
