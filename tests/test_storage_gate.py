"""The storage gate (issue 32): one scan-and-mask step (n17q_secrets.gate) before every write, made structural.

- Gated values are made by the gate alone; the blob store and the raw event appends take nothing else.
- Every gated column masks a secret written through it by any door (fail closed), and the receiver's span name
  (`ReceivedTrace.root_name`, shown whole on /traces/ before) and its buffered requests are stored masked.
- The system check fails on a text, char, JSON or binary column neither gated nor allowlisted.
- The CI check (scripts/check_storage_gate.py) finds each kind of write path around the gate in a planted file,
  and the repository passes it.
"""

from __future__ import annotations

import importlib.util
import json
import random
import string
import sys
import zlib
from datetime import UTC, datetime
from pathlib import Path

import pytest
from django.apps import apps
from django.core.files.storage import storages
from django.db import connection, models

from console import gated_fields
from console.blob_store import blob_put
from n17q_secrets import gate
from runs.bulk import Appender
from runs.models import Event

ROOT = Path(__file__).resolve().parent.parent


def github_token() -> str:
    rng = random.SystemRandom()
    return "ghp_" + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(36))


def _checker():
    spec = importlib.util.spec_from_file_location("check_storage_gate", ROOT / "scripts" / "check_storage_gate.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_storage_gate"] = module
    spec.loader.exec_module(module)
    return module


# --- the gate's types -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: gate.GatedBytes(b"x"),
        lambda: gate.GatedText("x"),
        lambda: gate.GatedJSON({}),
        lambda: gate.GatedFile(Path("x")),
        lambda: gate.GatedText("x", object()),
    ],
)
def test_gated_values_are_made_by_the_gate_alone(make):
    with pytest.raises(TypeError, match=r"n17q_secrets\.gate alone"):
        make()


def test_the_gate_masks_text_json_and_bytes():
    secret = github_token()
    found: list[dict[str, str]] = []
    text = gate.gate_text(f"deploy with {secret}", where="t", findings=found)
    value = gate.gate_json({"note": f"token {secret}"}, where="j", findings=found)
    data = gate.gate_bytes(f"log: {secret}\n".encode(), media_type="text/plain", where="b", findings=found)
    zipped = gate.gate_bytes(
        zlib.compress(f'{{"k": "{secret}"}}'.encode()), media_type="application/json+zlib", where="z", findings=found
    )
    assert isinstance(text, gate.GatedText) and secret not in text
    assert isinstance(value, gate.GatedJSON) and secret not in str(value.value)
    assert isinstance(data, gate.GatedBytes) and secret.encode() not in data
    assert isinstance(zipped, gate.GatedBytes) and secret.encode() not in zlib.decompress(zipped)
    assert len(found) == 4


def test_already_masked_names_the_scan_it_relies_on():
    with pytest.raises(ValueError, match="needs `by`"):
        gate.already_masked("x", by="")
    assert isinstance(gate.already_masked("x", by="a test"), gate.GatedText)


# --- the blob store ---------------------------------------------------------------------------------------------


def test_the_blob_store_takes_only_gated_values(settings):
    with pytest.raises(TypeError, match="storage gate"):
        blob_put(b"plain bytes")  # type: ignore[arg-type]


def test_a_secret_reaches_the_blob_store_masked():
    secret = github_token()
    found: list[dict[str, str]] = []
    stored = blob_put(gate.gate_bytes(f"out: {secret}".encode(), media_type="text/plain", where="b", findings=found))
    with storages["blobs"].open(stored.name, "rb") as fh:
        data = fh.read()
    assert stored.written and secret.encode() not in data and b"[masked:" in data


# --- columns ----------------------------------------------------------------------------------------------------


def _gated_fields() -> list[models.Field]:
    return [
        field
        for model in apps.get_models()
        if model._meta.app_label in gated_fields.PRODUCT_APPS
        for field in model._meta.concrete_fields
        if isinstance(field, gated_fields.GATED_FIELDS)
    ]


