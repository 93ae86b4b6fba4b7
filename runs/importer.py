"""Importing a run bundle: streamed, verified, one transaction, all or nothing (DESIGN §3).

The order matters for "nothing is stored" on refusal:
1. the archive is unpacked (safely) into a private temporary folder;
2. the manifest is parsed and every blob is hashed against its digest before anything is written;
3. inside one transaction the run, its events (in batches, never the whole file in memory), objects,
   edges and lineage findings are written; blobs new to the store are written just before and removed
   again if the transaction does not commit.
"""

from __future__ import annotations

import hashlib
import logging
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files import File
from django.core.files.storage import storages
from django.db import IntegrityError, transaction

from n17q_engine import archive, bundle
from n17q_engine import vocabulary as v
from n17q_engine.bundle import BundleError, parse_iso
from n17q_engine.lineage import LineageGraph

from .models import Blob, Edge, Event, Finding, Run, RunBlob, RunObject, blob_storage_name

log = logging.getLogger(__name__)

EVENT_BATCH = 2000
EDGE_BATCH = 5000
MANIFEST_MAX_BYTES = bundle.MANIFEST_MAX_BYTES


@dataclass(frozen=True)
class ImportResult:
    run: Run
    events: int
    findings: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"run": self.run.run_id, "events": self.events, "findings": self.findings}


def run_import_from_path(path: Path, *, user: Any = None) -> ImportResult:
    """Import a bundle given as a folder, a .zip or a .tar.gz on disk."""
    try:
        path = Path(path)
        exists = path.exists()
    except (OSError, ValueError):  # a NUL in the name, a name too long for the file system
        exists = False
    if not exists:
        raise BundleError(f"{path} does not exist")
    if path.is_dir():
        return _import_root(archive.check_directory(path), user=user)
    with tempfile.TemporaryDirectory(prefix="n17q-bundle-") as tmp:
        root = archive.unpack(
            path,
            Path(tmp),
            max_bytes=settings.N17Q_MAX_BUNDLE_BYTES,
            max_members=settings.N17Q_MAX_BUNDLE_MEMBERS,
        )
        return _import_root(root, user=user)


def run_import_from_upload(upload: Any, *, user: Any = None) -> ImportResult:
    """Import an uploaded archive (a Django UploadedFile), streamed to a temporary file first."""
    if upload.size is not None and upload.size > settings.N17Q_MAX_BUNDLE_BYTES:
        raise BundleError(f"upload is larger than {settings.N17Q_MAX_BUNDLE_BYTES} bytes")
    with tempfile.TemporaryDirectory(prefix="n17q-upload-") as tmp:
        suffix = ".tar.gz" if str(upload.name or "").lower().endswith((".tar.gz", ".tgz")) else ".zip"
        target = Path(tmp) / f"upload{suffix}"
        with open(target, "wb") as out:
            for chunk in upload.chunks():
                out.write(chunk)
        unpacked = Path(tmp) / "bundle"
        unpacked.mkdir()
        root = archive.unpack(
            target,
            unpacked,
            max_bytes=settings.N17Q_MAX_BUNDLE_BYTES,
            max_members=settings.N17Q_MAX_BUNDLE_MEMBERS,
        )
        return _import_root(root, user=user)


def _read_manifest(root: Path) -> tuple[bundle.Manifest, bytes]:
    manifest_path = root / "manifest.json"
    if manifest_path.is_symlink() or not manifest_path.is_file():
        raise BundleError("manifest.json is missing from the bundle")
    if manifest_path.stat().st_size > MANIFEST_MAX_BYTES:
        raise BundleError(f"manifest.json is larger than {MANIFEST_MAX_BYTES} bytes", file="manifest.json")
    raw = manifest_path.read_bytes()
    return bundle.parse_manifest(raw), raw


