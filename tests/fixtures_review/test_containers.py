"""Containers opened, scanned member by member and rebuilt masked (n17q_secrets.containers, issue 32 point 1)."""

from __future__ import annotations

import base64
import gzip
import io
import json
import secrets
import string
import zipfile
import zlib

import pytest

from n17q_secrets import containers
from n17q_secrets.containers import mask_container


@pytest.fixture(autouse=True)
def _reviewed_connections() -> None:
    """This module's tests read and write no row: no reviewed connections, no database (tests/fixtures_review/
    conftest.py's fixture of this name, overridden), so they run once, in the SQLite pass (tests/conftest.py)."""


ZIP_ZSTANDARD = 93


def github_token() -> str:
    return "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))


def zstd_zip(members: dict[str, bytes]) -> bytes:
    """A zip written the way Inspect writes its .eval logs: stdlib zipfile patched by zipfile_zstd (method 93)."""
    import zipfile_zstd  # type: ignore[import-untyped]  # noqa: F401  (inspect_ai's own: zipfile writes zstd)

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=ZIP_ZSTANDARD, compresslevel=None) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def unpack_all(data: bytes, depth: int = 0) -> bytes:
    """Every byte `data` holds, with its containers unpacked (zip incl. zstd members, gzip, zlib), for the asserts."""
    import zstandard

    kind = containers.container_kind(data)
    if depth > 5 or kind is None:
        return data
    if kind == "gzip":
        return data + unpack_all(gzip.decompress(data), depth + 1)
    if kind == "zlib":
        return data + unpack_all(zlib.decompress(data), depth + 1)
    if kind == "zstd":
        return data + unpack_all(zstandard.ZstdDecompressor().decompressobj().decompress(data), depth + 1)
    out = [data]
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        for info in zf.infolist():
            out.append(unpack_all(containers._read_member(zf, info, containers._raw_member(data, info), ""), depth + 1))
    return b"".join(out)


def test_a_token_in_a_zstd_member_is_masked_and_the_zip_rebuilt_with_the_same_members_and_methods():
    token = github_token()
    sample = json.dumps({"messages": [{"role": "user", "content": f"deploy with {token}"}]}).encode()
    header = json.dumps({"eval": {"task": "adder"}, "version": 2}).encode()
    data = zstd_zip({"header.json": header, "samples/1_epoch_1.json": sample})
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        assert {i.compress_type for i in zf.infolist()} == {ZIP_ZSTANDARD}
    findings: list[dict[str, str]] = []
    masked = mask_container(data, where="blob", findings=findings)
    assert masked is not None and token.encode() not in unpack_all(masked)
    assert [f["path"] for f in findings] == ["blob!samples/1_epoch_1.json.messages[0].content"]
    with zipfile.ZipFile(io.BytesIO(data)) as before, zipfile.ZipFile(io.BytesIO(masked)) as after:
        assert [(i.filename, i.compress_type) for i in after.infolist()] == [
            (i.filename, i.compress_type) for i in before.infolist()
        ]
        # A member nothing was found in is copied as it was stored.
        assert containers._raw_member(masked, after.getinfo("header.json")) == containers._raw_member(
            data, before.getinfo("header.json")
        )
    # Readable by the reader Inspect itself uses.
    import zipfile_zstd  # noqa: F401

    with zipfile.ZipFile(io.BytesIO(masked)) as zf:
        assert zf.testzip() is None
        assert "[masked:github-pat]" in json.loads(zf.read("samples/1_epoch_1.json"))["messages"][0]["content"]


@pytest.mark.parametrize("method", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_stored_and_deflated_members_are_masked_too(method):
    token = github_token()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=method) as zf:
        zf.writestr("notes.txt", f"token={token}\n")
        zf.writestr("dir/", b"")
    findings: list[dict[str, str]] = []
    masked = mask_container(buf.getvalue(), where="blob", findings=findings)
    assert masked is not None and token.encode() not in unpack_all(masked)
    with zipfile.ZipFile(io.BytesIO(masked)) as zf:
        assert zf.testzip() is None and zf.getinfo("notes.txt").compress_type == method
        assert zf.namelist() == ["notes.txt", "dir/"]
    assert findings[0]["path"] == "blob!notes.txt"


def test_gzip_zlib_and_zstd_streams_and_containers_inside_members():
    import zstandard

    token = github_token()
    body = f'{{"headers": {{"Authorization": "token {token}"}}}}'.encode()
    inner_zip = io.BytesIO()
    with zipfile.ZipFile(inner_zip, "w") as zf:
        zf.writestr("deep.json", gzip.compress(body))
    for data in (
        gzip.compress(body),
        zlib.compress(body),
        zstandard.ZstdCompressor().compress(body),
        zstd_zip({"attachment.gz": gzip.compress(body)}),
        zstd_zip({"inner.zip": inner_zip.getvalue()}),
    ):
        findings: list[dict[str, str]] = []
        masked = mask_container(data, where="x", findings=findings)
        assert masked is not None and findings
        assert token.encode() not in unpack_all(masked)


