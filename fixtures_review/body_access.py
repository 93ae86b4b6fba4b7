"""The one way to a staged recording's bodies (issue 33: retention per holder), as runs.blob_access is for a run's.

A recording's body is held by the recording itself, under its class, whoever else holds the same bytes: whether it
is still served is the recording's own question. Its record (`expired_bodies`: the deletion record that ended its
hold on each body, the bytes' removal or its own hold's end) decides, not whether the store happens to have the
file (a run or another recording may keep it longer) nor whether the row still carries an inline copy. Every place
that shows or serves a recording's body (the recording page's preview and its comparison with the nearest fixture,
the raw body download) asks `recording_body`; tests/runs/test_blob_access.py holds the store's readers to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, Any

from django.core.files.storage import storages

from runs.models import blob_storage_name
from runs.retention import Expiry

from .models import StagedRecording
from .retention import recording_expiries


@dataclass(frozen=True)
class RecordingBody:
    """What a recording answers for one of its bodies: its (redacted) value and the digest of its stored bytes, or,
    once a deletion record ended the recording's hold on it (`ended`), nothing, with that record (`expiry`)."""

    value: Any
    digest: str | None
    ended: bool
    expiry: Expiry | None

    def open(self) -> IO[bytes] | None:
        """An open handle on the stored bytes, or None: the recording's hold ended, it has none, or the store lost
        the file. The caller closes it."""
        if self.ended or not self.digest:
            return None
        try:
            handle: Any = storages["blobs"].open(blob_storage_name(self.digest), "rb")
        except (FileNotFoundError, OSError):
            return None
        return handle


def recording_body(recording: StagedRecording, part: str, expiries: dict[str, Expiry] | None = None) -> RecordingBody:
    """The `part` ("request" or "response") body of `recording` as the recording holds it. `expiries` is
    `recording_expiries(recording)` when the caller has it already (one query, and none for a recording the sweep
    never touched)."""
    where = f"{part}.body"
    digest = recording.body_blobs.get(where)
    if where in (recording.expired_bodies or {}):
        if expiries is None:
            expiries = recording_expiries(recording)
        return RecordingBody(None, digest, True, expiries.get(where))
    content = getattr(recording, part, None) or {}
    return RecordingBody(content.get("body"), digest, False, None)
