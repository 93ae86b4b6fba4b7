"""A stored run as a run bundle again (`n17q.run-bundle/1`, DESIGN §3): for a replay's package and for an export.

One reading of a run back into bundle form, so that what a replay is built from and what a person downloads are the
same bytes: `manifest.json` (the run as imported, its blobs as listed), `events.jsonl` (every event as stored, in seq
order, one canonical JSON line each) and `blobs/sha256/<hex>` (the bytes the run's own hold still covers, read through
`runs.blob_access`, the one way to a run's bytes). What the console changed on the way in stays changed: secrets the
scan masked are masked here too, and a blob whose bytes retention removed is listed with its deletion record
(`blobs.<digest>.expired`) and no bytes. An export adds one top-level key the importer does not read, `exported`
(DESIGN §10, additive): where the bundle came from, what was masked and removed, and for a replay its scope note
(the `replay.scope` event: scenario version, fixture world, recording dates, synthetic substitutions, uncovered
behaviour), so that an exported trace carries the same disclosure as its pages (seed 000).
"""

from __future__ import annotations

import tempfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import IO, Any

from django.http import FileResponse

from accounts.audit import audit_record
from n17q_engine import canonical
from n17q_engine.formats.otlp.export import otlp_json_chunks, trace_id_for
from n17q_engine.vocabulary import APPENDED_BY_REVIEWERS, BUNDLE_FORMAT

from .blob_access import run_blob_open
from .models import Event, Run, RunBlob
from .retention import Expiry, run_blob_expiries

EVENTS_READ = 2000  # events read from the database at a time
# The `replay.scope` fields an export repeats in its `exported.scope_note` (DESIGN §3).
SCOPE_NOTE_FIELDS = ("scenario", "scope", "recorded_between", "synthetic", "uncovered", "isolation")


class BundleExportError(Exception):
    """The run cannot be written back as a bundle now (one line, safe to show)."""


@dataclass
class RunBundle:
    """A run read back as a bundle: the manifest, then its events and blob bytes read as they are written."""

    run: Run
    manifest: dict[str, Any]
    expired: dict[str, Expiry] = field(default_factory=dict)
    run_blobs: list[RunBlob] = field(default_factory=list)

    def events(self, *, annotations: bool = True) -> Iterator[dict[str, Any]]:
        """Each event as stored, in seq order (a bounded number held at a time). `annotations=False` leaves out what
        reviewers appended after the run (runs/annotations.py): a replay reconstructs what the run knew, not the
        notes made about it (docs/annotations.md)."""
        events = Event.objects.filter(run=self.run)
        if not annotations:
            events = events.exclude(kind__in=APPENDED_BY_REVIEWERS)  # assessments too (issue 39)
        bodies = events.order_by("seq").values_list("body", flat=True)
        yield from bodies.iterator(EVENTS_READ)

    def event_lines(self, *, annotations: bool = True) -> Iterator[bytes]:
        """Each event as stored, canonical JSON and a line feed, in seq order (a bounded number held at a time)."""
        for body in self.events(annotations=annotations):
            yield canonical.canonical_json(body) + b"\n"

    def blobs(self) -> Iterator[tuple[str, IO[bytes]]]:
        """(digest, an open handle) for each blob whose bytes the run still holds; the caller closes each handle.
        A blob the sweep removed between the manifest and now stops the export: its manifest would be wrong."""
        for run_blob in self.run_blobs:
            digest = run_blob.blob.digest
            if digest in self.expired:
                continue
            handle = run_blob_open(run_blob)
            if handle is None:
                raise BundleExportError(
                    f"the bytes of {digest} were removed while the bundle was being written: export it again"
                )
            yield digest, handle


def run_bundle(run: Run) -> RunBundle:
    """The run as a bundle: its manifest now (three queries), its events and bytes when read.

    A blob the store does not hold and no retention record explains is refused in one line: a bundle missing bytes
    it lists without saying why would be refused by any importer."""
    run_blobs = list(RunBlob.objects.filter(run=run).select_related("blob", "hold").order_by("blob__digest"))
    expired = run_blob_expiries(run)
    listed: dict[str, dict[str, Any]] = {}
    for run_blob in run_blobs:
        digest = run_blob.blob.digest
        listed[digest] = {
            "media_type": run_blob.media_type,
            "size": run_blob.blob.size,
            "role": run_blob.role,
            "retention": run_blob.retention,
        }
        if digest in expired:
            listed[digest]["expired"] = expired[digest].as_json()
        elif run_blob.bytes_removed:
            raise BundleExportError(f"the blob store does not hold {digest}, and no retention record says why")
    manifest = {"format": BUNDLE_FORMAT, "run": run.manifest_run, "blobs": listed}
    return RunBundle(run=run, manifest=manifest, expired=expired, run_blobs=run_blobs)


def _scope_note(run: Run) -> dict[str, Any] | None:
    body = Event.objects.filter(run=run, kind="replay.scope").order_by("seq").values_list("body", flat=True).first()
    if not isinstance(body, dict):
        return None
    return {k: body[k] for k in SCOPE_NOTE_FIELDS if k in body}


