"""POST /api/v1/runs/ with a run bundle (.zip, .tar.gz), fed hostile archives (issue 35, point 4): zip members that
lie about their sizes, many members, many gzip members, deep nesting and long strings in events. Each is answered
(a 4xx with one line, or 201) within a bound on the memory the request added to the web process and to its children
(the events checker)."""

from __future__ import annotations

import pytest

from . import hostile
from .conftest import MIB, assert_answered

SLACK_MIB = 64  # the importer's own buffers: SQLite's page cache, the secret scan's rules


def _lying_small(tmp):
    # events.jsonl declares 10 bytes and unpacks to its real size: zipfile stops at the declared size, the CRC fails.
    return hostile.lie_about_size(hostile.bundle_zip(tmp), "events.jsonl", 10)


def _lying_large(tmp):
    # A member declaring 3 GiB: refused from the central directory, before anything is unpacked.
    return hostile.lie_about_size(hostile.bundle_zip(tmp), "events.jsonl", 3 * 1024**3)


def _bomb_member(tmp):
    # A 48 MiB member of zeros (48 KB deflated) that declares 100 bytes.
    return hostile.lie_about_size(
        hostile.bundle_zip(tmp, extra={"blobs/zeros": b"\0" * (48 * MIB)}), "blobs/zeros", 100
    )


def _many_members(tmp):
    return hostile.bundle_zip(tmp, extra={f"extra/{i}": b"" for i in range(10_000)})


CASES = {
    "zip member lying small": (_lying_small, "b.zip", 0),
    "zip member lying large": (_lying_large, "b.zip", 0),
    "zip bomb member lying small": (_bomb_member, "b.zip", 0),
    "many zip members": (_many_members, "b.zip", 0),
    "many gzip members": (lambda tmp: hostile.bundle_tar_gz_many_members(tmp, 30_000), "b.tar.gz", 0),
    "nested event": (lambda tmp: hostile.nested_event(tmp, 50_000), "b.zip", 0),
    "long string in an event": (
        lambda tmp: hostile.bundle_zip(tmp, hostile.long_event_string(16 * MIB)),
        "b.zip",
        16 * MIB,
    ),
}


@pytest.mark.parametrize(("make", "file_name", "decoded"), CASES.values(), ids=list(CASES))
def test_the_bundle_door_answers_a_hostile_archive_within_bounds(door, tmp_path, make, file_name, decoded):
    answer = door("runs", make(tmp_path), file_name=file_name)
    assert_answered(answer, max_grew_mib=8 * decoded / MIB + SLACK_MIB, max_children_mib=8 * decoded / MIB + SLACK_MIB)
