"""Model endpoints (issue 33): what an approved model connection lets the live relay reach, and the namespace its one
credential reference must be in. Django-free: `fixtures_review.connections` checks a connection with it before a
reviewer may approve it, and the worker's relay (`replays.relay`) checks it again before it sends anything.

The credential namespace (docs/decisions.md, "Model credentials live in their own namespace"): a credential reference
is the name of an environment variable under `N17Q_MODEL_CREDENTIAL_`, and nothing else. The console's own settings
(N17Q_SECRET_KEY, DATABASE_URL, the broker's and the storage's) are read from names outside it, so no reference an
admin can write resolves to one of them.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

CREDENTIAL_PREFIX = "N17Q_MODEL_CREDENTIAL_"
CREDENTIAL_RE = re.compile(r"^N17Q_MODEL_CREDENTIAL_[A-Z0-9][A-Z0-9_]{0,63}$")
_HOST_RE = re.compile(r"^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*$")
_PATH_RE = re.compile(r"^(?:/[A-Za-z0-9._~-]+)*/?$")


class EndpointRefused(ValueError):
    """A model endpoint or credential reference that cannot be used as given; one line."""


def credential_check(name: str) -> None:
    """Refuse any credential reference outside the model-credential namespace. What was given is not repeated: typed
    in the wrong place, it may be the credential itself."""
    if not CREDENTIAL_RE.match(name or ""):
        raise EndpointRefused(
            f"credential: the NAME of an environment variable on the worker under {CREDENTIAL_PREFIX} (upper-case "
            "letters, digits, _), never the credential itself nor any other variable of the worker"
        )


def endpoint_check(scheme: str, host: str, port: int | None, path_prefix: str) -> None:
    """Refuse, in one line, an endpoint that is not http(s), a host name or address, a port and a plain path."""
    if scheme not in ("http", "https"):
        raise EndpointRefused(f"model endpoint scheme {scheme!r}: http or https")
    if not _host_ok(host or ""):
        raise EndpointRefused(f"model endpoint host {host!r}: a lower-case host name or an IP address, nothing else")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise EndpointRefused(f"model endpoint port {port!r}: a number from 1 to 65535")
    if not path_prefix.startswith("/") or not _PATH_RE.match(path_prefix) or "/../" in f"{path_prefix}/":
        raise EndpointRefused(
            f"model endpoint path prefix {path_prefix!r}: an absolute path of plain segments (no query, no '..', "
            "no escapes)"
        )


def _host_ok(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return bool(_HOST_RE.match(host))
    return True


@dataclass(frozen=True)
class ModelEndpoint:
    """What an approved model connection lets the relay reach, and the one credential it may send there."""

    scheme: str
    host: str
    port: int
    path_prefix: str
    credential: str

    def check(self) -> None:
        endpoint_check(self.scheme, self.host, self.port, self.path_prefix)
        credential_check(self.credential)

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def base_url(self) -> str:
        return f"{self.scheme}://{self.netloc}{self.path_prefix.rstrip('/')}"

    def admits(self, url: str) -> bool:
        """Whether `url` is under this endpoint: same scheme, host and port, and a path under its prefix."""
        parts = urlsplit(url)
        prefix = self.path_prefix.rstrip("/") + "/"
        return (
            parts.scheme == self.scheme
            and parts.hostname == self.host
            and parts.port == self.port
            and not parts.username
            and not parts.password
            and parts.path.startswith(prefix)
            and "/../" not in parts.path + "/"
            and not parts.query
            and not parts.fragment
        )