def _bundle_digest(manifest_raw: bytes, events_path: Path) -> str:
    h = hashlib.sha256(manifest_raw)
    with open(events_path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
    return "sha256:" + h.hexdigest()


def _import_root(root: Path, *, user: Any) -> ImportResult:
    manifest, manifest_raw = _read_manifest(root)
    events_path = root / "events.jsonl"
    if events_path.is_symlink() or not events_path.is_file():
        raise BundleError("events.jsonl is missing from the bundle")
    run_meta = manifest.run
    if Run.objects.filter(run_id=run_meta["id"]).exists():
        raise BundleError(f"run {run_meta['id']!r} is already imported; history is never replaced", field="run.id")
    blob_paths = bundle.verify_blobs(root, manifest)
    digest = _bundle_digest(manifest_raw, events_path)
    written: list[str] = []
    try:
        with transaction.atomic():
            written = _store_blobs(blob_paths)
            result = _write_run(run_meta, manifest, events_path, digest, user=user)
    except IntegrityError as exc:
        _remove_blobs(written)
        # Two imports of the same run racing: the loser is told plainly.
        if Run.objects.filter(run_id=run_meta["id"]).exists():
            raise BundleError(f"run {run_meta['id']!r} is already imported; history is never replaced") from None
        raise BundleError(f"the bundle could not be stored ({exc.__class__.__name__})") from None
    except BaseException:
        _remove_blobs(written)
        raise
    log.info("imported run %s: %s events, %s findings", result.run.run_id, result.events, len(result.findings))
    return result


def _store_blobs(blob_paths: dict[str, Path]) -> list[str]:
    """Write blobs new to the store; return the names written so a rollback can remove them."""
    store = storages["blobs"]
    written: list[str] = []
    existing = set(Blob.objects.filter(digest__in=list(blob_paths)).values_list("digest", flat=True))
    new_rows = []
    for digest, path in sorted(blob_paths.items()):
        name = blob_storage_name(digest)
        if digest not in existing:
            new_rows.append(Blob(digest=digest, size=path.stat().st_size))
        if store.exists(name):
            continue
        with open(path, "rb") as fh:
            saved = store.save(name, File(fh, name=name))
        if saved != name:
            store.delete(saved)
            raise BundleError(f"blob store refused {name}")
        written.append(name)
    Blob.objects.bulk_create(new_rows, ignore_conflicts=True)
    return written


def _remove_blobs(names: list[str]) -> None:
    store = storages["blobs"]
    for name in names:
        try:
            store.delete(name)
        except OSError:
            log.warning("could not remove blob %s after a refused import", name)


def _ref(value: str) -> str:
    """A reference as its column holds it. Ids are at most MAX_ID_CHARS long (the reader refuses longer
    ones), so a longer reference names nothing the run holds: it stays a dangling edge, cut to fit, and the
    event's body keeps it whole."""
    return value[: bundle.MAX_ID_CHARS]


def _int32(value: Any) -> int | None:
    """A scenario version for its integer column; one that is not a 32-bit integer stays only in the manifest."""
    if isinstance(value, int) and not isinstance(value, bool) and -(2**31) <= value < 2**31:
        return value
    return None


def _events(events_path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    with open(events_path, "rb") as fh:
        yield from bundle.iter_event_lines(fh)


def _write_run(run_meta: dict[str, Any], manifest: bundle.Manifest, events_path: Path, digest: str, *, user: Any):
    scenario = run_meta.get("scenario") or {}
    parent_ref = run_meta.get("parent_run") or ""
    run = Run.objects.create(
        run_id=run_meta["id"],
        task_id=run_meta["task"]["id"],
        task_revision=str(run_meta["task"]["revision"]),
        environment=run_meta["environment"],
        mode=run_meta["mode"],
        scenario_name=scenario.get("name", "") or "",
        scenario_version=_int32(scenario.get("version")),
        model_name=run_meta["model"]["name"],
        model_version=run_meta["model"]["version"],
        policy_revision=run_meta["policy_revision"],
        created_at=parse_iso(run_meta["created_at"]),
        parent_run_ref=parent_ref,
        parent=Run.objects.filter(run_id=parent_ref).first() if parent_ref else None,
        isolation=run_meta.get("isolation") or "",
        manifest_run=run_meta,
        bundle_digest=digest,
        imported_by=user if getattr(user, "is_authenticated", False) else None,
    )
    blob_ids = dict(Blob.objects.filter(digest__in=list(manifest.blobs)).values_list("digest", "id"))
    RunBlob.objects.bulk_create(
        [
            RunBlob(run=run, blob_id=blob_ids[d], media_type=e.media_type, role=e.role, retention=e.retention)
            for d, e in manifest.blobs.items()
        ]
    )

    graph = LineageGraph(run_meta)
    event_pk: dict[str, int] = {}
    object_pk: dict[str, tuple[int, int]] = {}  # object ref -> (RunObject pk, introducing event pk)
    references: list[tuple[int, str, str]] = []
    batch: list[Event] = []
    batch_objects: list[tuple[int, str, str]] = []  # (index in batch, kind, ref)
    count = 0
    last_state = ""
    kind_counts: dict[str, int] = {}
    first_at = last_at = None

    def flush() -> None:
        Event.objects.bulk_create(batch)
        for ev in batch:
            event_pk[ev.event_id] = ev.pk
        if batch_objects:
            objs = [RunObject(run=run, kind=k, ref=r, introduced_by_id=batch[i].pk) for i, k, r in batch_objects]
            RunObject.objects.bulk_create(objs)
            for obj in objs:
                object_pk[obj.ref] = (obj.pk, obj.introduced_by_id)
        for ev in batch:
            for path, target in v.references(ev.body):
                if path != "attempt":  # the attempt is a column of its own, not an edge row
                    references.append((ev.pk, path, target))
        batch.clear()
        batch_objects.clear()

    for line_no, event in _events(events_path):
        for name in v.BLOB_FIELDS.get(event["kind"], ()):
            ref = event.get(name)
            if ref is not None and ref not in manifest.blobs:
                raise BundleError(
                    f"names blob {ref} which manifest.json does not list", file="events.jsonl", line=line_no, field=name
                )
        graph.add(event)
        logical = parse_iso(event["at"]["logical"])
        first_at = first_at or logical
        last_at = logical
        if event["kind"] == "run.state":
            last_state = event["state"]
        introduced = v.introduced_object(event)
        if introduced is not None:
            batch_objects.append((len(batch), introduced[0], introduced[1]))
        batch.append(
            Event(
                run=run,
                seq=event["seq"],
                event_id=event["id"],
                kind=event["kind"],
                attempt_ref=_ref(event["attempt"] or ""),
                workspace_ref=_ref(v.event_workspace(event) or ""),
                logical_at=logical,
                wall_at=parse_iso(event["at"]["wall"]),
                body=event,
            )
        )
        count += 1
        kind_counts[event["kind"]] = kind_counts.get(event["kind"], 0) + 1
        if len(batch) >= EVENT_BATCH:
            flush()
    if batch:
        flush()

    edges: list[Edge] = []
    for source_pk, path, target in references:
        target_event = event_pk.get(target)
        target_object = None
        if target_event is None and target in object_pk:
            target_object, target_event = object_pk[target]
        edges.append(
            Edge(
                run=run,
                source_id=source_pk,
                field=path[:300],
                target_ref=_ref(target),
                target_event_id=target_event,
                target_object_id=target_object,
            )
        )
        if len(edges) >= EDGE_BATCH:
            Edge.objects.bulk_create(edges)
            edges.clear()
    if edges:
        Edge.objects.bulk_create(edges)

    findings = graph.findings()
    Finding.objects.bulk_create(
        [
            Finding(
                run=run,
                code=f.code,
                severity=f.severity,
                from_ref=_ref(f.from_),
                to_ref=_ref(f.to),
                from_event_id=event_pk.get(f.from_),
                to_event_id=event_pk.get(f.to),
                message=f.message,
            )
            for f in findings
        ]
    )
    run.event_count = count
    run.finding_count = len(findings)
    run.error_count = sum(1 for f in findings if f.severity == "error")
    run.final_state = last_state
    run.kind_counts = kind_counts
    run.first_logical_at = first_at
    run.last_logical_at = last_at
    run.save(
        update_fields=[
            "event_count",
            "kind_counts",
            "finding_count",
            "error_count",
            "final_state",
            "first_logical_at",
            "last_logical_at",
        ]
    )
    return ImportResult(run=run, events=count, findings=[f.to_json() for f in findings])