@pytest.mark.parametrize("field", _gated_fields(), ids=lambda f: f"{f.model._meta.label}.{f.name}")
def test_every_gated_column_masks_a_secret_written_through_it(field):
    secret = github_token()
    value: object
    if isinstance(field, models.JSONField):
        value = {"note": f"token {secret}"}
    elif isinstance(field, models.BinaryField):
        value = f"token {secret}".encode()
    else:
        value = f"token {secret}"
    prepared = field.get_db_prep_save(value, connection)
    assert secret not in str(prepared), field


@pytest.mark.django_db
def test_a_span_name_holding_a_token_is_stored_masked():
    from otlp_receiver.models import ReceivedTrace, TraceChunk

    secret = github_token()
    now = datetime.now(UTC)
    trace = ReceivedTrace.objects.create(
        trace_id="ab" * 16, first_received_at=now, last_received_at=now, root_name=f"deploy {secret}"
    )
    TraceChunk.objects.create(
        trace=trace, received_at=now, span_count=1, data=zlib.compress(f"\n\x28{secret}".encode())
    )
    with connection.cursor() as cursor:
        cursor.execute("SELECT root_name FROM otlp_receiver_receivedtrace WHERE id = %s", [trace.pk])
        (root_name,) = cursor.fetchone()
        cursor.execute("SELECT data FROM otlp_receiver_tracechunk WHERE trace_id = %s", [trace.pk])
        (chunk,) = cursor.fetchone()
    assert secret not in root_name and "[masked:" in root_name
    assert secret.encode() not in zlib.decompress(bytes(chunk))


@pytest.mark.django_db
def test_the_event_appender_refuses_an_ungated_body():
    appender = Appender(Event._meta.db_table, ("id", "body"))
    with pytest.raises(TypeError, match="gated column"):
        appender.prepare(None, "postgresql", [(1, '{"note": "plain"}')])


# --- the system check -------------------------------------------------------------------------------------------


def test_the_repository_has_no_ungated_column():
    assert gated_fields.check_gated_columns() == []


def test_the_system_check_fails_on_an_ungated_column(monkeypatch):
    from runs.models import Run

    title = Run._meta.get_field("title")
    monkeypatch.setattr(title, "__class__", models.CharField)
    errors = gated_fields.check_gated_columns()
    assert [(e.id, e.msg.split()[0]) for e in errors] == [("storage_gate.E001", "runs.Run.title")]


def test_the_system_check_fails_on_a_stale_allowance(monkeypatch):
    monkeypatch.setitem(gated_fields.UNGATED, ("runs.Run", "no_such_column"), "a test")
    errors = gated_fields.check_gated_columns()
    assert [e.id for e in errors] == ["storage_gate.E002"]


# --- the CI check -----------------------------------------------------------------------------------------------

PLANTED = """
from pathlib import Path
import shutil, tarfile, zipfile
from django.core.files.storage import storages
from n17q_secrets.gate import GatedText, already_masked

def leak(data, cursor):
    storages["blobs"].save("name", data)
    with open("/tmp/x", "wb") as fh:
        fh.write(data)
    Path("/tmp/y").write_text(data)
    shutil.copyfile("/tmp/x", "/tmp/z")
    zipfile.ZipFile("/tmp/a.zip", "w")
    cursor.execute("INSERT INTO runs_run (title) VALUES (%s)", [data])
    cursor.execute(f"{data} RETURNING id")
    GatedText(data)
    already_masked(data, by="nobody")
    with open("/tmp/x", "rb") as fh:  # a read: not reported
        fh.read()
    cursor.execute("SELECT 1")  # a read: not reported
"""


