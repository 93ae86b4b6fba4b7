"""Throttles for harness tokens (issue 7): a busy harness is slowed, a guessing client is stopped.

Two limits, both answered with 429 and a Retry-After header:

- `HarnessTokenRateThrottle`: requests made with one token, per token (`N17Q_TOKEN_RATE`). Sessions (people)
  are not limited by it.
- `TokenFailureThrottle`: refused token keys, per client address (`N17Q_TOKEN_FAILURE_RATE`). DRF checks
  throttles only after authentication succeeded, so a wrong key would never meet an ordinary throttle; this
  one is consulted by `HarnessTokenAuthentication` itself, before the key is looked up.

The counts live in Django's cache: Redis when REDIS_URL is set (shared by every web process), else a folder
under N17Q_DATA_DIR (shared by the processes of one machine). Rates are read at each request, not at import,
so a changed setting takes effect (and tests can set one).
"""

from __future__ import annotations

import logging
from typing import Any

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
