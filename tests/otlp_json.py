"""OTLP/JSON bodies the tests and benchmarks send: the real exporter's message as OTLP/JSON, and a dict-heavy shape.
Django-free, so a benchmark's parent process can import it."""

from __future__ import annotations

import base64
import json
from typing import Any

from google.protobuf import json_format
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans


def sdk_json(spans: Any, *, hex_ids: bool = True) -> bytes:
    """OTLP/JSON: the exporter's message through json_format, ids rewritten to hex as the OTLP spec writes them."""
    doc = json_format.MessageToDict(encode_spans(spans))
    if hex_ids:
        for rs in doc["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in span:
                            span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(doc).encode()


def attribute_heavy_json(target: int, trace: str) -> bytes:
    """OTLP/JSON of spans with 50 small attributes each (a dict-heavy shape: 14 times its size in memory before)."""
    attributes = ",".join(f'{{"key":"k{j}","value":{{"intValue":"{j}"}}}}' for j in range(50))
    spans, size, i = [], 0, 0
    while size < target:
        i += 1
        span = f'{{"traceId":"{trace}","spanId":"{i:016x}","name":"s","attributes":[{attributes}]}}'
        spans.append(span)
        size += len(span) + 1
    return ('{"resourceSpans":[{"scopeSpans":[{"spans":[' + ",".join(spans) + "]}]}]}").encode()
