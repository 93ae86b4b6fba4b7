"""The demo's staged recordings (`load_demo`), so that the review queue tells seed 000's story.

- The status lookup the recorded research run made (req-7781, not found), captured with its Authorization
  header: intake redacts the header, the scanner finds nothing else, and a reviewer who did not capture it can
  approve it, which mints `docs-research@2`. A replay of `run-000-recorded` against that version gets past
  the status lookup that stopped it under `@1`.
- A docs search captured gzip-compressed, with a session cookie, a signed download link and a token left in
  a debug field: three redactions by place and one scanner finding that blocks approval until a reviewer
  redacts the field.

The "leaked" token is derived at run time, never written in the repository.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
from typing import Any

from n17q_engine.vocabulary import CAPTURE_FORMAT


def _fake(prefix: str, label: str, length: int) -> str:
    return prefix + hashlib.sha256(f"n17q-demo:{label}".encode()).hexdigest()[:length]


def demo_captures() -> list[dict[str, Any]]:
    status = {
        "format": CAPTURE_FORMAT,
        "scenario": "docs-research",
        "tool": "status.lookup",
        "contract_revision": 2,
        "connection": "status-service",
        "captured_at": "2026-07-01T09:00:05Z",
        "source_revision": "status@118",
        "effect_class": "read",
        "request": {
            "method": "GET",
            "url": "https://status.acme.example/api/requests/req-7781",
            "headers": {"Accept": "application/json", "Authorization": "Bearer " + _fake("", "status-bearer", 40)},
            "body": None,
            "args": {"request_id": "req-7781"},
        },
        "response": {
            "status": 404,
            "headers": {"Content-Type": "application/json"},
            "body": {"request_id": "req-7781", "status": "not_found", "consistency_window_s": 30},
        },
        "proposed_transition": None,
        "world_revision": 0,
    }
    hits = {
        "hits": [
            {
                "title": "Rotating signing keys",
                "url": "https://docs.acme.example/keys/rotate",
                "revision": "2026-06-28",
                "pdf": "https://files.acme.example/keys.pdf?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Signature="
                + _fake("", "pdf-signature", 64),
            }
        ],
        "debug": {"trace": "served by docs-api-3", "upstream_key": _fake("ghp_", "debug-token", 36)},
    }
    search = {
        "format": CAPTURE_FORMAT,
        "scenario": "docs-research",
        "tool": "docs.search",
        "contract_revision": 1,
        "connection": "docs-api",
        "captured_at": "2026-07-01T09:00:02Z",
        "source_revision": "docs@2026-06-28",
        "effect_class": "read",
        "request": {
            "method": "GET",
            "url": "https://docs.acme.example/api/search?q=rotate+signing+keys&limit=5",
            "headers": {"Accept": "application/json", "X-Api-Key": _fake("", "docs-api-key", 32)},
            "body": None,
            "args": {"query": "rotate signing keys", "corpus": "public-docs", "limit": 5},
        },
        "response": {
            "status": 200,
            "headers": {
                "Content-Type": "application/json",
                "Content-Encoding": "gzip",
                "Set-Cookie": "session=" + _fake("", "docs-session", 32) + "; HttpOnly",
            },
            "body": {"encoding": "gzip+base64", "data": _gzip_b64(json.dumps(hits).encode("utf-8"))},
        },
        "proposed_transition": None,
        "world_revision": 0,
    }
    return [status, search]


def _gzip_b64(data: bytes) -> str:
    return base64.b64encode(gzip.compress(data, mtime=0)).decode("ascii")


# The connections the demo's captures come through, as an admin registers them and a reviewer approves them
# (`load_demo`): reads of the status service and the docs search, on the live services, one account each. The mail
# provider is registered too, reaching the live world and allowed reads only: the demo's refused capture is a
# send recorded through it (seed 000, "Record mode needed its own fail-closed edges").
DEMO_CONNECTIONS: list[dict[str, Any]] = [
    {
        "name": "status-service",
        "description": "The request-status API the research agent polls (read only).",
        "reaches": "live",
        "source_classes": ["status-api"],
        "capabilities": ["read"],
        "account_scopes": ["acme-research"],
        "capture_result_classes": ["public", "internal"],
        "default_result_class": "internal",
    },
    {
        "name": "docs-api",
        "description": "The documentation search the research agent uses (read only).",
        "reaches": "live",
        "source_classes": ["public-docs"],
        "capabilities": ["read"],
        "account_scopes": ["acme-research"],
        "capture_result_classes": ["public", "internal"],
        "default_result_class": "public",
    },
    {
        "name": "mail-provider",
        "description": "The outbound mail provider of seed 001 (live): record mode may read delivery status only.",
        "reaches": "live",
        "source_classes": ["mail-api"],
        "capabilities": ["read"],
        "account_scopes": ["acme-support"],
        "capture_result_classes": ["internal"],
        "default_result_class": "internal",
    },
]


def demo_refused_captures() -> list[dict[str, Any]]:
    """Captures the record policy refuses or keeps only as an observation (`load_demo` submits each once):

    - seed 001's follow-up email, sent again while recording through the live mail provider: a live mutation,
      refused, its safe request observation and an audit entry kept;
    - a status lookup whose response was lost after the read happened (the capture failed): only the request
      observation is kept, and no fixture results.
    """
    send = {
        "format": CAPTURE_FORMAT,
        "scenario": "support-followup",
        "tool": "mail.send",
        "contract_revision": 1,
        "connection": "mail-provider",
        "captured_at": "2026-07-02T10:15:00Z",
        "source_revision": None,
        "effect_class": "mutation",
        "request": {
            "method": "POST",
            "url": "https://mail.acme.example/v1/messages",
            "headers": {"Content-Type": "application/json"},
            "body": {"to": "customer@example.org", "template": "follow-up"},
            "args": {"to": "customer@example.org", "template": "follow-up"},
        },
        "response": {"status": 202, "headers": {}, "body": {"message_id": "msg-demo-1"}},
        "proposed_transition": {
            "resource": "mailbox:customer@example.org",
            "revision_before": 3,
            "revision_after": 4,
            "change": {"delivered": ["follow-up"]},
        },
        "world_revision": 3,
    }
    lost = {
        "format": CAPTURE_FORMAT,
        "scenario": "docs-research",
        "tool": "status.lookup",
        "contract_revision": 2,
        "connection": "status-service",
        "captured_at": "2026-07-01T09:05:00Z",
        "source_revision": "status@118",
        "effect_class": "read",
        "request": {
            "method": "GET",
            "url": "https://status.acme.example/api/requests/req-7790",
            "headers": {"Accept": "application/json"},
            "body": None,
            "args": {"request_id": "req-7790"},
        },
        "response": None,
        "capture_failure": "the response stream was reset after the status service answered",
        "proposed_transition": None,
        "world_revision": 0,
    }
    return [send, lost]
