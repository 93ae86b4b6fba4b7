"""Importing a run bundle: streamed, verified, all or nothing (DESIGN §3).

The order matters for "nothing is stored" on refusal:
1. the archive is unpacked (safely) into a private temporary folder;
2. the manifest is parsed and every blob is hashed against its digest before anything is written;
3. the run's events (in batches, never the whole file in memory), objects, edges and lineage findings are written
   (findings too in batches, as the checker yields them: the answer carries the first FINDINGS_IN_ANSWER and counts
   them all); blob files new to the store are written just before and removed again on refusal;
4. the run is published: its row (or, when it was written first, its summary), its blobs' rows, its masked secrets
   and the audit record.

On PostgreSQL, 3 and 4 are one transaction. On SQLite (runs.import_slices) each batch of 3 is a short transaction
of its own and the run's row is written last, in 4's one short transaction: nothing reads the rows before it
exists, other writers never wait long behind the import, and a refusal removes the rows it wrote.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import tempfile
from array import array
from bisect import bisect_left
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.storage import storages
from django.db import IntegrityError, connection, transaction
from django.urls import reverse

from accounts.audit import audit_record
from console.blob_store import BlobStoreRefused, blob_put
from n17q_engine import archive, bundle, identifiers
from n17q_engine import vocabulary as v
from n17q_engine.budget import checkpoint
from n17q_engine.bundle import BundleError, parse_iso
from n17q_engine.facts import FactBuilder
from n17q_engine.lineage import LineageGraph
from n17q_engine.run_summary import SummaryBuilder
from n17q_secrets import gate

from . import import_slices, secret_scan
from .bulk import Appender, BackgroundInserts, KeysAhead, datetime_adapter, fewer_collections
from .facts import required_for
from .models import (
    SEARCH_VALUE_CHARS,
    SEARCH_VALUES_MAX,
    Blob,
    BlobDeletion,
    Edge,
    Event,
    Finding,
    MaskedSecret,
    Run,
    RunBlob,
    RunObject,
    RunSummary,
    blob_storage_name,
)
from .retention import run_blobs_hold
from .secret_scan import BundleMasks, EventsAhead
from .summary import MESSAGES_IN_TEXT, summary_row

log = logging.getLogger(__name__)

EVENT_BATCH = 2000
EDGE_BATCH = 5000
# Findings are written as the checker yields them, this many rows at a time; the import's answer carries the
# first FINDINGS_IN_ANSWER of them and counts the rest (GET /api/v1/runs/{id}/findings/ lists them all).
FINDING_BATCH = 2000
FINDINGS_IN_ANSWER = 100
# Event keys reserved up front (a list of ints: 100,000 of them are about 4 MB); a larger run reserves the rest
# in blocks of 10 batches as it goes.
PRIMED_EVENT_KEYS = 100_000
MANIFEST_MAX_BYTES = bundle.MANIFEST_MAX_BYTES


@dataclass(frozen=True)
class ImportResult:
    run: Run
    events: int
    # The run's first findings (at most FINDINGS_IN_ANSWER, in the checker's order); `finding_count` counts them all.
    findings: list[dict[str, Any]]
    # What the secret scan masked before storing (runs.secret_scan): {place, event, path, rule, preview}.
    masked_secrets: list[dict[str, str]]
    finding_count: int = 0
    # The run's search summary (runs.models.RunSummary), written with the run's row by _publish.
    summary: RunSummary | None = None

    @property
    def findings_truncated(self) -> bool:
        return self.finding_count > len(self.findings)

    def to_json(self) -> dict[str, Any]:
        return {
            "run": self.run.run_id,
            "events": self.events,
            "findings": self.findings,
            # Added keys (DESIGN §10): `findings` holds at most the first FINDINGS_IN_ANSWER; how many there are,
            # whether some were left out, and where every one of them is listed (paginated).
            "finding_count": self.finding_count,
            "findings_truncated": self.findings_truncated,
            "findings_url": findings_url(self.run.run_id),
            "masked_secrets": self.masked_secrets,
            # Added key (DESIGN §10): the checks that had nothing to judge in this run.
            "unevaluated": self.run.unevaluated,
        }


def findings_url(run_id: str) -> str:
    """Where a run's findings are listed, page by page (`?limit=&offset=`)."""
    return reverse("api-run-findings", kwargs={"run_id": run_id})


