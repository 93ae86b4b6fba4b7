"""The import doors recognise files by content (issue 17, point 3): `import_run`, `POST /api/v1/runs/` and the import
page take an OTLP trace file (JSON or protobuf, one run per trace) and an Inspect AI log (`.eval`, `.json`, one run
per sample and epoch) besides bundles, import all of a file's runs or none, and name anything else for what it is.

The files come from the real producers: the OpenTelemetry SDK's own OTLP encoder, a real Inspect eval
(tests/engine/inspect_producer.py, in a child process), vcrpy recording against a loopback server.
"""

from __future__ import annotations

import base64
import gzip
import io
import json
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.conf import settings
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse
from google.protobuf import json_format

from accounts.models import AuditEntry, HarnessToken
from n17q_engine.bundle import BundleError
from n17q_engine.formats.inspect_log import convert_inspect_log
from n17q_engine.formats.sniff import describe
from n17q_engine.identifiers import INSPECT_MAKER
from runs.import_formats import import_converted
from runs.models import Blob, Event, Run
from tests import bundles
from tests.engine.inspect_logs import produce_once
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def inspect_logs(tmp_path_factory) -> dict[str, Path]:
    return produce_once(tmp_path_factory)


def import_run(path: Path) -> dict:
    out = io.StringIO()
    call_command("import_run", str(path), "--json", stdout=out)
    return json.loads(out.getvalue())


def refusal(path: Path) -> str:
    with pytest.raises(CommandError) as caught:
        import_run(path)
    message = str(caught.value)
    assert "\n" not in message
    return message


def stored_blob_files(store: Path) -> set[str]:
    return {str(p.relative_to(store)) for p in store.rglob("*") if p.is_file()} if store.exists() else set()


# ------------------------------------------------------------------------------------------------ Inspect AI logs


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_import_run_takes_an_inspect_log_as_one_run_per_sample_and_epoch(inspect_logs, fmt):
    answer = import_run(inspect_logs[fmt])
    assert len(answer["runs"]) == 4 and Run.objects.count() == 4
    assert answer["conversion"]["format"].startswith("inspect") and answer["conversion"]["runs"] == 4
    assert answer["conversion"]["mapped"] and isinstance(answer["conversion"]["unmapped"], dict)
    # DESIGN §8's keys are there, for the first run, exactly as a bundle's answer has them.
    first = answer["runs"][0]
    assert {k: answer[k] for k in ("run", "events", "findings", "masked_secrets")} == {
        k: first[k] for k in ("run", "events", "findings", "masked_secrets")
    }
    for one in answer["runs"]:
        run = Run.objects.get(run_id=one["run"])
        assert run.event_count == one["events"] == Event.objects.filter(run=run).count()
        assert "tool.call" in run.kind_counts and "model.proposal" in run.kind_counts
        # The original log is kept as a blob of every run.
        assert run.blobs.filter(blob__size=inspect_logs[fmt].stat().st_size).exists()


def test_a_file_of_several_runs_imports_all_or_none_and_leaves_no_blob(inspect_logs, _blob_store):
    data = inspect_logs["eval"].read_bytes()
    converted = convert_inspect_log(data)
    # The last of the file's runs is already here: the file must be refused after writing the others, and undo them.
    import_converted([converted[-1]], user=None, label="test", made_by=INSPECT_MAKER)
    files, blobs = stored_blob_files(_blob_store), Blob.objects.count()
    message = refusal(inspect_logs["eval"])
    assert f"run {len(converted)} of {len(converted)}" in message and "already imported" in message
    assert Run.objects.count() == 1
    assert stored_blob_files(_blob_store) == files and Blob.objects.count() == blobs
    assert AuditEntry.objects.filter(action="run.import_refused").exists()


