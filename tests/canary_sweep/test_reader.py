"""The sweep's reader finds what it must (positive controls) and nothing else: a canary in a row, in a file, packed
in every container it opens, in an 8-character piece past its public prefix, and in a deleted row's free page."""

from __future__ import annotations

import base64
import gzip
import io
import json
import struct
import zipfile
import zlib

import pytest
import zstandard
from django.contrib.sessions.models import Session
from django.db import connection
from django.utils import timezone

from . import reader
from .canaries import Canaries


def zip_with_zstd_member(name: str, data: bytes) -> bytes:
    """A zip whose member is zstd-compressed (method 93), as Inspect writes `.eval` logs (zipfile cannot, in 3.11)."""
    packed = zstandard.ZstdCompressor().compress(data)
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr(name, packed)
    raw = bytearray(out.getvalue())
    local = raw.find(b"PK\x03\x04")
    central = raw.find(b"PK\x01\x02")
    struct.pack_into("<H", raw, local + 8, reader.ZIP_ZSTD)
    struct.pack_into("<H", raw, central + 10, reader.ZIP_ZSTD)
    return bytes(raw)


def packings(text: bytes) -> dict[str, bytes]:
    deflated = io.BytesIO()
    with zipfile.ZipFile(deflated, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("samples/1.json", text)
    return {
        "plain": text,
        "gzip": b"header " + gzip.compress(text),
        "zlib": zlib.compress(text),
        "zstd": b"xx" + zstandard.ZstdCompressor().compress(text),
        "zip deflate": deflated.getvalue(),
        "zip zstd": zip_with_zstd_member("samples/1.json", text),
        "base64 in JSON": json.dumps({"data": base64.b64encode(b"{" + text + b"}").decode()}).encode(),
        "gzip+base64 in JSON": json.dumps({"data": base64.b64encode(gzip.compress(text)).decode()}).encode(),
        "base64 of a zip": base64.b64encode(zip_with_zstd_member("a.txt", text)),
    }


@pytest.mark.parametrize("packing", list(packings(b"x")))
def test_it_finds_a_canary_however_it_is_packed(packing):
    c = Canaries.fresh()
    data = packings(c.environment_text().encode())[packing]
    found = {canary.shape for _, layer in reader.layers(data) for canary, _ in reader.Finder(c.all).find(layer)}
    assert found == set(c.shapes)


def test_a_piece_past_the_public_prefix_is_found_and_the_prefix_alone_is_not():
    c = Canaries.fresh()
    finder = reader.Finder(c.all)
    token = c.github.value
    assert [x.shape for x, _ in finder.find(f"masked {token[:4]}…{token[-9:]}".encode())] == [c.github.shape]
    assert finder.find(b"ghp_ and sk-proj- and T3BlbkFJ and -----END RSA PRIVATE KEY-----") == []
    jwt_header = c.jwt.value.split(".")[0]
    assert finder.find(f"{jwt_header}.".encode()) == []


@pytest.mark.django_db(transaction=True)
def test_the_sweep_names_the_row_and_the_file_and_finds_nothing_when_nothing_is_there(sweep, _blob_store):
    assert sweep.hits() == []  # the negative control: a fresh database and data folder hold no canary
    c = sweep.canaries
    packed = json.dumps({"z": base64.b64encode(zlib.compress(c.jwt.value.encode())).decode()})
    Session.objects.create(session_key="k" * 32, session_data=packed, expire_date=timezone.now())
    (_blob_store / "sha256").mkdir(parents=True, exist_ok=True)
    kept = zip_with_zstd_member("header.json", c.private_key.value.encode())
    (_blob_store / "sha256" / "kept.eval").write_bytes(kept)
    hits = {(h.area, h.canary.shape, h.where) for h in sweep.hits()}
    assert ("database", c.jwt.shape, f"django_session.session_data row {'k' * 32} > base64@7 > zlib@0") in hits, hits
    assert ("data folder", c.private_key.shape, "blobs/sha256/kept.eval > zip:header.json") in hits, hits
    with pytest.raises(pytest.fail.Exception, match=r"django_session\.session_data"):
        sweep.check("the reader's own test")


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "sqlite", reason="the raw database file is SQLite's")
def test_a_deleted_row_lingers_in_the_sqlite_file_and_is_reported_apart(sweep):
    c = sweep.canaries
    Session.objects.create(session_key="k" * 32, session_data=c.password.value, expire_date=timezone.now())
    Session.objects.all().delete()
    hits = sweep.hits()
    assert {(h.area, h.canary.shape) for h in hits} == {("sqlite file", c.password.shape)}, hits
    sweep.checked.append("the reader's own test")  # the hit is this test's purpose