def _audit_refusals(describe: Any) -> Any:
    """Record a refused import in the audit log too: who tried to add what to history, and why not."""

    def wrap(function: Any) -> Any:
        @functools.wraps(function)
        def audited(source: Any, *, user: Any = None, **options: Any) -> ImportResult:
            try:
                return function(source, user=user, **options)
            except BundleError as exc:
                audit_record(
                    actor=user,
                    action="run.import_refused",
                    target=describe(source),
                    detail={"error": " ".join(str(exc).splitlines())[:1000]},
                )
                raise

        return audited

    return wrap


@_audit_refusals(lambda path: str(path))
def run_import_from_path(path: Path, *, user: Any = None, made_by_replay: int | None = None) -> ImportResult:
    """Import a bundle given as a folder, a .zip or a .tar.gz on disk. `made_by_replay`: the pk of the replay whose
    worker, holding its claim, imports the sandbox's log as the replay's child run (only then may the run's id be
    in the replays' namespace: identifiers.DERIVED_RUN_IDS)."""
    try:
        path = Path(path)
        exists = path.exists()
    except (OSError, ValueError):  # a NUL in the name, a name too long for the file system
        exists = False
    if not exists:
        raise BundleError(f"{path} does not exist")
    if path.is_dir():
        return _import_root(archive.check_directory(path), user=user, made_by_replay=made_by_replay)
    with tempfile.TemporaryDirectory(prefix="n17q-bundle-") as tmp:
        root = archive.unpack(
            path,
            Path(tmp),
            max_bytes=settings.N17Q_MAX_BUNDLE_BYTES,
            max_members=settings.N17Q_MAX_BUNDLE_MEMBERS,
        )
        return _import_root(root, user=user, made_by_replay=made_by_replay)


@_audit_refusals(lambda upload: f"upload {getattr(upload, 'name', '') or ''}")
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


def _bundle_digest(manifest_raw: bytes, events_path: Path) -> tuple[str, int]:
    """The bundle's digest, and the number of lines of events.jsonl (at most one event each)."""
    h = hashlib.sha256(manifest_raw)
    lines = 0
    last = b"\n"
    with open(events_path, "rb") as fh:
        while block := fh.read(1 << 20):
            h.update(block)
            lines += block.count(b"\n")
            last = block[-1:]
    return "sha256:" + h.hexdigest(), lines + (last != b"\n")


def _import_root(
    root: Path,
    *,
    user: Any,
    made_by_replay: int | None = None,
    made_by: str | None = None,
    blobs_written: list[str] | None = None,
    prescanned: Mapping[str, secret_scan.ScannedBlob] | None = None,
    masked_before: Sequence[dict[str, str]] = (),
    events_check: secret_scan.EventsCheckProcess | None = None,
) -> ImportResult:
    with contextlib.ExitStack() as stack:
        if events_check is None and secret_scan.EventsAhead.checked_in_child(root / "events.jsonl"):
            # The checking process EventsAhead would start for this file, started first: it starts up and compiles
            # its rules (half a second of a core) while this process reads the manifest and hashes the blobs and the
            # bundle.
            events_check = stack.enter_context(secret_scan.EventsCheckProcess()).start()
        return _import_checked_root(
            root,
            user=user,
            made_by_replay=made_by_replay,
            made_by=made_by,
            blobs_written=blobs_written,
            prescanned=prescanned,
            masked_before=masked_before,
            events_check=events_check,
        )


