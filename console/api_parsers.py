"""The JSON parser every API operation that takes a JSON object uses (issue 36 review: one bound, not one per door).

DRF's own `JSONParser` hands the body to `json.load` whole: a body of `[[[[...` nested a few thousand deep raises
RecursionError, which DRF does not catch, so the client got a 500 (and a traceback in the log) instead of a 400; and
10 MB of `{},` builds millions of dicts before any view sees it. `BoundedJSONParser` reads at most the site's
DATA_UPLOAD_MAX_MEMORY_SIZE, counts the values on the bytes before parsing (n17q_engine.json_values, as the OTLP
receiver does), and turns a too-deep document into the same one-line ParseError (HTTP 400) as any malformed body.
It is REST_FRAMEWORK's default parser for JSON; views that take raw bytes (captures, run bundles) keep their own.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser

from n17q_engine.json_values import json_values_bound

# An API body is a launch, an answer, a few options: far below this, and far above anything a client needs.
MAX_JSON_VALUES = 100_000


class BoundedJSONParser(JSONParser):
    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> Any:
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE or 10 * 1024 * 1024
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise ParseError(f"JSON parse error - the body is larger than {limit} bytes")
        if json_values_bound(raw, MAX_JSON_VALUES) > MAX_JSON_VALUES:
            raise ParseError(f"JSON parse error - the body holds more than {MAX_JSON_VALUES} values")
        try:
            return json.loads(raw.decode("utf-8"), parse_constant=_no_constant)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None


def _no_constant(name: str) -> Any:
    """NaN and Infinity are not JSON (RFC 8259); Python's json would take them."""
    raise ValueError(f"{name} is not a JSON value")
