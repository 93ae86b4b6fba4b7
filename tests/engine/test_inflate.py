"""n17q_engine.inflate: a gzip or deflate body undone in one linear pass, members counted and capped (issue 35)."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from n17q_engine.inflate import InflateError, inflate

REPO = Path(__file__).resolve().parents[2]
EMPTY_MEMBER = gzip.compress(b"", mtime=0)


def test_members_of_every_size_come_back_in_order_across_the_slices_it_feeds():
    # sizes on both sides of the first slice (256 bytes) and of its doublings, incompressible and compressible
    pieces = [os.urandom(n) for n in (0, 1, 200, 255, 256, 257, 1000, 70_000, 300_000)]
    pieces += [b"a" * 5_000_000, b"tail"]
    body = b"".join(gzip.compress(p, mtime=0) for p in pieces)
    assert inflate(body, "gzip", max_bytes=10_000_000) == b"".join(pieces)


@pytest.mark.parametrize("raw", [False, True])
def test_deflate_as_a_zlib_stream_or_raw(raw):
    data = os.urandom(50_000) + b"x" * 100_000
    if raw:
        packer = zlib.compressobj(wbits=-zlib.MAX_WBITS)
        body = packer.compress(data) + packer.flush()
    else:
        body = zlib.compress(data)
    assert inflate(body, "deflate", max_bytes=1_000_000) == data


def test_a_bomb_is_refused_at_the_cap_as_too_large():
    with pytest.raises(InflateError) as caught:
        inflate(gzip.compress(bytes(64 * 1024 * 1024)), "gzip", max_bytes=1024 * 1024)
    assert caught.value.too_large and caught.value.message == "decompresses to more than 1048576 bytes"


def test_exactly_the_cap_is_allowed():
    assert len(inflate(gzip.compress(bytes(4096)) * 2, "gzip", max_bytes=8192)) == 8192


def test_many_empty_members_are_refused_at_the_member_cap():
    """8 MB of empty members (the quadratic case: 44-49 s before) stop at the cap, one line."""
    body = EMPTY_MEMBER * (8 * 1024 * 1024 // len(EMPTY_MEMBER))
    with pytest.raises(InflateError) as caught:
        inflate(body, "gzip", max_bytes=64 * 1024 * 1024)
    assert caught.value.too_large and caught.value.message == "holds more than 4096 gzip members"
    assert inflate(EMPTY_MEMBER * 4096, "gzip", max_bytes=10) == b""


def test_members_are_read_in_linear_time():
    """16 MiB of empty members with no member cap (minutes before: every member copied the rest of the body) in a
    child process; the timeout is a hang guard only."""
    script = (
        "import gzip, sys\n"
        "from n17q_engine.inflate import inflate\n"
        "member = gzip.compress(b'', mtime=0)\n"
        "body = member * (16 * 1024 * 1024 // len(member))\n"
        "assert inflate(body, 'gzip', max_bytes=1024, max_members=10**9) == b''\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (gzip.compress(b"x" * 1000, mtime=0)[:-12], "is cut short"),
        (gzip.compress(b"ok", mtime=0) + b"garbage after the member", "cannot be decompressed"),
        (b"not gzip at all", "cannot be decompressed"),
    ],
    ids=["cut short", "garbage after a member", "not gzip"],  # the same ids on every xdist worker
)
def test_damaged_bodies_are_refused_in_one_line(body, message):
    with pytest.raises(InflateError) as caught:
        inflate(body, "gzip", max_bytes=1_000_000)
    assert not caught.value.too_large and caught.value.message.startswith(message)
    assert "\n" not in caught.value.message


def test_zero_padding_between_and_after_members_when_asked():
    body = gzip.compress(b"one", mtime=0) + b"\x00" * 1000 + gzip.compress(b"two", mtime=0) + b"\x00" * 7
    assert inflate(body, "gzip", max_bytes=100, zero_padding=True) == b"onetwo"
    with pytest.raises(InflateError) as caught:
        inflate(body, "gzip", max_bytes=100)
    assert caught.value.kind == "corrupt"
