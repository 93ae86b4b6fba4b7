"""Throttles for harness tokens (issue 7): a busy harness is slowed, a guessing client is stopped.

Three limits, all answered with 429 and a Retry-After header:

- `HarnessTokenRateThrottle`: requests made with one token, per token (`N17Q_TOKEN_RATE`). Sessions (people)
  are not limited by it.
- `TokenFailureThrottle`: refused token keys, per client address (`N17Q_TOKEN_FAILURE_RATE`). DRF checks
  throttles only after authentication succeeded, so a wrong key would never meet an ordinary throttle; this
  one is consulted by `HarnessTokenAuthentication` itself, before the key is looked up.
- `TokenByteBudget`: bytes one token may send a door per window (the OTLP receiver's decoded bytes,
  `N17Q_OTLP_TOKEN_BYTES` per `N17Q_OTLP_TOKEN_BYTES_WINDOW_S`): a rate of requests does not bound the work when
  each request may be 64 MiB decoded.

The counts live in Django's cache: Redis when REDIS_URL is set (shared by every web process), else a folder
under N17Q_DATA_DIR (shared by the processes of one machine). Rates are read at each request, not at import,
so a changed setting takes effect (and tests can set one).
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from django.core.cache import cache
from rest_framework.settings import api_settings
from rest_framework.throttling import SimpleRateThrottle

from .models import HarnessToken

log = logging.getLogger(__name__)


class _LiveRate(SimpleRateThrottle):
    def get_rate(self) -> str | None:
        rate = api_settings.DEFAULT_THROTTLE_RATES.get(self.scope or "")
        return None if rate is None else str(rate)

    def allow_request(self, request: Any, view: Any) -> bool:
        # The counts are in Redis; while Redis restarts, a harness is let through rather than answered 500
        # (the limit is a brake, not a lock; the failure is logged).
        try:
            return super().allow_request(request, view)
        except Exception:
            log.warning("throttle %s: its cache is unavailable; letting the request through", self.scope, exc_info=True)
            return True


class HarnessTokenRateThrottle(_LiveRate):
    scope = "harness_token"

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        token = getattr(request, "auth", None)
        if not isinstance(token, HarnessToken):
            return None  # a person's session: not this throttle's business
        return self.cache_format % {"scope": self.scope, "ident": token.pk}


class TokenFailureThrottle(_LiveRate):
    scope = "harness_token_failure"
    # Set by SimpleRateThrottle.__init__ from the rate (None when no rate is configured).
    num_requests: int
    duration: int

    def get_cache_key(self, request: Any, view: Any) -> str | None:
        return self.cache_format % {"scope": self.scope, "ident": self.get_ident(request)}

    def _load(self, request: Any) -> None:
        self.key = self.get_cache_key(request, None)
        self.history = self.cache.get(self.key, [])
        self.now = self.timer()
        while self.history and self.history[-1] <= self.now - self.duration:
            self.history.pop()

    def wait_before_trying(self, request: Any) -> float | None:
        """Seconds this client must wait before a token of theirs is even looked up; None when it may try."""
        if self.rate is None:
            return None
        try:
            self._load(request)
        except Exception:
            log.warning("throttle %s: its cache is unavailable; letting the request through", self.scope, exc_info=True)
            return None
        if len(self.history) >= self.num_requests:
            return self.wait()
        return None

    def record_failure(self, request: Any) -> None:
        if self.rate is None:
            return
        try:
            self._load(request)
            self.history.insert(0, self.now)
            self.cache.set(self.key, self.history, self.duration)
        except Exception:
            log.warning("throttle %s: its cache is unavailable; failure not counted", self.scope, exc_info=True)


@dataclass(frozen=True)
class TokenByteBudget:
    """`limit` bytes per token per window of `window_s` seconds, counted in the cache (a fixed window: one counter
    per token and window, `incr`ed, so that concurrent requests of one token add up on Redis). Like the other
    throttles it fails open while the cache is away (logged)."""

    scope: str
    limit: int
    window_s: int

    def _key(self, token: HarnessToken) -> tuple[str, int]:
        """The counter's key, and the whole seconds until its window ends (at least 1): the answer's Retry-After."""
        now = time.time()
        window = int(now // self.window_s)
        return f"throttle_{self.scope}_{token.pk}_{window}", max(1, math.ceil((window + 1) * self.window_s - now))

    def wait(self, token: HarnessToken | None) -> int | None:
        """Seconds until the token's budget refills when it is spent already; None when it may send."""
        if token is None:
            return None
        try:
            key, refill = self._key(token)
            spent = cache.get(key, 0)
        except Exception:
            log.warning(
                "byte budget %s: its cache is unavailable; letting the request through", self.scope, exc_info=True
            )
            return None
        return refill if spent >= self.limit else None

    def charge(self, token: HarnessToken | None, size: int) -> int | None:
        """Count `size` bytes against the token; the seconds to wait when they take it past its budget (the request
        is refused: its bytes stay counted, the work of reading them was done), else None."""
        if token is None:
            return None
        try:
            key, refill = self._key(token)
            cache.add(key, 0, self.window_s + 1)
            spent = cache.incr(key, size)
        except Exception:
            log.warning("byte budget %s: its cache is unavailable; bytes not counted", self.scope, exc_info=True)
            return None
        return refill if spent > self.limit else None
