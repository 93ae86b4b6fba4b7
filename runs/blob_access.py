"""The one way to a run's blob bytes (issue 33: retention per holder).

A blob is content-addressed and shared, but whether a run may still be served its bytes is the run's own question:
its hold (`RunBlobHold`) decides, not whether the store happens to have the file. A run whose hold the sweep ended
(its class ran out, or the bytes were removed) answers "removed" with the record that ended it, even while another
run's longer hold keeps the same bytes in the store, or a later run stored them again. Every reader of a run's bytes
(the download, the event panel's preview and source span, a replay's package, copying a recorded body into a
recording) opens them through `run_blob_open`; tests/runs/test_blob_access.py holds the code to that.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import IO, Any

from django.core.files.storage import storages

from .models import Run, RunBlob, blob_storage_name
from .retention import Expiry, run_blob_expiries


def run_blob_open(run_blob: RunBlob) -> IO[bytes] | None:
    """An open handle on the bytes `run_blob`'s run holds, or None: its hold ended (per holder: whatever another run
    holds or stored again), or the store lost the file. The caller closes the handle."""
    if run_blob.bytes_removed:
        return None
    try:
        handle: Any = storages["blobs"].open(blob_storage_name(run_blob.blob.digest), "rb")
    except (FileNotFoundError, OSError):
        return None
    return handle


def run_blob_row(run: Run, digest: str) -> RunBlob | None:
    """The run's record of a blob, with what `run_blob_open` reads (one query)."""
    return RunBlob.objects.filter(run=run, blob__digest=digest[:71]).select_related("blob", "hold").first()


def blob_for_run(run: Run, digest: str) -> tuple[RunBlob, IO[bytes]] | None:
    """The run's record of a blob and an open handle on its bytes; None when the run does not hold them."""
    run_blob = run_blob_row(run, digest)
    if run_blob is None:
        return None
    handle = run_blob_open(run_blob)
    return None if handle is None else (run_blob, handle)


@dataclass(frozen=True)
class BlobRead:
    """What a run answers for one of its blobs: its bytes (`handle`), or the record that ended its hold (`expiry`),
    or neither (the run names no such blob, or the store lost bytes nobody removed)."""

    run_blob: RunBlob | None
    handle: IO[bytes] | None
    expiry: Expiry | None


def run_blob_read(run: Run, digest: str) -> BlobRead:
    run_blob = run_blob_row(run, digest)
    if run_blob is None:
        return BlobRead(None, None, None)
    handle = run_blob_open(run_blob)
    if handle is not None:
        return BlobRead(run_blob, handle, None)
    return BlobRead(run_blob, None, run_blob_expiries(run, [digest]).get(digest[:71]))
