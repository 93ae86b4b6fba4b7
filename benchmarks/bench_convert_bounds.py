"""What the Inspect, HAR and VCR doors cost per byte, ordinary files beside hostile ones (issue 35, part C).

No budget of DESIGN §9 is judged here: the rows report, per door, the peak memory as a ratio to the file's size
(and to what it unpacks or decodes to), and the time per MB, so that an amplification shows as a ratio far from
the ordinary file's. Every case runs in a fresh process:

- `.eval` (and its conversion): the converting process itself (`n17q_engine.formats.convert_worker`, with the
  import door's limits), started by a wrapper that runs nothing else, so the wrapper's RUSAGE_CHILDREN is its peak
  RSS; the baseline is the same process converting a one-sample log of a few KB.
- HAR and VCR: `fixtures_review.recordings.load` and `convert` (what the capture door and API run before intake),
  in a child that has read the file; peak is its VmHWM after, minus its VmHWM before (the file already in memory).

Cases: an ordinary `.eval` (twenty samples of model, tool and score events), HAR (500 entries, the most one file
may stage) and YAML cassette (JSON bodies);
hostile ones: 60 MB of `{}` in one `.eval` member (61 KB deflated), eight samples of a million `{}` each (admitted,
converted one at a time), a HAR of three million `{}` entries, twenty 32 KB gzip bodies of 32 MiB each, a YAML
cassette of a million small lines.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from .common import REPO, Config, child_env, row

NAME = "convert_bounds"
MB = 1024 * 1024
HEADER = {"version": 2, "status": "success", "eval": {"task": "bench", "model": "m", "eval_id": "e1"}}

_MEASURE_WORKER = (
    "import resource, subprocess, sys, time\n"
    "t = time.perf_counter()\n"
    "p = subprocess.run(sys.argv[1:], input=b'stored\\n' * 100000, capture_output=True)\n"
    "wall = time.perf_counter() - t\n"
    "last = p.stdout.decode('utf-8', 'replace').strip().splitlines()[-1:]\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, wall, p.returncode, (last or [''])[0][:160])\n"
)

_MEASURE_RECORDING = """
import json, sys, time
import django
django.setup()
from fixtures_review.recordings import RecordingError, convert, load

def hwm():
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    return 0

raw = open(sys.argv[1], "rb").read()
before = hwm()
fields = {"scenario": "docs-research", "tool": "status.lookup", "contract_revision": 2, "effect_class": "read"}
t = time.perf_counter()
try:
    source = load(raw)
    converted = convert(source, fields=fields, captured_at="2026-01-01T00:00:00Z")
    said = f"staged {len(converted.recordings)}"
except RecordingError as exc:
    said = "refused: " + str(exc)[:140]
