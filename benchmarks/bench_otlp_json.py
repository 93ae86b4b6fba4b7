"""Budget (issue 35): the OTLP receiver's peak memory at most 8 times the decompressed body, and its time per MB, on
the JSON door and hostile bodies, side by side with the ordinary case.

Each body is received in a fresh interpreter by the receiver's own steps (`otlp_receiver.wire`: `decompress`,
`split_request`, what `POST /v1/traces` runs before storing), with its peak RSS (VmHWM, reset once the body is read)
and wall time. Bodies:

- ordinary: 512 SDK spans (bench_otlp.make_spans, one exporter batch) as protobuf and as OTLP/JSON, uncompressed;
- large: 37 MB of OTLP/JSON (the issue's measurement: 501 MB and 13-23 s before), of SDK spans and of spans with 50
  small attributes each (the dict-heaviest shape), gzip;
- hostile: 8 MB of empty gzip members (44-49 s before), 3,000,000 empty spans (`{}`), 300 spans of 9,000 empty
  attributes: each answered (refused) with its status.
"""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.otlp_json import attribute_heavy_json, sdk_json

from .bench_otlp import make_spans
from .common import REPO, Config, row

NAME = "otlp_json"
MEMORY_BUDGET = 8.0
LARGE_BYTES = 37 * 1024 * 1024
TRACE = "5b8efff798038103d269b633813fc60c"

_RECEIVE = """
import json, sys, time
from otlp_receiver import wire

def peak_rss():
    with open('/proc/self/status') as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith('VmHWM:'))

body = open(sys.argv[1], 'rb').read()
encoding, content_encoding = sys.argv[2], sys.argv[3]
with open('/proc/self/clear_refs', 'w') as refs:
    refs.write('5')
before = peak_rss()
start = time.perf_counter()
decoded = None
try:
    raw = wire.decompress(body, content_encoding, max_bytes=64 * 1024 * 1024)
    decoded = len(raw)
    split = wire.split_request(raw, encoding)
    answer = {'status': 200, 'accepted': split.accepted, 'rejected': split.rejected}
except wire.WireError as exc:
    answer = {'status': exc.status, 'message': exc.message}
seconds = time.perf_counter() - start
print(json.dumps({**answer, 'decoded': decoded, 'sent': len(body), 'grew': peak_rss() - before, 'seconds': seconds}))
"""


def _receive(work: Path, name: str, body: bytes, encoding: str, content_encoding: str) -> dict[str, Any]:
    path = work / name
    path.write_bytes(body)
    done = subprocess.run(
        [sys.executable, "-c", _RECEIVE, str(path), encoding, content_encoding],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"receiving {name} failed: {done.stderr.strip()[-800:]}")
    path.unlink()
    return dict(json.loads(done.stdout))


def run(config: Config) -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    batch = make_spans(512, 100)
    per_span = len(sdk_json(batch)) / 512
    large_sdk = make_spans(int(LARGE_BYTES / per_span), 1000)
    empty_member = gzip.compress(b"", mtime=0)
    cases: list[tuple[str, bytes, str, str]] = [
        ("ordinary: 512 SDK spans, protobuf", encode_spans(batch).SerializeToString(), "protobuf", ""),
        ("ordinary: 512 SDK spans, OTLP/JSON", sdk_json(batch), "json", ""),
        ("large: SDK spans, OTLP/JSON, gzip", gzip.compress(sdk_json(large_sdk)), "json", "gzip"),
        (
            "large: 50 small attributes a span, OTLP/JSON, gzip",
            gzip.compress(attribute_heavy_json(LARGE_BYTES, TRACE)),
            "json",
            "gzip",
        ),
        ("hostile: 8 MB of empty gzip members", empty_member * (8 * 1024 * 1024 // len(empty_member)), "json", "gzip"),
        (
            "hostile: 3,000,000 empty spans, gzip",
            gzip.compress(b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + b",".join([b"{}"] * 3_000_000) + b"]}]}]}"),
            "json",
            "gzip",
        ),
        (
            "hostile: 300 spans of 9,000 empty attributes, gzip",
            gzip.compress(
                b'{"resourceSpans":[{"scopeSpans":[{"spans":['
                + b",".join([b'{"attributes":[' + b",".join([b"{}"] * 9_000) + b"]}"] * 300)
                + b"]}]}]}"
            ),
            "json",
            "gzip",
        ),
    ]
    del large_sdk
    rows: list[dict[str, Any]] = []
    details: dict[str, Any] = {"cases": {}}
    with tempfile.TemporaryDirectory(prefix="n17q-bench-otlp-json-") as tmp:
        for i, (what, body, encoding, content_encoding) in enumerate(cases):
            got = _receive(Path(tmp), f"body-{i}", body, encoding, content_encoding)
            details["cases"][what] = got
            decoded = got["decoded"] or got["sent"]
            ratio = got["grew"] / decoded
            answer = (
                f"200, {got['accepted']:,} spans"
                if got["status"] == 200
                else f"{got['status']} ({got['message'][:80]})"
            )
            rows.append(
                row(
                    f"OTLP receiver, {what}",
                    f"peak memory <= {MEMORY_BUDGET:g}x decoded",
                    f"{ratio:.1f}x ({got['grew'] / 2**20:.0f} MB for {decoded / 2**20:.1f} MB decoded, "
                    f"{got['sent'] / 2**20:.2f} MB sent); {got['seconds'] / (decoded / 2**20):.3f} s/MB "
                    f"({got['seconds']:.2f} s); {answer}",
                    ratio <= MEMORY_BUDGET,
                    config,
                )
            )
    return {"rows": rows, "details": details, "notes": []}