def _import_checked_root(
    root: Path,
    *,
    user: Any,
    made_by_replay: int | None = None,
    made_by: str | None = None,
    blobs_written: list[str] | None = None,
    prescanned: Mapping[str, secret_scan.ScannedBlob] | None = None,
    masked_before: Sequence[dict[str, str]] = (),
    events_check: secret_scan.EventsCheckProcess | None = None,
) -> ImportResult:
    """`made_by`: the subsystem importing a run it derived (identifiers.DERIVED_RUN_IDS: a converter); a replay's
    worker says `made_by_replay` instead.

    `blobs_written`: a caller importing several runs in one outer transaction (runs.import_formats) is told the
    blob files this import wrote, to remove them if its transaction does not commit either. `prescanned`: blobs that
    caller's secret scan has read already (secret_scan.scan_blob_ahead). `masked_before`: secrets the door masked
    before the bundle was made (import_formats.import_converted), recorded with the run's own. `events_check`: that
    caller's checking process, shared by its runs (else a large events.jsonl starts one of its own)."""
    manifest, manifest_raw = _read_manifest(root)
    # A run id a subsystem derives (a replay's, a trace's, an Inspect sample's) is that subsystem's alone: nobody
    # names a run ahead of it, so what it later makes is never refused as "already imported", or taken for another.
    maker = identifiers.REPLAY_MAKER if made_by_replay is not None else made_by
    reserved = identifiers.derived_run_id_problem(manifest.run["id"], made_by=maker)
    if reserved is not None:
        raise BundleError(reserved, file="manifest.json", field="run.id")
    events_path = root / "events.jsonl"
    if events_path.is_symlink() or not events_path.is_file():
        raise BundleError("events.jsonl is missing from the bundle")
    run_meta = manifest.run
    if Run.objects.filter(run_id=run_meta["id"]).exists():
        raise BundleError(f"run {run_meta['id']!r} is already imported; history is never replaced", field="run.id")
    # Every blob the bundle carries is hashed, even one whose digest the store holds already: a digest is a claim on
    # bytes, and only the bytes prove it (issue 33: junk of the right size once claimed another run's blob).
    blob_paths = bundle.verify_blobs(root, manifest)
    expired = sorted(d for d, e in manifest.blobs.items() if e.expired)
    if expired:
        # The one way to list a blob without its bytes: as bytes this console removed (a deletion record names the
        # digest), e.g. a reconstruction of a run whose blob expired. Such a listing adds no content and holds nothing
        # (retention.run_blobs_hold); a harness cannot call its own gaps "expired".
        recorded = set(BlobDeletion.objects.filter(digest__in=expired).values_list("digest", flat=True))
        for d in expired:
            if d not in recorded:
                raise BundleError(
                    "listed as expired, but this console holds no deletion record for it",
                    file="manifest.json",
                    field=f"blobs.{d}.expired",
                )
    digest, lines = _bundle_digest(manifest_raw, events_path)
    written: list[str] = []
    masks = BundleMasks.masked_before(masked_before)
    slices: import_slices.ImportSlices | None = None
    try:
        # The secret scan (runs.secret_scan) comes before anything is stored: the manifest's run and every blob
        # here; every event is scanned ahead of the event loop, which waits on it when it catches up (in a thread; for a
        # large file in a process of its own, which validates every line too: EventsAhead).
        with (
            tempfile.TemporaryDirectory(prefix="n17q-masked-") as workdir,
            EventsAhead(events_path, events_check) as scan,
            fewer_collections(),
        ):
            # PostgreSQL: the run's first event keys reserved meanwhile, on another connection (bulk.KeysAhead).
            keys_ahead = KeysAhead(Event._meta.db_table, min(lines, PRIMED_EVENT_KEYS)) if KeysAhead.wanted() else None
            run_meta = secret_scan.mask_run(run_meta, masks)
            blob_paths, manifest = secret_scan.mask_blobs(
                blob_paths, manifest, Path(workdir), masks, prescanned=prescanned
            )
            if import_slices.wanted(lines):
                # SQLite: the run is written in slices and published last, so that other writes never wait long
                # behind the import (runs.import_slices). A second import of this run waits here for this one.
                slices = import_slices.claim(run_meta["id"], cache_kib=_writer_cache_kib(lines))
            with _one_transaction(slices), _page_cache_for(lines):
                written.extend(_store_blob_files(blob_paths, announce=slices.will_write_blob_files if slices else None))
                if blobs_written is not None:
                    blobs_written.extend(written)
                result = _write_run(
                    run_meta,
                    manifest,
                    events_path,
                    digest,
                    user=user,
                    lines=lines,
                    scan=scan,
                    masks=masks,
                    made_by_replay=made_by_replay,
                    blob_paths=blob_paths,
                    written=written,
                    slices=slices,
                    keys_ahead=keys_ahead,
                )
    except IntegrityError as exc:
        _clean_up_refused(slices, written)
        # Two imports of the same run racing: the loser is told plainly.
        if Run.objects.filter(run_id=run_meta["id"]).exists():
            raise BundleError(f"run {run_meta['id']!r} is already imported; history is never replaced") from None
        raise BundleError(f"the bundle could not be stored ({exc.__class__.__name__})") from None
    except import_slices.ImportTakenOver as exc:
        _clean_up_refused(slices, written)
        raise BundleError(f"{exc}; nothing was stored, import it again") from None
    except BaseException:
        _clean_up_refused(slices, written)
        raise
    log.info("imported run %s: %s events, %s findings", result.run.run_id, result.events, result.finding_count)
    return result