def export_note(run: Run, bundle: RunBundle, *, by: str, at: datetime | None = None) -> dict[str, Any]:
    """The `exported` key of an exported manifest: what a reader of the file must know that its events do not say."""
    at = at or datetime.now(UTC)
    return {
        "from": "N17Q",
        "run": run.run_id,
        "at": at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "by": by,
        "masked_on_import": run.masked_secret_count,
        "masked_note": "secrets the console's scan found were masked before anything was stored; they are masked here"
        if run.masked_secret_count
        else "the console's secret scan found nothing to mask in this run",
        "expired_blobs": sorted(bundle.expired),
        "expired_note": "listed with their deletion record and without bytes: an importer other than this console "
        "refuses them (it holds no such record)"
        if bundle.expired
        else "",
        "scope_note": _scope_note(run),
    }


# A fixed time for every member: the same run exports to the same bytes (the zip format's earliest date).
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)


def _member(archive: zipfile.ZipFile, name: str) -> IO[bytes]:
    info = zipfile.ZipInfo(name, date_time=_ZIP_TIME)
    info.compress_type = zipfile.ZIP_DEFLATED
    info.external_attr = 0o644 << 16
    return archive.open(info, "w", force_zip64=True)


def run_bundle_zip(run: Run, out: IO[bytes], *, by: str, at: datetime | None = None) -> dict[str, Any]:
    """Write `run` to `out` as a `.zip` run bundle (events and bytes streamed, never all held) and answer what was
    written: {"run", "events", "blobs", "expired", "masked_on_import"}."""
    bundle = run_bundle(run)
    manifest = {**bundle.manifest, "exported": export_note(run, bundle, by=by, at=at)}
    events = blobs = 0
    with zipfile.ZipFile(out, "w") as archive:
        with _member(archive, "manifest.json") as fh:
            fh.write(canonical.canonical_json(manifest) + b"\n")
        with _member(archive, "events.jsonl") as fh:
            for line in bundle.event_lines():
                fh.write(line)
                events += 1
        for digest, handle in bundle.blobs():
            with handle, _member(archive, f"blobs/sha256/{digest.removeprefix('sha256:')}") as fh:
                while chunk := handle.read(1 << 20):
                    fh.write(chunk)
            blobs += 1
    return {
        "run": run.run_id,
        "events": events,
        "blobs": blobs,
        "expired": sorted(bundle.expired),
        "masked_on_import": run.masked_secret_count,
    }


def run_otlp_json(run: Run, out: IO[bytes], *, by: str, at: datetime | None = None) -> dict[str, Any]:
    """Write `run` to `out` as one OTLP/JSON ExportTraceServiceRequest (n17q_engine/formats/otlp/export.py,
    docs/formats/otlp.md "Export"): the same reading of the run as the bundle (`run_bundle`, its events streamed),
    its `exported` note and scope note on the resource, blobs named by digest and not inlined. Answers what was
    written: {"run", "events", "spans", "blobs" (0: none inlined), "expired", "masked_on_import", "trace_id"}."""
    bundle = run_bundle(run)
    note = export_note(run, bundle, by=by, at=at)
    counts: dict[str, int] = {}
    for piece in otlp_json_chunks(
        bundle.manifest, bundle.events(), scope_note=note["scope_note"], exported=note, counts=counts
    ):
        out.write(piece)
    return {
        "run": run.run_id,
        "events": counts.get("events", 0),
        "spans": counts.get("spans", 0),
        "blobs": 0,
        "expired": sorted(bundle.expired),
        "masked_on_import": run.masked_secret_count,
        "trace_id": trace_id_for(run.run_id),
    }


# The export formats: the writer, the file name's suffix and the download's media type.
EXPORT_FORMATS = {
    "bundle": (run_bundle_zip, ".zip", "application/zip"),
    "otlp-json": (run_otlp_json, ".otlp.json", "application/json"),
}

SPOOL_BYTES = 16 * 1024 * 1024  # an export held in memory up to this size, then in a temporary file


def run_export_file(
    run: Run, *, actor: Any, by: str, request: Any = None, fmt: str = "bundle"
) -> tuple[IO[bytes], dict[str, Any], str, str]:
    """The run exported in `fmt` (EXPORT_FORMATS) in a temporary file (read from its start; the caller closes it),
    with what was written, the download's file name and media type; the export is audited (`run.exported`: who,
    which run, which format, what it held)."""
    write, suffix, media_type = EXPORT_FORMATS[fmt]
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES)  # noqa: SIM115 (the caller closes it)
    try:
        answer = write(run, spool, by=by)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    audit_record(
        actor=actor,
        action="run.exported",
        target=run.run_id,
        detail={"by": by, "format": fmt, **answer},
        request=request,
    )
    return spool, answer, f"{run.run_id}{suffix}", media_type


def export_download(run: Run, *, actor: Any, by: str, request: Any = None, fmt: str = "bundle") -> FileResponse:
    """The run exported in `fmt` as an attachment (the run page's link and the API's two endpoints alike); audited.
    BundleExportError (one line) when the run's bytes changed while it was written: each door says it its own way."""
    spool, _answer, filename, media_type = run_export_file(run, actor=actor, by=by, request=request, fmt=fmt)
    response = FileResponse(spool, as_attachment=True, filename=filename, content_type=media_type)
    response["X-Content-Type-Options"] = "nosniff"
    return response
