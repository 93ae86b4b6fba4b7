"""The worker's side of the live model relay (issue 18, docs/agents.md): an agent's chat requests, relayed to a model
endpoint an admin registered and a reviewer approved (a reviewed connection of kind `model`, issue 33), with the one
credential that endpoint may use, which the worker alone holds.

`ModelEndpoint` is what an approved model connection names: scheme, host, port, path prefix and the ONE credential
reference. `ModelRelay(endpoint, max_calls=…)` is the callable the sandbox's relay channel answers each request line
with (`n17q_engine.sandbox._RelayChannel`): it resolves the credential from the worker's environment when called
(never stored, never sent into the sandbox), POSTs the request to `<scheme>://<host>:<port><prefix>/chat/completions`
and nowhere else (no redirect is followed, no proxy is used; an endpoint approved as a host NAME is refused when the
address it reached is not a global one, see `address_kind`), answers `{"body": <chat completion>}` or
`{"error": "..."}`, and counts its calls: past `max_calls` it refuses. The count is a `CallCount`: in memory by default
(the engine's tests use the relay as is), or the replay's own row in the database (`replays.relay_count`), so the cap
is per replay, not per worker: a replay claimed again after its worker died, or taken over while the first worker
still runs, continues the count its earlier claims left.

The endpoint and the credential namespace are defined in `fixtures_review.model_endpoints`.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import os
import socket
import ssl
import threading
import urllib.error
import urllib.request
from typing import Any, Protocol

from fixtures_review.model_endpoints import EndpointRefused, ModelEndpoint
from n17q_engine.live_boundary import ReplayKeyRefused, refuse_replay_keys

log = logging.getLogger(__name__)

MAX_RESPONSE = 8 << 20
TIMEOUT_S = 120.0
DROPPED = ("stream", "stream_options")  # whole completions only (the agent's endpoint answers no stream)


# One refusal for an endpoint however it is reached (the connection's approval, the relay's construction).
RelayRefused = EndpointRefused


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect would send the request (and, by urllib's rules, its Authorization header) to a URL nobody approved.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # urllib then raises the 3xx as an HTTPError


_UNIQUE_LOCAL = ipaddress.ip_network("fc00::/7")


def address_kind(address: str) -> str | None:
    """What kind of address `address` is when it is not a global one ("loopback", "private", "link-local",
    "unique-local", "multicast", "reserved", "unspecified", or "non-global" for the rest, e.g. shared address space);
    None for a global address. An IPv4-mapped IPv6 address (::ffff:a.b.c.d) is judged as the IPv4 address it
    carries: the kernel connects to that one."""
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:  # before `is_global`: 224.0.0.0/4 counts as global to Python 3.11
        return "multicast"
    if isinstance(ip, ipaddress.IPv6Address) and ip in _UNIQUE_LOCAL:
        return "unique-local"
    if ip.is_reserved:
        return "reserved"
    if ip.is_private:
        return "private"
    return None if ip.is_global else "non-global"


class NotSent(OSError):
    """The approved host NAME reached an address that is not global: the connection is closed before a byte of the
    request (or a TLS handshake) is sent. Its text is the one line the run gets."""


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _guarded_connect(host: str) -> Any:
    """`socket.create_connection` for the approved `host`, checking the peer of the ESTABLISHED socket: the address
    the kernel actually connected to, not a separate lookup a DNS answer could change in between (rebinding). An
    address literal was approved as itself and is connected to as is."""

    def connect(address: tuple[str, int], *args: Any, **kwargs: Any) -> socket.socket:
        sock = socket.create_connection(address, *args, **kwargs)
        if _is_literal(host):
            return sock
        try:
            peer = str(sock.getpeername()[0]).partition("%")[0]  # an IPv6 scope (fe80::1%eth0) is not the address
            kind = address_kind(peer)
        except (OSError, ValueError) as exc:
            sock.close()
            raise NotSent(f"{host}: the address it reached could not be checked ({exc}): not sent") from None
        if kind is not None:
            sock.close()
            raise NotSent(f"{host} resolved to {peer}, a {kind} address: not sent")
        return sock

    return connect


class _GuardedHTTPConnection(http.client.HTTPConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _guarded_connect(self.host)


class _GuardedHTTPSConnection(http.client.HTTPSConnection):
    # HTTPSConnection.connect opens the TCP connection through HTTPConnection.connect (so through the guard) and only
    # then starts TLS: a refused peer never sees the handshake either.
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._create_connection = _guarded_connect(self.host)


class _GuardedHTTPHandler(urllib.request.HTTPHandler):
    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_GuardedHTTPConnection, req)


class _GuardedHTTPSHandler(urllib.request.HTTPSHandler):
    def __init__(self) -> None:
        super().__init__()
        self.context = ssl.create_default_context()  # what urllib's own handler uses: certificates and host checked

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(_GuardedHTTPSConnection, req, context=self.context)


# No proxy handler: the approved endpoint is the only host the worker connects to (a proxy from the environment
# would see the credential of an http endpoint, and is a host nobody approved). The guarded handlers replace urllib's
# own http and https handlers (build_opener drops a default whose subclass is given).
_OPENER = urllib.request.build_opener(
    urllib.request.ProxyHandler({}), _NoRedirect(), _GuardedHTTPHandler(), _GuardedHTTPSHandler()
)


class CallCount(Protocol):
    """Where a replay's relayed calls are counted. `take` claims one call under `cap` atomically (True: it may be
    sent) or counts a refusal (False); `made` is how many calls were sent so far, by every holder of the count."""

    def take(self, cap: int) -> bool: ...

    def made(self) -> int: ...


class LocalCount:
    """A count held by this relay alone (a relay outside any replay's row: the engine's tests)."""

    def __init__(self) -> None:
        self.calls = 0
        self.refused = 0
        self._lock = threading.Lock()

    def take(self, cap: int) -> bool:
        with self._lock:
            if self.calls >= cap:
                self.refused += 1
                return False
            self.calls += 1
            return True

    def made(self) -> int:
        return self.calls


class ModelRelay:
    """The relay of one replay: at most `max_calls` requests reach the endpoint, counted in `count` (shared by every
    relay of the same replay when it is the replay's row); the rest are refused and counted. `calls` and `refused`
    are this relay's own share."""

    def __init__(self, endpoint: ModelEndpoint, *, max_calls: int, count: CallCount | None = None) -> None:
        endpoint.check()
        if max_calls < 1:
            raise RelayRefused(f"the relay's call cap must be at least 1, got {max_calls}")
        self.endpoint = endpoint
        self.max_calls = max_calls
        self.count: CallCount = count if count is not None else LocalCount()
        self.calls = 0  # requests this relay sent to the endpoint
        self.refused = 0  # requests the cap refused this relay
        self.refused_replay_keys = 0  # requests refused for carrying a replay-namespaced key (never sent, not counted)
        self._lock = threading.Lock()
        self.url = endpoint.base_url + "/chat/completions"
        if not endpoint.admits(self.url):  # the URL is built, never given; this keeps it so
            raise RelayRefused(f"{self.url} is not under the approved endpoint")

    @property
    def capped(self) -> bool:
        return self.refused > 0

    def __call__(self, line: bytes) -> bytes:
        # Seed 001: a replay-namespaced idempotency key or namespace never reaches a live connection. Checked first,
        # on this relay's own, before the cap, the credential or a byte sent (docs/live-boundary.md).
        refusal = self._replay_key_refusal(line)
        if refusal is not None:
            with self._lock:
                self.refused_replay_keys += 1
            log.warning("model relay refused a request to %s: %s", self.endpoint.base_url, refusal)
            return _answer(error=refusal)
        if not self.count.take(self.max_calls):
            with self._lock:
                self.refused += 1
            return _answer(
                error=f"the relay's cap of {self.max_calls} model calls for this replay is reached "
                f"({self.count.made()} made, counting every claim of it): call refused"
            )
        with self._lock:
            self.calls += 1
        credential = os.environ.get(self.endpoint.credential)
        if not credential:
            return _answer(error=f"the worker's environment holds no {self.endpoint.credential}")
        try:
            request = json.loads(line)
        except ValueError:
            return _answer(error="the request is not JSON")
        if not isinstance(request, dict):
            return _answer(error="the request is not a JSON object")
        body = {k: v for k, v in request.items() if k not in DROPPED}
        http = urllib.request.Request(
            self.url,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {credential}"},
        )
        try:
            with _OPENER.open(http, timeout=TIMEOUT_S) as response:
                data = response.read(MAX_RESPONSE + 1)
        except urllib.error.HTTPError as exc:
            moved = " (a redirect, not followed)" if 300 <= exc.code < 400 else ""
            return _answer(error=f"the provider answered HTTP {exc.code}{moved}")
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, NotSent):
                return _answer(error=str(exc.reason))
            return _answer(error=f"the provider could not be reached: {exc.reason}")
        except (OSError, TimeoutError) as exc:
            return _answer(error=f"the provider could not be reached: {getattr(exc, 'reason', exc)}")
        if len(data) > MAX_RESPONSE:
            return _answer(error=f"the provider's answer is larger than {MAX_RESPONSE} bytes")
        try:
            completion = json.loads(data)
        except ValueError:
            return _answer(error="the provider's answer is not JSON")
        if not isinstance(completion, dict) or not isinstance(completion.get("choices"), list):
            return _answer(error="the provider's answer is not a chat completion")
        return _answer(body=completion)

    def _replay_key_refusal(self, line: bytes) -> str | None:
        try:
            request = json.loads(line)
        except ValueError:
            return None  # not JSON: said below, in its turn
        try:
            refuse_replay_keys(request, connection=self.endpoint.base_url)
        except ReplayKeyRefused as exc:
            return str(exc)
        return None


def _answer(*, body: dict | None = None, error: str | None = None) -> bytes:
    # The credential never appears in an answer: errors name the provider's status or the variable, not its value.
    return json.dumps({"body": body} if error is None else {"error": error}).encode()