def _one_transaction(slices: import_slices.ImportSlices | None) -> Any:
    """The import's one transaction, unless it writes in slices (runs.import_slices publishes the run itself)."""
    return transaction.atomic() if slices is None else nullcontext()


def _clean_up_refused(slices: import_slices.ImportSlices | None, written: list[str]) -> None:
    """After a refusal: the rows written in slices removed (a rolled-back transaction took the others with it), and
    the blob files this import wrote."""
    if slices is None:
        _remove_blobs(written)
        return
    try:
        slices.abandon()
        import_slices.remove_blob_files_nobody_holds(written)
    except Exception:  # the original error is what the caller must see; the record stays for the sweep
        log.exception("could not remove the rows of the refused import of %s; the sweep will", slices.run_id)


# SQLite's page cache (n17q_site.settings: 64 MiB per connection) pays off for a run whose pages fit in it; a run of
# more lines than this gains nothing from it (measured: 300,000 events import in the same time with 8 MiB) and would
# fill all of it with the transaction's pages, so its import runs with the smaller cache (issue 20: bounded memory).
LARGE_IMPORT_LINES = 200_000
LARGE_IMPORT_CACHE_KIB = 16 * 1024


@contextmanager
def _page_cache_for(lines: int) -> Iterator[None]:
    # In slices, the writer's own connection gets the smaller cache (_writer_cache_kib); this one writes little.
    if connection.vendor != "sqlite" or lines <= LARGE_IMPORT_LINES:
        yield
        return
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA cache_size")
        before = int(cursor.fetchone()[0])
        cursor.execute(f"PRAGMA cache_size = -{LARGE_IMPORT_CACHE_KIB}")
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"PRAGMA cache_size = {before}")


def _writer_cache_kib(lines: int) -> int | None:
    return LARGE_IMPORT_CACHE_KIB if lines > LARGE_IMPORT_LINES else None


def _store_blob_files(blob_paths: dict[str, Path], *, announce: Callable[[list[str]], None] | None = None) -> list[str]:
    """Write the blob files new to the store; return the names written so a refusal can remove them. Their rows
    come when the run is published (_store_blob_rows). `announce` is told the names before any is written."""
    store = storages["blobs"]
    written: list[str] = []
    new = {digest: path for digest, path in sorted(blob_paths.items()) if not store.exists(blob_storage_name(digest))}
    if announce is not None:
        announce([blob_storage_name(digest) for digest in new])
    for digest, path in new.items():
        # Every path here was scanned by secret_scan.mask_blobs before this (it replaced a blob holding a secret
        # with its masked copy under the masked digest), or carries a digest a Blob row names: the same bytes,
        # content-addressed, scanned clean when that row was first written.
        gated = gate.already_masked(path, by="runs.secret_scan.mask_blobs")
        try:
            stored = blob_put(gated, digest=digest)
        except BlobStoreRefused as exc:
            raise BundleError(str(exc)) from exc
        if stored.written:
            written.append(stored.name)
    return written


def _store_blob_rows(blob_paths: dict[str, Path]) -> None:
    existing = set(Blob.objects.filter(digest__in=list(blob_paths)).values_list("digest", flat=True))
    Blob.objects.bulk_create(
        [Blob(digest=d, size=p.stat().st_size) for d, p in sorted(blob_paths.items()) if d not in existing],
        ignore_conflicts=True,
    )


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


def _events(events_path: Path, checked: EventsAhead, digest: Any) -> Iterator[tuple[bundle.EventRecord, Any]]:
    """Each record once the check ahead has passed its line, with the values the scan found in it; validated here when
    the check only scans (a small file's, in a thread)."""
    with open(events_path, "rb") as fh:
        if checked.validates:
            for pair in bundle.iter_checked_records(fh, checked.values_for, digest=digest):
                checkpoint()  # a web request's budget (console.upload_budget), if one is open
                yield pair
        else:
            for record in bundle.iter_event_records(fh, digest=digest):
                checkpoint()
                yield record, checked.values_for(record.line)
    # Once more when every event is read, before the run is published: a budget spent by then undoes the rows.
    checkpoint(now=True)