def test_json_strings_holding_json_and_base64_containers_are_opened():
    token = github_token()
    password = "".join(secrets.choice(string.ascii_letters) for _ in range(14))
    twice = json.dumps({"arguments": json.dumps({"inner": json.dumps({"password": password})})})
    attached = base64.b64encode(gzip.compress(b"\x00\x01\x02 binary header " + token.encode())).decode()
    data = json.dumps({"tool": twice, "file": attached}).encode()
    findings: list[dict[str, str]] = []
    masked = mask_container(data, where="blob", findings=findings)
    assert masked is not None
    assert password.encode() not in unpack_all(masked)
    decoded = base64.b64decode(json.loads(masked)["file"])
    assert token.encode() not in gzip.decompress(decoded)
    # The password is named by whichever rule set names it first (the keyword rule, Nosey Parker's generic one):
    # one finding each, the token by its own rule.
    assert len(findings) == 2 and "github-pat" in {f["rule"] for f in findings}


def test_nothing_found_answers_the_same_bytes():
    data = zstd_zip({"header.json": b'{"eval": {}}'})
    assert mask_container(data, where="blob", findings=[]) is data
    text = b"plain text, nothing secret in it at all"
    assert mask_container(text, where="blob", findings=[]) is text


def _marked_encrypted(content: bytes) -> bytes:
    # What a reader sees of an encrypted zip: bit 0 of the member's flags, in its local and central headers.
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr("secret.txt", content)
    data = bytearray(buf.getvalue())
    data[6] |= 0x1
    data[data.rfind(b"PK\x01\x02") + 8] |= 0x1
    return bytes(data)


def test_what_cannot_be_rebuilt_masked_is_refused_with_its_reason():
    bomb = io.BytesIO()
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for i in range(12):
            zf.writestr(f"zeros-{i}", bytes(60 * 1024 * 1024))  # 720 MiB unpacked, under a MiB packed
    bzip2 = io.BytesIO()
    with zipfile.ZipFile(bzip2, "w", compression=zipfile.ZIP_BZIP2) as zf:
        zf.writestr("a.txt", b"hello")
    nested = b'{"a": 1}'
    for _ in range(containers.MAX_NESTING + 1):
        nested = gzip.compress(nested)
    for data, why in (
        (bomb.getvalue(), "unpacks past"),
        (_marked_encrypted(b"anything"), "encrypted"),
        (bzip2.getvalue(), "compression method 12"),
        (nested, "nest more than"),
        (gzip.compress(b"x" * 1000)[:-12], "cut short"),
    ):
        findings: list[dict[str, str]] = []
        assert mask_container(data, where="blob", findings=findings) is None
        with pytest.raises(containers.Unmaskable, match=why):
            containers.mask_container_or_raise(data, where="blob", findings=findings)
        assert findings == []


def test_a_member_that_lies_about_its_size_is_refused():
    data = bytearray(zstd_zip({"samples/1.json": b'{"a": "' + b"x" * 5000 + b'"}'}))
    # The central directory's uncompressed size, made smaller than what the member unpacks to.
    at = data.rfind(b"PK\x01\x02")
    data[at + 24 : at + 28] = (100).to_bytes(4, "little")
    with pytest.raises(containers.Unmaskable, match="100"):
        containers.mask_container_or_raise(bytes(data), where="blob", findings=[])


def test_a_binary_that_only_starts_like_zlib_is_scanned_as_the_bytes_it_is():
    token = github_token()
    lookalike = b"\x78\x9c" + bytes(range(256)) * 4
    assert containers.container_kind(lookalike) == "zlib"
    assert mask_container(lookalike, where="blob", findings=[]) is lookalike
    findings: list[dict[str, str]] = []
    masked = mask_container(lookalike + f" token {token} ".encode(), where="blob", findings=findings)
    assert masked is not None and token.encode() not in masked and findings
    cut = zlib.compress(f"token {token} ".encode() * 50)[:-20]  # a real stream cut short, holding the token
    with pytest.raises(containers.Unmaskable, match="cut short"):
        containers.mask_container_or_raise(cut, where="blob", findings=[])


def test_gzip_members_with_zero_padding_are_read_in_one_pass_and_capped():
    """Issue 35: the gzip loop re-sliced the rest of the stream at every member (8 MB of empty members: 45 s). Now
    one linear pass: members and the zero padding between them read, a token in the last member masked, and past
    4,096 members a refusal of one line."""
    token = github_token()
    last = gzip.compress(f"key={token}".encode(), mtime=0)
    padded = (gzip.compress(b"", mtime=0) + b"\x00" * 3) * 4000 + last + b"\x00" * 512
    found: list[dict[str, str]] = []
    masked = containers.mask_container_or_raise(padded, where="body.gz", findings=found)
    assert found and token.encode() not in gzip.decompress(masked)
    many = gzip.compress(b"", mtime=0) * (8 * 1024 * 1024 // 20)
    with pytest.raises(containers.Unmaskable) as caught:
        containers.mask_container_or_raise(many, where="many.gz", findings=[])
    assert str(caught.value) == "the gzip stream 'many.gz' holds more than 4096 gzip members"
