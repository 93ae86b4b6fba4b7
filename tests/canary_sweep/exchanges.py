"""The canaries as an HTTP exchange carries them, for the doors that take exchanges (capture, HAR, VCR).

Each shape sits where a real exchange puts such a thing: the URL credential in the request URL's userinfo, the JWT
in the Authorization header, the password as a multipart form field, the fragment token in a redirect's Location
header, the provider tokens and the private key in the response body (the tokens in prose, ending at punctuation).
"""

from __future__ import annotations

import json
from typing import Any

from tests.fixtures_review.conftest import status_capture

from .canaries import Canaries

BOUNDARY = "n17qcanaryboundary"


def request_url(c: Canaries) -> str:
    return f"https://svc:{c.url_password.value}@status.example/api/requests/req-7781?verbose=1"


def multipart(c: Canaries) -> str:
    return (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="username"\r\n\r\nops\r\n'
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="password"\r\n\r\n{c.password.value}\r\n'
        f"--{BOUNDARY}--\r\n"
    )


def request_headers(c: Canaries) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {c.jwt.value}",
        "Content-Type": f"multipart/form-data; boundary={BOUNDARY}",
    }


def response_body(c: Canaries) -> dict[str, Any]:
    return {
        "state": "moved",
        "log": c.prose(),
        "aws": {"aws_access_key_id": c.aws_key_id.value, "aws_secret_access_key": c.aws_secret.value},
        "private_key": c.private_key.value,
    }


def response_headers(c: Canaries) -> dict[str, str]:
    return {"Location": c.callback_url(), "Content-Type": "application/json"}


def capture(c: Canaries) -> dict[str, Any]:
    """An `n17q.capture/1` document (seed 000's status lookup) with every canary in it."""
    return status_capture(
        request={
            "method": "POST",
            "url": request_url(c),
            "headers": request_headers(c),
            "body": multipart(c),
            "args": {"request_id": "req-7781"},
        },
        response={"status": 302, "headers": response_headers(c), "body": response_body(c)},
    )


def har(c: Canaries) -> dict[str, Any]:
    """A HAR 1.2 file of one exchange, as a browser's developer tools save it."""

    def pairs(headers: dict[str, str]) -> list[dict[str, str]]:
        return [{"name": k, "value": v} for k, v in headers.items()]

    body = json.dumps(response_body(c))
    return {
        "log": {
            "version": "1.2",
            "creator": {"name": "WebInspector", "version": "537.36"},
            "entries": [
                {
                    "startedDateTime": "2026-07-01T09:00:05.000Z",
                    "time": 12.5,
                    "request": {
                        "method": "POST",
                        "url": request_url(c),
                        "httpVersion": "HTTP/1.1",
                        "headers": pairs(request_headers(c)),
                        "queryString": [{"name": "verbose", "value": "1"}],
                        "cookies": [],
                        "headersSize": -1,
                        "bodySize": len(multipart(c)),
                        "postData": {
                            "mimeType": f"multipart/form-data; boundary={BOUNDARY}",
                            "text": multipart(c),
                            "params": [
                                {"name": "username", "value": "ops"},
                                {"name": "password", "value": c.password.value},
                            ],
                        },
                    },
                    "response": {
                        "status": 302,
                        "statusText": "Found",
                        "httpVersion": "HTTP/1.1",
                        "headers": pairs(response_headers(c)),
                        "cookies": [],
                        "content": {"size": len(body), "mimeType": "application/json", "text": body},
                        "redirectURL": c.callback_url(),
                        "headersSize": -1,
                        "bodySize": len(body),
                    },
                    "cache": {},
                    "timings": {"send": 0.1, "wait": 12.0, "receive": 0.4},
                }
            ],
        }
    }