def _verify_edges(run_pk: int, written: int) -> None:
    """Every edge this import wrote starts at an event of this run and ends, if anywhere, at an event or object
    of this run: the referential check the edge table's foreign keys would make row by row, made once, set-wise,
    over this run's rows only (through the events' (run, seq) and the edges' source index). A failure is a bug
    of the importer's, not of the bundle's, and rolls the whole import back."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            SELECT COUNT(*),
                   COUNT(*) FILTER (WHERE e.run_id <> s.run_id
                       OR (e.target_event_id IS NOT NULL AND (t.id IS NULL OR t.run_id <> s.run_id))
                       OR (e.target_object_id IS NOT NULL AND (o.id IS NULL OR o.run_id <> s.run_id)))
            FROM "{Event._meta.db_table}" s
            JOIN "{Edge._meta.db_table}" e ON e.source_id = s.id
            LEFT JOIN "{Event._meta.db_table}" t ON t.id = e.target_event_id
            LEFT JOIN "{RunObject._meta.db_table}" o ON o.id = e.target_object_id
            WHERE s.run_id = %s
            """,
            [run_pk],
        )
        joined, broken = cursor.fetchone()
    if joined != written or broken:
        raise IntegrityError(
            f"edge check failed for run {run_pk}: {written} written, {joined} start at its events, {broken} point "
            "outside it"
        )


def _verify_events(run_pk: int, written: int) -> None:
    """In slices, before the run is published: every event this import counted is stored under its key."""
    stored = Event.objects.filter(run_id=run_pk).count()
    if stored != written:
        raise IntegrityError(f"event check failed for run {run_pk}: {written} written, {stored} stored")