def test_the_api_takes_an_inspect_log_and_answers_what_it_mapped(client, role_user, inspect_logs):
    key = token_for(role_user("operator"), HarnessToken.Scope.IMPORT_RUNS)
    with open(inspect_logs["json"], "rb") as fh:
        response = client.post(reverse("api-runs"), {"bundle": fh}, HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 201, response.content[:300]
    body = response.json()
    assert {"run", "events", "findings", "masked_secrets", "runs", "conversion"} <= set(body)
    assert len(body["runs"]) == 4 and set(body["conversion"]) >= {"format", "mapped", "unmapped", "notes"}
    assert Run.objects.count() == 4


def test_the_import_page_takes_an_eval_log(client, role_user, inspect_logs):
    client.force_login(role_user("operator"))
    with open(inspect_logs["eval"], "rb") as fh:
        response = client.post(reverse("runs:run-import"), {"bundle": fh}, follow=True)
    assert response.status_code == 200 and Run.objects.count() == 4
    assert "and 3 more runs from the same file" in response.content.decode()


def test_a_truncated_eval_log_is_refused_in_one_line(inspect_logs, tmp_path, _blob_store):
    cut = tmp_path / "cut.eval"
    cut.write_bytes(inspect_logs["eval"].read_bytes()[:3000])
    assert refusal(cut)
    assert Run.objects.count() == 0 and stored_blob_files(_blob_store) == set()


# ------------------------------------------------------------------------------------------------ OTLP files


def otlp_request(traces: int = 2):
    """What the OTLP exporter would send for `traces` agent turns: the SDK's own encoding of its spans."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from tests.otlp_receiver.conftest import agent_turn

    provider = TracerProvider(resource=Resource.create({"service.name": "support-agent"}))
    memory = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for _ in range(traces):
        agent_turn(provider.get_tracer("n17q-tests"))
    provider.shutdown()
    return encode_spans(memory.get_finished_spans())


def otlp_json(request) -> bytes:
    """OTLP JSON as the Collector's file exporter writes it: proto3 JSON with hex ids."""
    value = json_format.MessageToDict(request)
    for rs in value["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    return json.dumps(value).encode()


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_import_run_takes_an_otlp_file_as_one_run_per_trace(tmp_path, encoding):
    request = otlp_request(traces=2)
    path = tmp_path / "spans.bin"  # the name says nothing: the content does
    path.write_bytes(request.SerializeToString() if encoding == "protobuf" else otlp_json(request))
    answer = import_run(path)
    assert len(answer["runs"]) == 2 and Run.objects.count() == 2
    assert "otlp" in answer["conversion"]["format"].lower()
    for one in answer["runs"]:
        run = Run.objects.get(run_id=one["run"])
        assert run.kind_counts.get("tool.call") == 1 and run.kind_counts.get("tool.result") == 1, run.kind_counts


def test_a_truncated_otlp_protobuf_file_is_refused_in_one_line(tmp_path, _blob_store):
    data = otlp_request(traces=1).SerializeToString()
    path = tmp_path / "cut.pb"
    path.write_bytes(data[: len(data) // 2])
    assert refusal(path)
    assert Run.objects.count() == 0 and stored_blob_files(_blob_store) == set()


# -------------------------------------------------------------------------------------------- unrecognised files


class _Service(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"order": self.path.rsplit("/", 1)[-1], "status": "shipped"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def service():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Service)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def cassette(path: Path, base: str, serializer: str) -> Path:
    """A real cassette: vcrpy recording urllib's request to the loopback service."""
    import urllib.request

    import vcr

    with vcr.use_cassette(str(path), serializer=serializer, record_mode="all"):
        urllib.request.urlopen(f"{base}/orders/A-1", timeout=10).read()
    return path


def zip_of(**members: str) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, text in members.items():
            zf.writestr(name, text)
    return buf.getvalue()


UNRECOGNISED = {
    "zip": (
        zip_of(**{"notes.txt": "hi", "data/run.json": "{}"}),
        "a zip archive without manifest.json (members: notes.txt, data/run.json)",
    ),
    "gzip": (gzip.compress(b"just some words\n"), "a gzip file (text (1 line) inside)"),
    "pdf": (b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj\n<<>>\nendobj\n", "a PDF document"),
    "har": (
        json.dumps({"log": {"version": "1.2", "creator": {"name": "WebInspector"}, "entries": [{}, {}]}}).encode(),
        "a HAR file (2 entries): import it with `capture`",
    ),
    "json": (
        json.dumps({"name": "x", "items": [1, 2], "ok": True}).encode(),
        "a JSON document with keys name, items, ok",
    ),
    "empty": (b"", "an empty file"),
    "text": (b"hello\nworld\n", "text (2 lines)"),
}


@pytest.mark.parametrize("kind", sorted(UNRECOGNISED))
def test_an_unrecognised_file_is_named_for_what_it_looks_like(kind, tmp_path, client, role_user, _blob_store):
    data, named = UNRECOGNISED[kind]
    path = tmp_path / "run.zip"  # a misleading name: only the content counts
    path.write_bytes(data)
    message = refusal(path)
    assert message == f"not a bundle archive, an OTLP trace file or an Inspect log: this is {named}"
    client.force_login(role_user("operator"))
    response = client.post(reverse("api-runs"), {"bundle": io.BytesIO(data) if data else _named_empty()})
    if data:
        assert response.status_code == 400 and response.json() == {"error": message}
    assert Run.objects.count() == 0 and stored_blob_files(_blob_store) == set()


def _named_empty():
    f = io.BytesIO(b"")
    f.name = "empty.json"
    return f


@pytest.mark.parametrize(
    ("serializer", "named"), [("yaml", "a VCR.py cassette (YAML)"), ("json", "a VCR.py cassette (1 interaction)")]
)
def test_a_vcr_cassette_is_sent_to_capture(service, tmp_path, serializer, named):
    path = cassette(tmp_path / f"cassette.{serializer}", service, serializer)
    assert refusal(path) == (
        f"not a bundle archive, an OTLP trace file or an Inspect log: this is {named}: import it with `capture`"
    )


def test_a_bundle_is_still_a_bundle_with_its_answer_unchanged(tmp_path):
    folder = bundles.write_folder(tmp_path / "b", *bundles.example_parts())
    answer = import_run(bundles.zip_folder(folder, tmp_path / "b.zip"))
    assert set(answer) == {
        "run",
        "events",
        "findings",
        "finding_count",
        "findings_truncated",
        "findings_url",
        "masked_secrets",
        "unevaluated",
        "title",
    }  # issue 20 added the three finding keys


def test_the_sniffer_never_raises_and_says_one_line():
    for data in (b"\x1f\x8b", b"PK\x03\x04junk", b"{" * 5000, b"\xff" * 100, "é".encode() * 40000):
        said = describe(data)
        assert said and "\n" not in said


def test_a_converted_files_bytes_are_asked_for_as_many_as_it_holds_not_the_limit():
    # A read of the limit (512 MiB) allocates that much before it reads: asked for what the file holds, plus one.
    from runs import import_formats

    class Asked(io.BytesIO):
        def __init__(self, data: bytes) -> None:
            super().__init__(data)
            self.sizes: list[int] = []

        def read(self, size: int | None = -1) -> bytes:
            self.sizes.append(-1 if size is None else size)
            return super().read(size)

    data = b"not a trace file, not a log"
    upload = Asked(data)
    with pytest.raises(BundleError):
        import_formats._convert_and_import(upload, len(data), user=None, label="upload x")
    assert upload.sizes[0] == len(data) + 1
    unknown = Asked(data)  # a stream of unknown size: the limit, as before
    with pytest.raises(BundleError):
        import_formats._convert_and_import(unknown, None, user=None, label="upload y")
    assert unknown.sizes[0] == min(import_formats.CONVERTED_MAX_BYTES, settings.N17Q_MAX_BUNDLE_BYTES) + 1
