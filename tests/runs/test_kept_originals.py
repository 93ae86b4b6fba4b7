"""Kept originals hold no secret (issue 32): an Inspect `.eval` log, whose members Inspect compresses with zstd, is
kept rebuilt with its members masked; one that cannot be rebuilt masked is not kept at all, and the run says so.

The log comes from the real Inspect AI (tests/engine/inspect_token_producer.py, a child process), with a GitHub token
built at run time in its sample's input and in the mock model's answer.
"""

from __future__ import annotations

import io
import json
import secrets
import string
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.urls import reverse

from n17q_secrets import containers
from runs.models import Event, MaskedSecret, Run, RunBlob
from runs.secret_scan import NOT_KEPT_RULE
from tests.engine.inspect_logs import produce_with_secret
from tests.stored import places_holding

pytestmark = pytest.mark.django_db

TOKEN = "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))


@pytest.fixture(scope="module")
def eval_log(tmp_path_factory) -> Path:
    return produce_with_secret(tmp_path_factory.mktemp("inspect-log"), tmp_path_factory.mktemp("home"), TOKEN)


def import_run(path: Path) -> dict:
    out = io.StringIO()
    call_command("import_run", str(path), "--json", stdout=out)
    return json.loads(out.getvalue())


def with_member(log: Path, out: Path, name: str, data: bytes, *, encrypted: bool = False, method: int = 8) -> Path:
    """The log with one more member the converter does not read (an attachment), as given."""
    buf = io.BytesIO(log.read_bytes())
    with zipfile.ZipFile(buf, "a") as zf:
        zf.writestr(zipfile.ZipInfo(name), data, compress_type=method)
    raw = bytearray(buf.getvalue())
    if encrypted:  # bit 0 of the flags, in its local and central headers: what a reader sees of an encrypted member
        with zipfile.ZipFile(io.BytesIO(bytes(raw))) as zf:
            info = zf.getinfo(name)
        raw[info.header_offset + 6] |= 0x1
        raw[raw.rfind(b"PK\x01\x02") + 8] |= 0x1  # the member appended last has the last central header
    out.write_bytes(bytes(raw))
    return out


@pytest.fixture(scope="module")
def json_log(tmp_path_factory) -> Path:
    return produce_with_secret(tmp_path_factory.mktemp("json-log"), tmp_path_factory.mktemp("home"), TOKEN, "json")


def test_a_json_log_is_kept_masked_as_json(json_log, _blob_store):
    assert TOKEN in json_log.read_text()
    answer = import_run(json_log)
    run = Run.objects.get(run_id=answer["run"])
    assert places_holding(TOKEN, _blob_store) == []
    original = RunBlob.objects.get(run=run, role="source-log")
    kept = next(p for p in _blob_store.rglob("*") if p.is_file() and p.name in original.blob.digest)
    assert json.loads(kept.read_bytes())["eval"]["task"] == "deploy"  # still the log, as JSON


def test_the_real_log_holds_the_token_in_zstd_members(eval_log):
    with zipfile.ZipFile(eval_log) as zf:
        methods = {i.compress_type for i in zf.infolist() if not i.is_dir()}
    assert methods == {containers.ZIP_ZSTANDARD}


def test_a_token_in_a_zstd_member_of_an_eval_log_is_stored_nowhere(eval_log, _blob_store, client, role_user):
    answer = import_run(eval_log)
    run = Run.objects.get(run_id=answer["run"])
    assert places_holding(TOKEN, _blob_store) == []
    # The original is kept, rebuilt masked: still a zip of zstd members, with the member the token was in.
    original = RunBlob.objects.get(run=run, role="source-log")
    path = next(p for p in _blob_store.rglob("*") if p.is_file() and p.read_bytes()[:2] == b"PK")
    with zipfile.ZipFile(path) as zf:
        assert {i.compress_type for i in zf.infolist() if not i.is_dir()} == {containers.ZIP_ZSTANDARD}
    # Inspect itself still reads it: the rebuilt log is a log, its sample's input masked.
    from inspect_ai.log import read_eval_log

    copy = Path(path.parent.parent.parent / "kept.eval")
    copy.write_bytes(path.read_bytes())
    log = read_eval_log(str(copy))
    assert log.samples and "[masked:" in str(log.samples[0].input) and TOKEN not in str(log.samples[0].input)
    masked_in_original = MaskedSecret.objects.filter(run=run, blob_digest=original.blob.digest)
    assert any("!samples/" in m.path for m in masked_in_original)
    # The run page says what was masked, and where: in the kept original's members.
    client.force_login(role_user("reviewer"))
    page = client.get(reverse("runs:run-detail", args=[run.run_id])).content.decode()
    assert TOKEN not in page and "!samples/" in page


@pytest.mark.parametrize(
    "why, member",
    [
        ("encrypted", {"name": "attachments/secret.txt", "data": b"anything", "encrypted": True}),
        # Packed to 64 KiB, past the bound of one member unpacked.
        ("bytes unpacked, more than", {"name": "attachments/zeros", "data": bytes(containers.MAX_MEMBER_BYTES + 1)}),
    ],
)
def test_an_original_that_cannot_be_rebuilt_masked_is_not_kept_and_the_run_says_so(
    eval_log, tmp_path, _blob_store, client, role_user, why, member
):
    log = with_member(eval_log, tmp_path / "log.eval", **member)
    answer = import_run(log)
    run = Run.objects.get(run_id=answer["run"])
    assert not RunBlob.objects.filter(run=run, role="source-log").exists()
    assert places_holding(TOKEN, _blob_store) == []
    not_kept = MaskedSecret.objects.get(run=run, rule=NOT_KEPT_RULE)
    assert why in not_kept.preview and not_kept.recorded_as.startswith("hmac:")
    # Every place the run named the original names its keyed digest instead.
    started = Event.objects.get(run=run, kind="attempt.started")
    assert started.body["inspect_sample"]["source_log"] == not_kept.recorded_as
    client.force_login(role_user("reviewer"))
    page = client.get(reverse("runs:run-detail", args=[run.run_id])).content.decode()
    assert "was not kept" in page and not_kept.recorded_as in page
    detail = client.get(reverse("runs:run-detail", args=[run.run_id]), {"event": started.event_id}).content.decode()
    assert "not kept" in detail


def test_a_blob_of_a_bundle_that_cannot_be_scanned_whole_refuses_the_import(tmp_path, _blob_store):
    from tests import bundles

    encrypted = io.BytesIO()
    with zipfile.ZipFile(encrypted, "w") as zf:
        zf.writestr("secret.txt", b"anything")
    raw = bytearray(encrypted.getvalue())
    raw[6] |= 0x1
    raw[raw.rfind(b"PK\x01\x02") + 8] |= 0x1
    manifest, events, blobs = bundles.example_parts()
    blobs, digest = bundles.with_blob(blobs, bytes(raw))
    manifest["blobs"][digest] = {
        "media_type": "application/zip",
        "size": len(raw),
        "role": "tool-output",
        "retention": "standard",
    }
    root = bundles.write_folder(tmp_path / "b", manifest, events, blobs)
    with pytest.raises(CommandError, match=r"cannot be scanned whole for secrets.*encrypted"):
        import_run(root)
    assert Run.objects.count() == 0