def _write_run(
    run_meta: dict[str, Any],
    manifest: bundle.Manifest,
    events_path: Path,
    digest: str,
    *,
    user: Any,
    lines: int,
    scan: EventsAhead,
    masks: BundleMasks,
    made_by_replay: int | None = None,
    blob_paths: dict[str, Path],
    written: list[str],
    slices: import_slices.ImportSlices | None = None,
    keys_ahead: KeysAhead | None = None,
) -> ImportResult:
    scenario = run_meta.get("scenario") or {}
    parent_ref = run_meta.get("parent_run") or ""
    run = Run(
        run_id=run_meta["id"],
        # Cut to its column: the secret scan may have masked part of it (a validated title fits).
        title=bundle.run_title(run_meta)[: Run._meta.get_field("title").max_length],
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
        made_by_replay=made_by_replay,
    )
    if slices is None:
        # First, as its rows name it (PostgreSQL's COPY checks their keys at once: BackgroundInserts).
        run.save(force_insert=True)
    else:
        # Last (_publish): until then the rows name the key reserved for it, and nothing reads them.
        run.pk = slices.run_pk

    graph = LineageGraph(run_meta)
    # The facts read an approval's review object from the graph the import builds anyway (one graph, not two).
    facts = FactBuilder(run_meta, required=required_for(run.parent), graph=graph)
    # What the cross-run search reads of the run (runs.models.RunSummary), gathered as the events go by.
    search = SummaryBuilder.for_manifest(run_meta)
    started_at: Any = None
    events_out = Appender(
        Event._meta.db_table,
        ("id", "run_id", "seq", "event_id", "kind", "attempt_ref", "workspace_ref", "logical_at", "wall_at", "body"),
        id_block=10 * EVENT_BATCH,
    )
    objects_out = Appender(RunObject._meta.db_table, ("id", "run_id", "kind", "ref", "introduced_by_id"), id_block=1024)
    # Keys reserved before the writer thread starts: a reservation made while it streams a COPY waits for the
    # connection. Every line is at most one event; objects are far fewer than events.
    events_out.prime(min(lines, PRIMED_EVENT_KEYS), keys_ahead)
    objects_out.prime(objects_out.id_block)
    edges_out = Appender(
        Edge._meta.db_table, ("run_id", "source_id", "field", "target_ref", "target_event_id", "target_object_id")
    )
    db_datetime = datetime_adapter()
    event_pk = _EventKeys(graph)
    object_pk: dict[str, tuple[int, int]] = {}  # object ref -> (RunObject pk, introducing event pk)
    # What a row needs of each event, taken from it as it goes by: (seq, id, kind, attempt, workspace, the object it
    # introduces, its JSON text, logical, wall, its references). Not the decoded event itself: it is freed as soon as
    # it is read, while its memory is still in the cache, not a batch later (a tenth of the parser's time).
    batch: list[
        tuple[int, str, str, Any, str | None, tuple[str, str] | None, str, Any, Any, list[tuple[str, str]]]
    ] = []
    count = 0
    last_state = ""
    kind_counts: dict[str, int] = {}
    # What the run list searches (Run.tools, Run.destinations), gathered as the events go by.
    tools: set[str] = set()
    destinations: set[str] = set()
    first_at = last_at = None
    writer = BackgroundInserts(slices)
    edges_written = [0]

    def edge(source_pk: int, path: str, target: str) -> tuple[Any, ...] | None:
        # The objects first: a dict, and what most references name (the workspace an event acts on), where an
        # event's key is looked up through the graph's index (on disk for a large run). The reader keeps event and
        # object ids apart (one id names one thing), so the order changes no answer.
        found = object_pk.get(target)
        if found is not None:
            return (run.pk, source_pk, path[:300], _ref(target), found[1], found[0])
        target_event = event_pk.get(target)
        if target_event is None:
            return None
        return (run.pk, source_pk, path[:300], _ref(target), target_event, None)

    pending_objects: list[tuple[Any, ...]] = []
    pending_edges: list[tuple[Any, ...]] = []

    converted: list[Any] = [None, None]  # the last logical time and its column value, across batches

    def flush(final: bool = False) -> None:
        ids = events_out.take_ids(len(batch))
        rows, object_rows, edge_rows = [], [], []
        run_pk = run.pk
        for pk, (seq, event_id, kind, attempt, workspace, introduced, text, logical, wall, refs) in zip(
            ids, batch, strict=True
        ):
            event_pk.add(seq, pk)
            # The reader gives events of one moment the same time object (bundle.iter_checked_records): converted once.
            if logical is not converted[0]:
                converted[0], converted[1] = logical, db_datetime(logical)
            logical_db = converted[1]
            rows.append(
                (
                    pk,
                    run_pk,
                    seq,
                    event_id,
                    kind,
                    _ref(attempt or ""),
                    _ref(workspace or ""),
                    logical_db,
                    # One text for both clocks is parsed once (bundle._validate_event): converted once too.
                    logical_db if wall is logical else db_datetime(wall),
                    # The line as the check ahead scanned it (EventsAhead: every line, before it is parsed here),
                    # or as secret_scan.mask_event masked what that scan found: not scanned a second time.
                    gate.already_masked(text, by="runs.secret_scan.EventsAhead"),
                )
            )
            if introduced is not None:
                (object_id,) = objects_out.take_ids(1)
                object_pk[introduced[1]] = (object_id, pk)
                object_rows.append((object_id, run_pk, introduced[0], introduced[1], pk))
            for path, target in refs:
                if path == "attempt":  # the attempt is a column of its own, not an edge row
                    continue
                row = edge(pk, path, target)
                if row is not None:  # else named before it appeared: the graph keeps it (unresolved_references)
                    edge_rows.append(row)
        writer.submit(events_out, rows)
        # Objects and edges are few per event: they wait until a batch of them is worth a COPY of its own.
        # (An object follows the events that introduce it in the writer's queue; edges have no row-wise keys.)
        pending_objects.extend(object_rows)
        pending_edges.extend(edge_rows)
        if len(pending_objects) >= EDGE_BATCH or final:
            writer.submit(objects_out, pending_objects[:])
            pending_objects.clear()
        if len(pending_edges) >= EDGE_BATCH or final:
            writer.submit(edges_out, pending_edges[:])
            edges_written[0] += len(pending_edges)
            pending_edges.clear()
        batch.clear()

    try:
        read = hashlib.sha256()
        for (line_no, event, text, logical, wall), known in _events(events_path, scan, read):
            if known or masks.blob_remap:
                event, masked_text = secret_scan.mask_event(event, known, masks, line_no=line_no)
                text = masked_text or text
            kind = event["kind"]
            for name in v.BLOB_FIELDS.get(kind, ()):
                ref = event.get(name)
                if ref is not None and ref not in manifest.blobs:
                    raise BundleError(
                        f"names blob {ref} which manifest.json does not list",
                        file="events.jsonl",
                        line=line_no,
                        field=name,
                    )
            refs = v.references(event)
            graph.add(event, references=refs)
            facts.add(event)
            search.add(event)
            if started_at is None:
                started_at = wall
            first_at = first_at or logical
            last_at = logical
            if kind == "run.state":
                last_state = event["state"]
            elif kind == "tool.call" and len(tools) < SEARCH_VALUES_MAX:
                tools.add(event["tool"][:SEARCH_VALUE_CHARS])
            elif kind == "effect.intent" and len(destinations) < SEARCH_VALUES_MAX:
                destinations.add(event["destination"][:SEARCH_VALUE_CHARS])
            batch.append(
                (
                    event["seq"],
                    event["id"],
                    kind,
                    event["attempt"],
                    v.event_workspace(event),
                    v.introduced_object(event),
                    text,
                    logical,
                    wall,
                    refs,
                )
            )
            count += 1
            kind_counts[kind] = kind_counts.get(kind, 0) + 1
            if len(batch) >= EVENT_BATCH:
                flush()
        flush(final=True)
        # Every line passed the check, and the bytes checked are the bytes read here.
        scan.finish(lines=count, sha256=read.hexdigest())

        # What was named before it appeared: resolved now, or kept as a dangling edge (LIN011). The graph held these
        # references (on disk for a large run), in the order the events came; the attempt is a column, not an edge.
        edge_rows: list[tuple[Any, ...]] = []
        for source, path, target in graph.unresolved_references():
            if path == "attempt":
                continue
            source_pk = event_pk[source]
            edge_rows.append(edge(source_pk, path, target) or (run.pk, source_pk, path[:300], _ref(target), None, None))
            if len(edge_rows) >= EDGE_BATCH:
                writer.submit(edges_out, edge_rows)
                edges_written[0] += len(edge_rows)
                edge_rows.clear()
        writer.submit(edges_out, edge_rows)
        edges_written[0] += len(edge_rows)
        # The findings go through the writer too: in slices, a batch each (runs.import_slices).
        finding_count, error_count, first_findings, codes = _write_findings(run, graph, event_pk, writer)
    except BaseException:
        writer.abandon()
        raise
    writer.close()
    _verify_edges(run.pk, edges_written[0])
    if slices is not None:
        _verify_events(run.pk, count)

    if masks.masked:
        # The digest of bundle bytes that held a secret would be an oracle for it: kept keyed (runs.secret_scan).
        run.bundle_digest = secret_scan.keyed(digest.encode("ascii"), secret_scan.digest_key())
    run.masked_secret_count = len(masks.found)
    run.event_count = count
    run.finding_count = finding_count
    run.unevaluated = graph.unevaluated()
    run.error_count = error_count
    run.final_state = last_state
    run.kind_counts = kind_counts
    run.first_logical_at = first_at
    run.last_logical_at = last_at
    run.tools = "\n".join(sorted(tools))
    run.destinations = "\n".join(sorted(destinations))
    run.facts = facts.result()
    summary = summary_row(
        run,
        search.result(),
        codes=sorted(codes),
        messages=[f["message"] for f in first_findings[:MESSAGES_IN_TEXT]],
        started_at=started_at,
    )
    masked: list[dict[str, str]] = [
        {k: m[k] for k in ("place", "event", "path", "rule", "preview") if k in m} for m in masks.found
    ]
    result = ImportResult(
        run=run,
        events=count,
        findings=first_findings,
        masked_secrets=masked,
        finding_count=finding_count,
        summary=summary,
    )
    if slices is None:
        _publish(result, manifest, masks, event_pk, blob_paths=blob_paths, written=written, user=user, insert=False)
    else:
        with slices.publishing():
            _publish(result, manifest, masks, event_pk, blob_paths=blob_paths, written=written, user=user, insert=True)
    return result


