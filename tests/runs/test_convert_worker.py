"""A trace file is converted by a process of its own, ahead of the import (runs.import_formats,
n17q_engine.formats.convert_worker): all of its runs or none are stored whatever that process does, it is never more
than one run ahead, and it is always reaped. The traces come from the real OpenTelemetry SDK and its OTLP encoder.
"""

from __future__ import annotations

import json
import secrets
import string
import subprocess
import time
from pathlib import Path

import pytest
from django.core.files.storage import storages
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from n17q_engine.bundle import BlobEntry, BundleError, Manifest, verify_blobs
from runs import import_formats, secret_scan
from runs.models import Blob, Event, MaskedSecret, Run, RunBlob, blob_storage_name
from tests.bounds import hostile
from tests.otlp_json import sdk_json
from tests.runs.test_import_formats import import_run, refusal, stored_blob_files

pytestmark = pytest.mark.django_db


def _traces(tmp_path: Path, n: int, *, bad: int | None = None) -> Path:
    """`n` traces of an agent and three tool calls each, in one OTLP protobuf file; trace `bad` (1-based) names its
    run with an id no run may have."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "worker-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("n17q-tests")
    for k in range(1, n + 1):
        root = {"gen_ai.operation.name": "invoke_agent", **({"n17q.run.id": "has a/slash"} if k == bad else {})}
        with tracer.start_as_current_span(f"invoke_agent turn-{k}", attributes=root):
            for i in range(3):
                tool = {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "lookup",
                    "gen_ai.tool.call.id": str(i),
                }
                tracer.start_span("execute_tool lookup", attributes=tool).end()
    provider.shutdown()
    path = tmp_path / "traces.otlp"
    path.write_bytes(encode_spans(memory.get_finished_spans()).SerializeToString())
    return path


class _Recorded(subprocess.Popen):
    started: list[subprocess.Popen] = []

    def __init__(self, *args, **kwargs):
        self.args_env = dict(kwargs.get("env") or {})
        super().__init__(*args, **kwargs)
        _Recorded.started.append(self)


@pytest.fixture
def workers(monkeypatch) -> list[subprocess.Popen]:
    _Recorded.started = []
    monkeypatch.setattr(import_formats.subprocess, "Popen", _Recorded)
    return _Recorded.started


def test_every_trace_of_a_file_becomes_a_run_and_the_worker_is_reaped(tmp_path, workers):
    answer = import_run(_traces(tmp_path, 5))
    assert answer["conversion"]["runs"] == 5 and Run.objects.count() == 5
    [worker] = workers
    assert worker.returncode == 0  # reaped: it said everything and exited


def test_the_worker_never_runs_more_than_one_run_ahead_of_the_import(tmp_path, workers, monkeypatch):
    seen: list[int] = []
    real = import_formats._import_root

    def folders(root: Path) -> int:
        return sum(1 for p in root.parent.iterdir() if p.name.startswith("run-"))

    def wait_for(condition, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.02)

    def slow_import(root: Path, **kwargs):
        # A slow importer: wait (generously: a busy machine) until the worker has written the run after this one or
        # has finished, then give it a moment more to write a third, which it must not; count this run's folder and
        # those written beyond it.
        wait_for(lambda: folders(root) >= 2 or workers[0].poll() is not None, 120.0)
        wait_for(lambda: folders(root) >= 3, 0.3)
        seen.append(folders(root))
        return real(root, **kwargs)

    monkeypatch.setattr(import_formats, "_import_root", slow_import)
    import_run(_traces(tmp_path, 6))
    assert len(seen) == 6 and max(seen) == 2 and seen[-1] == 1, seen
    assert Run.objects.count() == 6


def test_a_conversion_error_in_trace_3_of_5_stores_nothing(tmp_path, workers):
    message = refusal(_traces(tmp_path, 5, bad=3))
    assert "n17q.run.id must be" in message
    assert Run.objects.count() == 0 and Blob.objects.count() == 0
    assert workers[0].returncode == 3


def test_a_worker_that_dies_mid_file_is_a_one_line_refusal_and_nothing_is_stored(tmp_path, workers, monkeypatch):
    real = import_formats._import_root
    calls = []

    def kill_after_first(root: Path, **kwargs):
        calls.append(root)
        if len(calls) == 2:
            workers[0].kill()  # out of memory, say, while it writes the next run
            workers[0].wait()
        return real(root, **kwargs)

    monkeypatch.setattr(import_formats, "_import_root", kill_after_first)
    message = refusal(_traces(tmp_path, 5))
    assert "the conversion stopped before the end of the file" in message and "nothing was imported" in message
    assert Run.objects.count() == 0 and Blob.objects.count() == 0
    assert workers[0].returncode is not None


def test_the_original_is_scanned_once_ahead_and_every_run_names_it_masked(tmp_path, workers, monkeypatch):
    token = "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "worker-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("n17q-tests")
    for k in range(3):
        with tracer.start_as_current_span(
            f"invoke_agent turn-{k}", attributes={"gen_ai.operation.name": "invoke_agent"}
        ):
            tracer.start_span("fetch", attributes={"app.secret": token if k == 0 else "nothing"}).end()
    provider.shutdown()
    path = tmp_path / "traces.otlp"
    path.write_bytes(encode_spans(memory.get_finished_spans()).SerializeToString())
    scans = []
    real = secret_scan._mask_blob_bytes
    monkeypatch.setattr(secret_scan, "_mask_blob_bytes", lambda raw, *a: scans.append(len(raw)) or real(raw, *a))

    answer = import_run(path)
    assert answer["conversion"]["runs"] == 3
    assert scans.count(path.stat().st_size) == 1  # the original: scanned once, for all three runs
    originals = set(RunBlob.objects.filter(role="source-otlp").values_list("blob__digest", flat=True))
    assert len(originals) == 1 and RunBlob.objects.filter(role="source-otlp").count() == 3
    [masked] = originals
    with storages["blobs"].open(blob_storage_name(masked), "rb") as fh:
        assert token[4:12].encode() not in fh.read()
    for run in Run.objects.all():
        assert all(e.body["otlp"]["blob"] == masked for e in Event.objects.filter(run=run) if "otlp" in e.body)
        assert MaskedSecret.objects.filter(run=run, place="blob", rule="github-pat").exists()


def test_bytes_the_store_holds_are_hashed_again_a_file_of_the_right_size_is_not_the_blob(tmp_path):
    # Issue 33: this used to pass unhashed (`held`), letting junk of the right size claim another run's blob.
    path = _traces(tmp_path, 1)
    import_run(path)
    [original] = RunBlob.objects.filter(role="source-otlp").values_list("blob__digest", flat=True)
    root = tmp_path / "bundle"
    (root / "blobs" / "sha256").mkdir(parents=True)
    held = root / "blobs" / "sha256" / original.removeprefix("sha256:")
    held.write_bytes(b"x" * path.stat().st_size)
    size = path.stat().st_size
    parsed = Manifest(run={}, blobs={original: BlobEntry(original, "application/x-protobuf", size, "r", "standard")})
    with pytest.raises(BundleError, match="bad digest"):
        verify_blobs(root, parsed)
    held.write_bytes(path.read_bytes())
    assert verify_blobs(root, parsed) == {original: held}


def test_the_worker_gets_no_secret_of_the_web_process(tmp_path, workers, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://user:hunter2@db/n17q")
    monkeypatch.setenv("N17Q_SECRET_KEY", "the-web-process-key")
    import_run(_traces(tmp_path, 1))
    [worker] = workers
    assert "DATABASE_URL" not in worker.args_env and "N17Q_SECRET_KEY" not in worker.args_env
    assert worker.args_env["PYTHONPATH"] == str(import_formats.ENGINE_ROOT)


def test_every_run_keeps_the_file_itself_as_its_original_linked_not_written_again(tmp_path, workers, monkeypatch):
    """The converting process links each run's original to the file it converts (one inode, however many traces),
    and the import reads it there: masked copies are written elsewhere, never through the link."""
    real = import_formats._import_root
    seen: list[tuple[int, int]] = []

    def look(root: Path, **kwargs):
        source = root.parent.parent / "source"
        [original] = [p for p in (root / "blobs" / "sha256").iterdir() if p.stat().st_size == source.stat().st_size]
        seen.append((original.stat().st_ino, source.stat().st_ino))
        return real(root, **kwargs)

    monkeypatch.setattr(import_formats, "_import_root", look)
    path = _traces(tmp_path, 4)
    answer = import_run(path)
    assert answer["conversion"]["runs"] == 4 and len(seen) == 4
    assert all(blob == source for blob, source in seen), seen


def test_an_otlp_json_file_past_the_attribute_cap_is_refused_in_one_line_and_nothing_is_stored(tmp_path, _blob_store):
    """Issue 35: one span of 10,001 attributes (the receiver's cap, MAX_ITEMS) is refused by the converting process
    and by the original's secret scan alike, before either builds it."""
    path = tmp_path / "spans.json"
    path.write_bytes(hostile.otlp_json_many_attributes(10_001))
    message = refusal(path)
    assert "resourceSpans[0].scopeSpans[0].spans[0] holds a list of more than 10000 items" in message
    assert Run.objects.count() == 0 and stored_blob_files(_blob_store) == set()


def test_an_otlp_json_original_is_scanned_a_span_at_a_time_and_kept_masked(tmp_path, workers, monkeypatch):
    """Issue 35: the JSON original is scanned by the engine's bounded reader (gate.mask_otlp_json), not read whole
    by the storage gate's JSON masking; what it finds is masked in the kept original as before."""
    token = "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "worker-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("n17q-tests")
    with tracer.start_as_current_span("invoke_agent turn", attributes={"gen_ai.operation.name": "invoke_agent"}):
        for k in range(3):
            tracer.start_span("fetch", attributes={"app.note": f"sent {token}" if k == 1 else "nothing"}).end()
    provider.shutdown()
    path = tmp_path / "traces.json"
    path.write_bytes(sdk_json(memory.get_finished_spans()))
    whole = []
    real = secret_scan._mask_blob_bytes
    monkeypatch.setattr(secret_scan, "_mask_blob_bytes", lambda raw, *a: whole.append(len(raw)) or real(raw, *a))

    import_run(path)
    assert path.stat().st_size not in whole  # the original: never read whole
    [original] = RunBlob.objects.filter(role="source-otlp").values_list("blob__digest", flat=True)
    with storages["blobs"].open(blob_storage_name(original), "rb") as fh:
        kept = fh.read()
    assert token[4:12].encode() not in kept and json.loads(kept)["resourceSpans"]
    [found] = MaskedSecret.objects.filter(place="blob", rule="github-pat", path__contains=original)
    assert found.path.endswith(".resourceSpans[0].scopeSpans[0].spans[1].attributes[0].value.stringValue")
