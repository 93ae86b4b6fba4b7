"""The worker's side of the live model relay (issue 18, docs/agents.md): an agent's chat requests, relayed to the
model provider the operator declared (an OpenAI-compatible base URL), with the credential the worker alone holds.

`model_relay(base_url, credential_name)` returns the callable the sandbox's relay channel answers each request
line with (`n17q_engine.sandbox._RelayChannel`): it resolves the credential from the worker's environment by name
when called (never stored, never sent into the sandbox), POSTs the request to `<base_url>/chat/completions`, and
answers `{"body": <chat completion>}` or `{"error": "..."}`. Django-free: the engine's tests use it as it is.
"""

from __future__ import annotations

import json
import os
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from urllib.parse import urlsplit

CREDENTIAL_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,127}$")
MAX_RESPONSE = 8 << 20
TIMEOUT_S = 120.0
DROPPED = ("stream", "stream_options")  # whole completions only (the agent's endpoint answers no stream)


class RelayRefused(ValueError):
    """A model connection that cannot be declared as given; one line."""


def check_connection(base_url: str, credential_name: str) -> None:
    """Refuse, in one line, a base URL that is not http(s) with a host, or a credential name that is not an
    environment variable's name (the value is never asked for: the worker resolves it)."""
    parts = urlsplit(base_url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        raise RelayRefused(f"model base URL {base_url!r}: an http(s) URL with a host and no credentials in it")
    if parts.query or parts.fragment:
        raise RelayRefused(f"model base URL {base_url!r}: no query or fragment")
    if not CREDENTIAL_NAME_RE.match(credential_name or ""):
        # What was given is not repeated: typed in the wrong place, it may be the credential itself.
        raise RelayRefused(
            "credential name: the NAME of an environment variable on the worker (upper-case letters, digits, _), "
            "never the credential itself"
        )


def model_relay(base_url: str, credential_name: str) -> Callable[[bytes], bytes]:
    check_connection(base_url, credential_name)
    url = base_url.rstrip("/") + "/chat/completions"

    def relay(line: bytes) -> bytes:
        credential = os.environ.get(credential_name)
        if not credential:
            return _answer(error=f"the worker's environment holds no {credential_name}")
        try:
            request = json.loads(line)
        except ValueError:
            return _answer(error="the request is not JSON")
        if not isinstance(request, dict):
            return _answer(error="the request is not a JSON object")
        body = {k: v for k, v in request.items() if k not in DROPPED}
        http = urllib.request.Request(
            url,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {credential}"},
        )
        try:
            with urllib.request.urlopen(http, timeout=TIMEOUT_S) as response:
                data = response.read(MAX_RESPONSE + 1)
        except urllib.error.HTTPError as exc:
            return _answer(error=f"the provider answered HTTP {exc.code}")
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
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

    return relay


def _answer(*, body: dict | None = None, error: str | None = None) -> bytes:
    # The credential never appears in an answer: errors name the provider's status or the variable, not its value.
    return json.dumps({"body": body} if error is None else {"error": error}).encode()