def _publish(
    result: ImportResult,
    manifest: bundle.Manifest,
    masks: BundleMasks,
    event_pk: _EventKeys,
    *,
    blob_paths: dict[str, Path],
    written: list[str],
    user: Any,
    insert: bool,
) -> None:
    """The run's row (written, or given its summary), its blobs' rows and what holds them, its masked secrets and
    the audit record: inside the import's one transaction, or, in slices, the one short transaction that makes the
    run visible with everything it holds."""
    run = result.run
    if insert:
        # Another import's refusal may have removed a blob file this one found in the store and did not write: it
        # only removes files no Blob row names, holding the write lock, as this transaction does.
        written.extend(_store_blob_files(blob_paths))
    _store_blob_rows(blob_paths)
    if insert:
        run.save(force_insert=True)
    else:
        run.save(update_fields=RUN_SUMMARY_FIELDS)
    if result.summary is not None:
        result.summary.run_id = run.pk
        result.summary.save(force_insert=True)
    blob_ids = dict(Blob.objects.filter(digest__in=list(manifest.blobs)).values_list("digest", "id"))
    RunBlob.objects.bulk_create(
        [
            RunBlob(run=run, blob_id=blob_ids[d], media_type=e.media_type, role=e.role, retention=e.retention)
            for d, e in manifest.blobs.items()
        ]
    )
    # The run's hold on each blob (runs/retention.py): the class its bundle names, counted from when the run was
    # recorded; for what a replay's child read from the run it replays, that run's hold.
    holds = run_blobs_hold(run=run, carried=blob_paths.keys(), read_from=run.parent if run.made_by_replay else None)
    if holds.back:
        # Bytes the sweep had removed, stored again by this run: their rows are locked now, so a sweep that removed
        # the file while this import ran is over, and the file is written again if it went.
        written.extend(_store_blob_files({d: blob_paths[d] for d in holds.back}))
    if holds.not_held:
        # Read from a run whose hold on them has ended meanwhile: this run holds no bytes of them either.
        gone = {blob_storage_name(d) for d in holds.not_held}
        _remove_blobs([name for name in written if name in gone])
    MaskedSecret.objects.bulk_create(
        [
            MaskedSecret(
                run=run,
                place=m["place"],
                event_id=event_pk.get(m.get("event", "")),
                event_ref=_ref(m.get("event", "")),
                blob_digest=m.get("blob", ""),
                recorded_as=m.get("recorded_as", ""),
                path=m["path"][:500],
                rule=m["rule"][:100],
                preview=m["preview"][:100],
            )
            for m in masks.found
        ],
        batch_size=1000,
    )
    audit_record(
        actor=user,
        action="run.import",
        target=run.run_id,
        detail={
            "events": result.events,
            "findings": result.finding_count,
            "masked_secrets": len(result.masked_secrets),
            "bundle_digest": run.bundle_digest,
        },
    )


