"""A write that waited past SQLite's busy timeout answers 503 with Retry-After, never a 500 (issue 20).

On the embedded database one writer holds the write lock at a time, and an import holds it for its whole
transaction (all or nothing, DESIGN §3). Any other write that waits longer than the busy timeout (settings:
DATABASES OPTIONS timeout) fails with "database is locked": a capture, a review action, a replay's progress, a
sign-in's session row. That is not a bug of the request but a busy server, so it is answered as one:
503 Service Unavailable, `Retry-After: RETRY_AFTER_S`, one line saying why; JSON `{"error": …}` under /api/, a short
page elsewhere. Nothing was stored: the failed statement's transaction is rolled back by Django as for any error.

Three places catch it, because a lock can be hit at three depths of a request:
- in a DRF view: `console.openapi.exception_handler` calls `busy_api_response`;
- in any other view: `BusyMiddleware.process_exception`;
- in a middleware under this one (the session row saved in SessionMiddleware's response, the audit log's row):
  Django turns the exception into a 500 where it was raised; `got_request_exception` marks the request and
  `BusyMiddleware` replaces that 500 with the 503.
"""

from __future__ import annotations

import logging
import sqlite3
import sys
from collections.abc import Callable
from typing import Any

from django.core.signals import got_request_exception
from django.db import OperationalError
from django.http import HttpRequest, HttpResponse, JsonResponse

log = logging.getLogger(__name__)

RETRY_AFTER_S = 5
MESSAGE = (
    "the console's database is busy with another write (an import, most likely); nothing was stored, "
    f"try again in {RETRY_AFTER_S} s"
)
_LOCKED = ("database is locked", "database table is locked")
_MARK = "_n17q_database_busy"


def is_database_busy(exc: BaseException | None) -> bool:
    """Whether `exc` (or what it was raised from) is SQLite's "database is locked"."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, (OperationalError, sqlite3.OperationalError)) and any(
            text in str(exc).lower() for text in _LOCKED
        ):
            return True
        exc = exc.__cause__ or exc.__context__
        seen += 1
    return False


def _wants_json(request: HttpRequest | None) -> bool:
    if request is None:
        return False
    return request.path.startswith("/api/") or "application/json" in request.headers.get("Accept", "")


def busy_response(request: HttpRequest | None) -> HttpResponse:
    log.warning("database busy: %s %s answered 503", getattr(request, "method", ""), getattr(request, "path", ""))
    response: HttpResponse
    if _wants_json(request):
        response = JsonResponse({"error": MESSAGE}, status=503)
    else:
        response = HttpResponse(
            f"<!doctype html><title>Busy</title><h1>The console is busy</h1><p>{MESSAGE.capitalize()}.</p>",
            status=503,
            content_type="text/html; charset=utf-8",
        )
    response["Retry-After"] = str(RETRY_AFTER_S)
    return response


def busy_api_response() -> Any:
    """The DRF answer (a rest_framework Response, so that the API's renderers and headers apply)."""
    from rest_framework.response import Response

    log.warning("database busy: an API request answered 503")
    return Response({"error": MESSAGE}, status=503, headers={"Retry-After": str(RETRY_AFTER_S)})


def _mark_busy(sender: Any, request: HttpRequest | None = None, **kwargs: Any) -> None:
    if request is not None and is_database_busy(sys.exc_info()[1]):
        setattr(request, _MARK, True)


got_request_exception.connect(_mark_busy, dispatch_uid="n17q-console-busy")


class BusyMiddleware:
    """Place it above SessionMiddleware and every middleware that writes (settings.MIDDLEWARE)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if getattr(request, _MARK, False) and response.status_code >= 500:
            return busy_response(request)
        return response

    def process_exception(self, request: HttpRequest, exception: Exception) -> HttpResponse | None:
        if is_database_busy(exception):
            return busy_response(request)
        return None
