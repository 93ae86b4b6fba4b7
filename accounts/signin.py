"""Signing in, throttled and audited (issue 14, point 4): on 775880e every wrong password answered 200, so guessing
was bounded only by hashing time.

Three limits on failed sign-ins, each over a window (`N17Q_SIGNIN_WINDOW_S`), counted in the shared cache:

- per account and client address (`N17Q_SIGNIN_PAIR_LIMIT`, 5): a guesser at one address gets five tries at one
  account;
- per client address (`N17Q_SIGNIN_ADDRESS_LIMIT`, 30): one address spraying many accounts is stopped;
- per account, whatever the address (`N17Q_SIGNIN_ACCOUNT_LIMIT`, 100): guessing spread over many addresses is
  slowed.

The last could let an attacker lock the real user out by failing on purpose from many addresses. It does not apply
to a browser that has signed in to that account before: a successful sign-in leaves a signed cookie naming the
account (`n17q_signin`, a year, HttpOnly), and a sign-in carrying it is judged by the per-address limits only, which
the attacker's failures elsewhere do not touch. A throttled attempt answers 429 with the wait and checks no
password; every failure and every throttled attempt is in the audit log (`auth.sign_in_refused`,
`auth.sign_in_throttled`), with the address, never the password.
"""

from __future__ import annotations

import hashlib
import logging
from typing import Any

from django.conf import settings
from django.contrib.auth import views as auth_views
from django.core import signing
from django.core.cache import cache
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from .audit import audit_record, client_ip

log = logging.getLogger(__name__)

KNOWN_COOKIE = "n17q_signin"
_SALT = "n17q.signin.known-browser"


def _key(kind: str, *parts: str) -> str:
    digest = hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]
    return f"n17q:signin:{kind}:{digest}"


def _count(key: str) -> int:
    try:
        return int(cache.get(key) or 0)
    except Exception:  # the cache is down: a brake, not a lock (logged); the password is still checked
        log.warning("sign-in throttle: the cache is unavailable", exc_info=True)
        return 0


def _bump(key: str, window: int) -> None:
    try:
        if not cache.add(key, 1, timeout=window):
            cache.incr(key)
    except Exception:
        log.warning("sign-in throttle: the cache is unavailable", exc_info=True)


class ThrottledLoginView(auth_views.LoginView):
    """Django's sign-in page with the three limits above."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        username = str(request.POST.get("username", ""))[:150]
        address = client_ip(request) or ""  # the audit log's rule for the client, so both name the same one
        account = username.casefold()
        known = self._known_browser(request) == account
        limits = [
            (_key("pair", account, address), settings.N17Q_SIGNIN_PAIR_LIMIT),
            (_key("address", address), settings.N17Q_SIGNIN_ADDRESS_LIMIT),
        ]
        if not known:
            limits.append((_key("account", account), settings.N17Q_SIGNIN_ACCOUNT_LIMIT))
        over = next((key for key, limit in limits if _count(key) >= limit), None)
        if over is not None:
            kind = over.split(":")[2]
            audit_record(
                actor=None, action="auth.sign_in_throttled", target=username, detail={"limit": kind}, request=request
            )
            minutes = max(1, settings.N17Q_SIGNIN_WINDOW_S // 60)
            wait = f"{minutes} minute{'' if minutes == 1 else 's'}"
            response = render(
                request,
                "registration/login.html",
                {
                    # Unbound: a form bound to the post would authenticate while the page draws its errors, checking
                    # the password this answer refuses to check, and telling a right one from a wrong one.
                    "form": self.get_form_class()(request, initial={"username": username}),
                    "throttled": f"Too many failed sign-ins; try again in {wait}.",
                },
                status=429,
            )
            response["Retry-After"] = str(settings.N17Q_SIGNIN_WINDOW_S)
            return response
        response = super().post(request, *args, **kwargs)
        if request.user.is_authenticated:  # signed in: this browser is now known for this account
            try:
                cache.delete(_key("pair", account, address))
            except Exception:
                log.warning("sign-in throttle: the cache is unavailable", exc_info=True)
            response.set_cookie(
                KNOWN_COOKIE,
                signing.dumps(account, salt=_SALT),
                max_age=365 * 24 * 3600,
                httponly=True,
                secure=request.is_secure(),
                samesite="Lax",
            )
        else:
            window = settings.N17Q_SIGNIN_WINDOW_S
            for key, _limit in limits:
                _bump(key, window)
            if known:  # still counted against the account, only not judged by it
                _bump(_key("account", account), window)
            # The failure itself is audited as `auth.sign_in_refused` (accounts/audit.py, Django's signal).
        return response

    @staticmethod
    def _known_browser(request: HttpRequest) -> str | None:
        value = request.COOKIES.get(KNOWN_COOKIE)
        if not value:
            return None
        try:
            return str(signing.loads(value, salt=_SALT, max_age=365 * 24 * 3600))
        except signing.BadSignature:
            return None