def test_the_ci_check_finds_every_write_path_planted(tmp_path):
    check = _checker()
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)
    findings = check.check_file(planted, tmp_path)
    assert sorted((f.line, f.rule) for f in findings) == [
        (8, "storage-save"),
        (9, "open-write"),
        (11, "path-write"),
        (12, "file-copy"),
        (13, "file-copy"),
        (14, "raw-sql-write"),
        (15, "raw-sql-write"),
        (16, "gated-construct"),
        (17, "already-masked"),
    ]
    assert all(str(f).startswith(f"planted.py:{f.line}: {f.rule}: ") for f in findings)
    assert check.main([str(planted)]) == 1


def test_the_repository_passes_the_ci_check(capsys):
    assert _checker().main([]) == 0, capsys.readouterr().out


def test_a_container_the_gate_cannot_rebuild_masked_is_not_storable():
    # A gzip stream cut short cannot be opened whole, so what it holds cannot be shown to be masked: the gate says so
    # (one line: why) rather than storing it as it came.
    import gzip

    cut = gzip.compress(b"a body that was cut short in transit " * 20)[:24]
    with pytest.raises(gate.NotStorable, match="cut short"):
        gate.gate_bytes(cut, media_type="application/gzip", where="original", findings=[])


# --- an OTLP/JSON original, a piece at a time (issue 35) ------------------------------------------------------------


def _otlp_export(spans: list[dict]) -> dict:
    half = len(spans) // 2
    return {"resource_spans": [{"scope_spans": [{"spans": spans[:half]}, {"spans": spans[half:]}]}], "password": "pw1"}


def test_an_otlp_json_export_masked_a_piece_at_a_time_is_what_the_whole_documents_scan_gives():
    """`gate.mask_otlp_json` reads the export by the engine's bounded reader (spans in batches) where `mask_bytes`
    builds it whole: the same findings at the same paths, the same masked document, across batches, and a value
    found in one span masked in another where no rule would have found it."""
    token, bare = github_token(), "Zq8vT3kP9mW2xR7y"

    def span(i: int) -> dict:
        attributes = [{"key": f"k{j}", "value": {"stringValue": "x" * 100}} for j in range(20)]
        return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": f"{i + 1:016x}", "attributes": attributes}

    spans = [span(i) for i in range(3000)]
    spans[10]["attributes"].append({"key": "note", "value": {"stringValue": f"see {bare}"}})
    spans[1700]["attributes"].append({"key": "db.password", "value": {"stringValue": "hunter2hunter2"}})
    spans[2900]["attributes"].append({"key": "auth", "value": {"stringValue": f"token {token}"}})
    spans[2950]["attributes"].append({"key": "cfg", "value": {"stringValue": f"password={bare}"}})
    spans[2999]["name"] = json.dumps({"args": {"api_key": "k-" + bare}})
    data = json.dumps(_otlp_export(spans)).encode()
    whole: list = []
    pieces: list = []
    expected = gate.mask_bytes(data, media_type="application/json", where="blob", findings=whole)
    masked = gate.mask_otlp_json(data, where="blob", findings=pieces)
    assert json.loads(masked) == json.loads(expected)
    assert sorted(map(json.dumps, pieces)) == sorted(map(json.dumps, whole))
    assert {f["path"] for f in pieces} >= {
        "blob.resource_spans[0].scope_spans[0].spans[10].attributes[20].value.stringValue",
        "blob.resource_spans[0].scope_spans[1].spans[1400].attributes[20].value.stringValue",
        "blob.password",
    }
    assert token.encode() not in masked and bare.encode() not in masked

    clean = json.dumps(_otlp_export([span(i) for i in range(50)])).replace('"pw1"', "null").encode()
    assert gate.mask_otlp_json(clean, where="blob", findings=[]) is clean  # nothing found: the bytes as they were


def test_an_otlp_json_export_past_the_readers_caps_is_not_storable():
    attributes = [{"key": f"k{j}", "value": {"intValue": "1"}} for j in range(10_001)]  # larger than a window
    data = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [{"attributes": attributes}]}]}]}).encode()
    with pytest.raises(gate.NotStorable, match="more than 10000 items"):
        gate.mask_otlp_json(data, where="blob", findings=[])
