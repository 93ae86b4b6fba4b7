"""Inspect logs are converted within bounds (issue 35, part C): members and samples are read one at a time, each
under a cap of its own, and the converting process runs under memory and CPU limits, so that no small file makes
it large or slow. Measured: a 61 KB `.eval` of one sample of 60 MB of `{}` took the converting process to 1.8 GB.

Peak memory is the converting process's own (ru_maxrss of the child, from a wrapper process that runs nothing else);
time only guards against a hang (generous subprocess timeouts), never asserted tightly.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from n17q_engine.formats import ConversionError
from n17q_engine.formats.inspect_log import convert_inspect_log
from tests.bounds.hostile import lie_about_size

ENGINE_ROOT = Path(__file__).resolve().parents[2]
HEADER = {"version": 2, "status": "success", "eval": {"task": "bomb", "model": "m"}}
# Runs the converting process and reports its peak RSS (KiB) on its last stdout line: the wrapper runs nothing else,
# so RUSAGE_CHILDREN is the converter's alone.
_MEASURE = (
    "import resource, subprocess, sys\n"
    "p = subprocess.run(sys.argv[1:], input=b'stored\\n' * 10000, capture_output=True, timeout=300)\n"
    "sys.stdout.write(p.stdout.decode('utf-8', 'replace'))\n"
    "sys.stdout.write('rc %d\\n' % p.returncode)\n"
    "sys.stdout.write('stderr %r\\n' % p.stderr[-400:])\n"
    "sys.stdout.write('peak %d\\n' % resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
)


def eval_log(samples: list[bytes], *, compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=compression, compresslevel=9) as zf:
        zf.writestr("header.json", json.dumps(HEADER))
        for i, sample in enumerate(samples):
            zf.writestr(f"samples/{i}_epoch_1.json", sample)
    return buf.getvalue()


def sample_of(sid: int, events: bytes, count: int) -> bytes:
    """A sample whose events list holds `count` copies of `events` (a JSON value): amplifies in memory."""
    return b'{"id": %d, "epoch": 1, "events": [' % sid + b",".join([events] * count) + b"]}"


def convert_in_child(tmp_path: Path, data: bytes, *options: str) -> tuple[list[dict], int, int, str]:
    """The converting process's lines, exit status and peak RSS (MiB), as the import door starts it."""
    source = tmp_path / "source"
    source.write_bytes(data)
    out = tmp_path / "runs"
    out.mkdir()
    worker = [sys.executable, "-m", "n17q_engine.formats.convert_worker", "inspect", str(source), str(out), *options]
    done = subprocess.run(
        [sys.executable, "-c", _MEASURE, *worker], cwd=ENGINE_ROOT, capture_output=True, timeout=600, check=True
    )
    lines = done.stdout.decode().splitlines()
    peak_mib = int(lines[-1].split()[1]) // 1024
    stderr = lines[-2]
    code = int(lines[-3].split()[1])
    return [json.loads(line) for line in lines[:-3]], code, peak_mib, stderr


def test_an_amplifying_eval_is_refused_in_one_line_and_the_converter_stays_small(tmp_path: Path) -> None:
    # 60 MB of `{}` deflates to about 60 KB; parsed whole it is 20 million dicts (1.8 GB measured before).
    data = eval_log([sample_of(0, b"{}", 20_000_000)])
    assert len(data) < 128 * 1024
    messages, code, peak_mib, stderr = convert_in_child(tmp_path, data)
    assert code == 3, (messages, stderr)
    (refusal,) = messages
    assert refusal["kind"] == "conversion"
    assert "samples/0_epoch_1.json" in refusal["error"] and "values" in refusal["error"]
    assert "Traceback" not in stderr
    assert peak_mib < 400, peak_mib


def test_the_samples_of_a_log_are_converted_one_at_a_time(tmp_path: Path) -> None:
    # Eight samples under every cap, each about 80 MB parsed: all eight held at once would be 640 MB.
    samples = [sample_of(i, b"{}", 1_000_000) for i in range(8)]
    messages, code, peak_mib, stderr = convert_in_child(tmp_path, eval_log(samples))
    assert code == 0, (messages, stderr)
    assert [m["run_id"] for m in messages[:-1]] == [f"inspect-bomb-{i}-e1" for i in range(8)]
    assert messages[0]["total"] == 8 and messages[-1] == {"done": True}
    assert peak_mib < 400, peak_mib


def test_a_converter_past_its_memory_limit_says_so_in_one_line(tmp_path: Path) -> None:
    # Under the value cap, over a 150 MiB address space: the limit, not the host, stops it.
    data = eval_log([sample_of(0, b'{"event": "model", "input": [{}, {}, {}]}', 400_000)])
    messages, code, peak_mib, stderr = convert_in_child(tmp_path, data, "--memory-mb", "150")
    assert code == 3, (messages, stderr)
    (refusal,) = messages
    assert "more memory than the 150 MiB" in refusal["error"], refusal
    assert "Traceback" not in stderr
    assert peak_mib < 200, peak_mib


def test_a_converter_past_its_cpu_limit_says_so_in_one_line(tmp_path: Path) -> None:
    # Each model event digests the whole message pool: quadratic work in a small file, stopped by the CPU limit
    # (or by the cap on pool messages one sample may resolve, whichever comes first).
    pool = b'{"role": "user", "content": "' + b"x" * 20 + b'"}'
    sample = (
        b'{"id": 0, "epoch": 1, "events_data": {"messages": ['
        + b",".join([pool] * 20_000)
        + b']}, "events": ['
        + b",".join([b'{"event": "model", "input_refs": [[0, 20000]]}'] * 20_000)
        + b"]}"
    )
    messages, code, _peak, stderr = convert_in_child(tmp_path, eval_log([sample]), "--cpu-seconds", "2")
    assert code == 3, (messages, stderr)
    (refusal,) = messages
    assert "CPU" in refusal["error"] or "messages" in refusal["error"], refusal
    assert "Traceback" not in stderr


@pytest.mark.parametrize("declared", [100, 50 << 20])
def test_a_deflate_member_that_lies_about_its_size_is_refused(declared: int) -> None:
    data = lie_about_size(eval_log([sample_of(0, b"{}", 4_000_000)]), "samples/0_epoch_1.json", declared)
    with pytest.raises(ConversionError) as caught:
        convert_inspect_log(data)
    message = str(caught.value)
    assert "\n" not in message and "samples/0_epoch_1.json" in message
    assert "corrupt" in message or "declares" in message, message


def test_a_sample_converting_to_too_many_events_is_refused() -> None:
    data = eval_log([sample_of(0, b'{"event": "score", "score": {}}', 300_000)])
    with pytest.raises(ConversionError) as caught:
        convert_inspect_log(data, max_run_events=100_000)
    assert "more than 100000 events" in str(caught.value)


def test_an_attachment_resolved_over_and_over_is_refused() -> None:
    # One 1 MiB attachment named by 2,000 tool events: 2 GB of events written from a 1 MiB file.
    attachment = "y" * (1 << 20)
    sample = {
        "id": 0,
        "epoch": 1,
        "attachments": {"a": attachment},
        "events": [{"event": "tool", "id": f"c{i}", "function": "f", "result": "attachment://a"} for i in range(2000)],
    }
    data = eval_log([json.dumps(sample).encode()])
    with pytest.raises(ConversionError) as caught:
        convert_inspect_log(data)
    assert "attachment" in str(caught.value) and "\n" not in str(caught.value)