wall = time.perf_counter() - t
print(json.dumps({"before_kib": before, "after_kib": hwm(), "wall": wall, "said": said}))
"""


def _eval(samples: list[bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=6) as zf:
        zf.writestr("header.json", json.dumps(HEADER))
        for i, sample in enumerate(samples):
            zf.writestr(f"samples/{i}_epoch_1.json", sample)
    return buf.getvalue()


def _ordinary_sample(i: int, steps: int) -> bytes:
    events: list[dict[str, Any]] = [{"event": "sample_init", "timestamp": "2026-01-01T00:00:00+00:00"}]
    for k in range(steps):
        at = f"2026-01-01T00:{k // 60 % 60:02d}:{k % 60:02d}+00:00"
        events.append(
            {
                "event": "model",
                "timestamp": at,
                "model": "m",
                "input": [{"role": "user", "content": f"step {k}: read the file and say what it does " * 4}],
                "output": {
                    "choices": [
                        {
                            "message": {
                                "role": "assistant",
                                "content": f"I will read file_{k}.py",
                                "tool_calls": [{"id": f"c{k}", "function": "read", "arguments": {"path": f"f{k}"}}],
                            },
                            "stop_reason": "tool_calls",
                        }
                    ],
                    "usage": {"input_tokens": 500, "output_tokens": 40, "total_tokens": 540},
                },
            }
        )
        events.append(
            {
                "event": "tool",
                "timestamp": at,
                "completed": at,
                "id": f"c{k}",
                "function": "read",
                "arguments": {"path": f"f{k}"},
                "result": "def f():\n    return 1\n" * 20,
            }
        )
    events.append({"event": "score", "timestamp": "2026-01-01T01:00:00+00:00", "score": {"value": "C"}})
    return json.dumps({"id": i, "epoch": 1, "events": events}).encode()


def _amplifying(i: int, count: int) -> bytes:
    return b'{"id": %d, "epoch": 1, "events": [' % i + b",".join([b"{}"] * count) + b"]}"


def _unpacked(data: bytes) -> int:
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        return sum(i.file_size for i in zf.infolist())


def _har(entries: list[dict[str, Any]] | str) -> bytes:
    listed = entries if isinstance(entries, str) else json.dumps(entries)
    return b'{"log": {"version": "1.2", "creator": {"name": "x"}, "entries": ' + listed.encode() + b"}}"


def _har_entry(i: int, body: bytes, *, gz: bool = False) -> dict[str, Any]:
    headers = [{"name": "Content-Type", "value": "application/json"}]
    if gz:
        headers.append({"name": "Content-Encoding", "value": "gzip"})
    content = {"text": base64.b64encode(body).decode(), "encoding": "base64"} if gz else {"text": body.decode("utf-8")}
    return {
        "startedDateTime": "2026-01-01T00:00:00Z",
        "request": {"method": "GET", "url": f"http://status.example/items/{i}?page=2", "headers": []},
        "response": {"status": 200, "headers": headers, "content": content},
    }


def _json_body(i: int) -> bytes:
    return json.dumps({"items": [{"id": f"{i}-{k}", "title": f"item {k}", "score": k / 7} for k in range(30)]}).encode()


def _yaml_cassette(interactions: int) -> bytes:
    parts = ["interactions:\n"]
    for i in range(interactions):
        body = _json_body(i).decode().replace("'", "''")
        parts.append(
            f"- request: {{method: GET, uri: 'http://status.example/items/{i}', body: null, headers: {{}}}}\n"
            "  response:\n"
            "    status: {code: 200, message: OK}\n"
            "    headers: {Content-Type: [application/json]}\n"
            f"    body: {{string: '{body}'}}\n"
        )
    return "".join(parts).encode()


def _run_worker(source: Path, out: Path) -> tuple[int, float, int, str]:
    out.mkdir()
    worker = [sys.executable, "-m", "n17q_engine.formats.convert_worker", "inspect", str(source), str(out)]
    worker += ["--memory-mb", "2048", "--cpu-seconds", "300"]
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE_WORKER, *worker], cwd=REPO, capture_output=True, timeout=900, check=True
    )
    peak_kib, wall, code, last = done.stdout.decode().split(" ", 3)
    return int(peak_kib), float(wall), int(code), last.strip()


def _ratio(peak_mib: float, size: int) -> str:
    return f"{peak_mib / (size / MB):.1f}x" if size else "-"


def run(config: Config) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    details: dict[str, Any] = {"eval": {}, "recordings": {}}
    with tempfile.TemporaryDirectory(prefix="n17q-bench-bounds-") as tmp_name:
        tmp = Path(tmp_name)
        baseline_src = tmp / "baseline.eval"
        baseline_src.write_bytes(_eval([_ordinary_sample(0, 2)]))
        base_kib, _w, _c, _l = _run_worker(baseline_src, tmp / "baseline-out")
        details["eval"]["baseline_peak_mib"] = base_kib / 1024
        evals = {
            ".eval ordinary (20 samples x 400 steps)": _eval([_ordinary_sample(i, 400) for i in range(20)]),
            ".eval hostile: one member of 60 MB of {} (refused)": _eval([_amplifying(0, 20_000_000)]),
            ".eval hostile: 8 samples of 1M {} each (admitted)": _eval([_amplifying(i, 1_000_000) for i in range(8)]),
        }
        for n, (what, data) in enumerate(evals.items()):
            source = tmp / f"e{n}.eval"
            source.write_bytes(data)
            peak_kib, wall, code, last = _run_worker(source, tmp / f"e{n}-out")
            unpacked = _unpacked(data)
            own_mib = (peak_kib - base_kib) / 1024
            measured = (
                f"file {len(data) / MB:.2f} MB, unpacked {unpacked / MB:.1f} MB; converter peak {peak_kib / 1024:.0f} "
                f"MB ({own_mib:.0f} MB over an idle one's {base_kib / 1024:.0f}) = {_ratio(own_mib, unpacked)} "
                f"unpacked, {_ratio(own_mib, len(data))} file; {wall / max(unpacked / MB, 0.001):.3f} s per MB "
                f"unpacked ({wall:.2f} s); exit {code}"
            )
            rows.append(row(what, "report only", measured, None, config))
            details["eval"][what] = {
                "file_bytes": len(data),
                "unpacked_bytes": unpacked,
                "peak_kib": peak_kib,
                "wall_s": wall,
                "exit": code,
                "last_line": last,
            }
        bomb = gzip.compress(b"0" * (32 * MB - 1024), compresslevel=9)
        recs = {
            "HAR ordinary (500 entries, JSON bodies)": _har([_har_entry(i, _json_body(i)) for i in range(500)]),
            "HAR hostile: 3M {} entries (refused)": _har("[" + ",".join(["{}"] * 3_000_000) + "]"),
            "HAR hostile: 20 gzip bodies of 32 MiB (refused)": _har([_har_entry(i, bomb, gz=True) for i in range(20)]),
            "VCR YAML ordinary (500 interactions)": _yaml_cassette(500),
            "VCR YAML hostile: 1M lines of small mappings (refused)": b"interactions:\n"
            + b"- {a: [], b: [], c: []}\n" * 1_000_000,
        }
        data_dir = tmp / "data"
        data_dir.mkdir()
        env = child_env(data_dir, None)
        for n, (what, data) in enumerate(recs.items()):
            source = tmp / f"r{n}"
            source.write_bytes(data)
            done = subprocess.run(
                [sys.executable, "-c", _MEASURE_RECORDING, str(source)],
                cwd=REPO,
                capture_output=True,
                timeout=900,
                env={**env, "PYTHONPATH": str(REPO)},
            )
            if done.returncode != 0:
                raise RuntimeError(f"{what}: {done.stderr.decode()[-500:]}")
            got = json.loads(done.stdout.decode().strip().splitlines()[-1])
            own_mib = (got["after_kib"] - got["before_kib"]) / 1024
            measured = (
                f"file {len(data) / MB:.2f} MB; peak {own_mib:.0f} MB over the read file = "
                f"{_ratio(own_mib, len(data))} file; {got['wall'] / (len(data) / MB):.3f} s per MB "
                f"({got['wall']:.2f} s); {got['said'][:90]}"
            )
            rows.append(row(what, "report only", measured, None, config))
            details["recordings"][what] = {"file_bytes": len(data), **got}
    notes = [f"cpus usable: {len(os.sched_getaffinity(0))}", f"measured at {time.strftime('%Y-%m-%d %H:%M:%S')}"]
    return {"rows": rows, "details": details, "notes": notes}
