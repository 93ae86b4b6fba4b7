"""One log line per request (`n17q.request`), with a request id a proxy or a client can follow.

With N17Q_LOG_FORMAT=json (the production default) every record is one JSON object per line, and the fields
given here (`method`, `path`, `status`, `duration_ms`, `user`, `request_id`) are keys of it, ready for a log
shipper to index. The id is the incoming X-Request-ID when it looks like one (a proxy's), else a new one; it
is sent back in the response's X-Request-ID.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from collections.abc import Callable
from typing import Any

log = logging.getLogger("n17q.request")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._:-]{8,128}$")


class RequestLogMiddleware:
    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        started = time.perf_counter()
        incoming = request.META.get("HTTP_X_REQUEST_ID", "")
        request_id = incoming if _REQUEST_ID.match(incoming) else uuid.uuid4().hex
        request.request_id = request_id
        response = self.get_response(request)
        response["X-Request-ID"] = request_id
        user = getattr(request, "user", None)
        log.info(
            "%s %s %s",
            request.method,
            request.path,
            response.status_code,
            extra={
                "method": request.method,
                "path": request.path,
                "status": response.status_code,
                "duration_ms": round((time.perf_counter() - started) * 1000, 1),
                "user": user.get_username() if user is not None and user.is_authenticated else "",
                "request_id": request_id,
            },
        )
        return response