# What the import learns of a run as it goes, written when the run's row was written first (one transaction).
RUN_SUMMARY_FIELDS = [
    "event_count",
    "kind_counts",
    "finding_count",
    "unevaluated",
    "error_count",
    "final_state",
    "first_logical_at",
    "last_logical_at",
    "masked_secret_count",
    "bundle_digest",
    "tools",
    "destinations",
    "facts",
]


class _EventKeys:
    """Event id -> the pk of its row, without a dict of every id (issue 20: a million-event bundle's ids alone are
    a hundred megabytes there): the graph already knows each id's seq, seqs increase through the bundle (the
    reader refuses anything else), and the pks are kept here in that order, two machine integers per event."""

    def __init__(self, graph: LineageGraph) -> None:
        self._graph = graph
        self._seqs = array("q")
        self._pks = array("q")

    def add(self, seq: int, pk: int) -> None:
        self._seqs.append(seq)
        self._pks.append(pk)

    def get(self, event_id: str) -> int | None:
        seq = self._graph.seq_of(event_id)
        if seq is None:
            return None
        i = bisect_left(self._seqs, seq)
        return self._pks[i] if i < len(self._seqs) and self._seqs[i] == seq else None

    def __getitem__(self, event_id: str) -> int:
        pk = self.get(event_id)
        if pk is None:
            raise KeyError(event_id)
        return pk


def _write_findings(
    run: Run, graph: LineageGraph, event_pk: _EventKeys, writer: BackgroundInserts
) -> tuple[int, int, list[dict[str, Any]], set[str]]:
    """Write the run's findings as the checker yields them, FINDING_BATCH rows at a time, never all of them in
    memory at once (a bundle whose every event names something missing has a finding per event). Returns how many
    there are, how many are errors, the first FINDINGS_IN_ANSWER as the answer shows them, and their codes."""
    out = Appender(
        Finding._meta.db_table,
        ("run_id", "code", "severity", "from_ref", "to_ref", "from_event_id", "to_event_id", "message"),
    )
    rows: list[tuple[Any, ...]] = []
    first: list[dict[str, Any]] = []
    count = errors = 0
    codes: set[str] = set()
    for f in graph.iter_findings():
        count += 1
        codes.add(f.code)
        errors += f.severity == "error"
        if len(first) < FINDINGS_IN_ANSWER:
            first.append(f.to_json())
        rows.append(
            (
                run.pk,
                f.code,
                f.severity,
                _ref(f.from_),
                _ref(f.to),
                event_pk.get(f.from_),
                event_pk.get(f.to),
                f.message,
            )
        )
        if len(rows) >= FINDING_BATCH:
            writer.submit(out, rows)
            rows.clear()
    writer.submit(out, rows)
    return count, errors, first, codes
