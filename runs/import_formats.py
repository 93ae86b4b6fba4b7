"""The import doors recognise what they are given by its content (issue 17, point 3; DESIGN §10).

`import_run PATH`, `POST /api/v1/runs/` and the import page take a run bundle (folder, .zip, .tar.gz), an OTLP
trace file (JSON or protobuf: one run per trace) or an Inspect AI log (`.eval` or `.json`: one run per sample and
epoch). A file that is none of these is refused with one line naming what it looks like (n17q_engine.formats.sniff).

A converted file goes the bundle's way: each ConvertedRun is written as a bundle folder and imported by the same
all-or-nothing path (runs.importer._import_root), so every check, limit and secret scan applies unchanged. A file of
several runs imports all of them or none: one outer transaction around the per-run ones, and the blob files any of
them wrote are removed again when it does not commit.

The answer of a bundle keeps the shape of DESIGN §8 exactly. A converted file's answer has the same keys for its
first run, and adds `runs` (every run's answer) and `conversion` (what was mapped and what was not).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import zipfile
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from django.conf import settings
from django.db import transaction

from accounts.audit import audit_record
from n17q_engine.budget import checkpoint, remaining_wall
from n17q_engine.bundle import BundleError
from n17q_engine.formats import ConversionError, ConvertedRun, write_bundle
from n17q_engine.formats.inspect_log import looks_like_inspect_log
from n17q_engine.formats.otlp import MAX_ORIGINAL_BLOB_BYTES, looks_like_otlp
from n17q_engine.formats.sniff import describe
from n17q_engine.identifiers import INSPECT_MAKER, OTLP_MAKER

from . import secret_scan
from .importer import ImportResult, _import_root, _remove_blobs, run_import_from_path, run_import_from_upload

log = logging.getLogger(__name__)

HEAD = 64 * 1024
# A trace file or a log is converted in memory (the converters read bytes), so it has a cap of its own below the
# bundle's; a bundle is streamed and keeps N17Q_MAX_BUNDLE_BYTES.
CONVERTED_MAX_BYTES = 512 * 1024 * 1024
NOT_A_RUN = "not a bundle archive, an OTLP trace file or an Inspect log"
# The media type an OTLP file's original is kept under (n17q_engine.formats.otlp): scanned ahead of its runs.
ORIGINAL_MEDIA_TYPES = {"otlp-protobuf": "application/x-protobuf", "otlp-json": "application/json"}
# The subsystem each converter is, to the importer: the run ids it derives (`otlp-<trace id>`, `inspect-…`) are
# reserved to it (identifiers.DERIVED_RUN_IDS), and the door that runs it imports them as it (docs/decisions.md,
# issue 33: the OTLP file door runs the converter, so its `otlp-` runs are the converter's; a bundle is nobody's).
CONVERTER_MAKERS = {"otlp-protobuf": OTLP_MAKER, "otlp-json": OTLP_MAKER, "inspect": INSPECT_MAKER}
# Where the engine package lives: the converting process is started there, whatever the web process's cwd.
ENGINE_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class FileImport:
    """What one import door did with one file: the runs it made (one for a bundle), and for a converted file
    the conversion's report (format, mapped, unmapped, notes) over all of them, and each run's own."""

    results: list[ImportResult]
    conversion: dict[str, Any] | None = None
    per_run_conversion: tuple[dict[str, Any], ...] = ()

    @property
    def first(self) -> ImportResult:
        return self.results[0]

    def to_json(self) -> dict[str, Any]:
        answer = self.first.to_json()
        if self.conversion is None:
            return answer  # a bundle: DESIGN §8's shape, nothing added
        runs = [
            {**r.to_json(), "title": r.run.title, "conversion": c}
            for r, c in zip(self.results, self.per_run_conversion, strict=True)
        ]
        return {**answer, "runs": runs, "conversion": self.conversion}


def runs_import_from_path(path: Path, *, user: Any = None) -> FileImport:
    """Import what `path` holds: a bundle (folder, .zip, .tar.gz), an OTLP trace file or an Inspect log."""
    path = Path(path)
    try:
        is_file = path.is_file()
    except (OSError, ValueError):
        is_file = False
    if not is_file:
        return FileImport([run_import_from_path(path, user=user)])  # a folder, or its one-line refusal
    with open(path, "rb") as fh:
        if _is_bundle(fh):
            return FileImport([run_import_from_path(path, user=user)])
        size = path.stat().st_size
        fh.seek(0)
        return _convert_and_import(fh, size, user=user, label=str(path))


def runs_import_from_upload(upload: Any, *, user: Any = None) -> FileImport:
    """The same for an uploaded file (a Django UploadedFile): the API's door and the import page's."""
    if upload.size is not None and upload.size > settings.N17Q_MAX_BUNDLE_BYTES:
        raise BundleError(f"upload is larger than {settings.N17Q_MAX_BUNDLE_BYTES} bytes")
    upload.seek(0)
    if _is_bundle(upload.file):
        return FileImport([run_import_from_upload(upload, user=user)])
    upload.seek(0)
    return _convert_and_import(upload.file, upload.size, user=user, label=f"upload {upload.name or ''}")


def _is_bundle(fh: IO[bytes]) -> bool:
    """Whether the importer's archive path should read this file: a zip holding manifest.json (at its root or in
    its one folder), or a .tar.gz; also an archive too damaged to tell, so that its refusal is the archive reader's
    precise one. Reads the head, and a zip's central directory; leaves the position anywhere."""
    fh.seek(0)
    head = fh.read(HEAD)
    if head[:2] == b"PK":
        try:
            fh.seek(0)
            with zipfile.ZipFile(fh) as zf:
                names = zf.namelist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, RuntimeError, NotImplementedError):
            return looks_like_inspect_log(head) is None
        return any(n == "manifest.json" or (n.count("/") == 1 and n.endswith("/manifest.json")) for n in names)
    if head[:2] == b"\x1f\x8b":
        stream = zlib.decompressobj(zlib.MAX_WBITS | 16)
        try:
            inner = stream.decompress(head, 1024)
        except zlib.error:
            return True
        if len(inner) >= 262:
            return inner[257:262] == b"ustar"
        return not stream.eof  # cut short: the archive reader says how; a whole short stream is no tar
    return False


def _convert_and_import(fh: IO[bytes], size: int | None, *, user: Any, label: str) -> FileImport:
    limit = min(CONVERTED_MAX_BYTES, settings.N17Q_MAX_BUNDLE_BYTES)
    # Asked for what the file holds, not for the limit: a read of `limit + 1` allocates that much before it reads.
    data = fh.read((limit if size is None else min(size, limit)) + 1)
    if len(data) > limit:
        raise _refused(user, label, f"the file is larger than the {limit} bytes a trace file or a log may be")
    try:
        fmt = converter_format(data)
    except BundleError as exc:
        raise _refused(user, label, str(exc)) from None
    prescanned: dict[str, secret_scan.ScannedBlob] = {}

    def scan_original() -> None:
        # An OTLP file's original is kept by every one of its runs (role source-otlp): scanned here while the
        # worker converts the first run, not on the import's path after it.
        if fmt in ORIGINAL_MEDIA_TYPES and len(data) <= MAX_ORIGINAL_BLOB_BYTES:
            # An OTLP/JSON original a piece at a time, within the converter's caps (issue 35): whole, its dicts
            # took this process to 14 times the file.
            digest, scanned = secret_scan.scan_blob_ahead(data, ORIGINAL_MEDIA_TYPES[fmt], otlp_json=fmt == "otlp-json")
            if scanned is not None:
                prescanned[digest] = scanned

    with tempfile.TemporaryDirectory(prefix="n17q-converting-") as tmp:
        runs = _converted_by_worker(fmt, data, Path(tmp), while_converting=scan_original)
        return _import_prepared(
            runs,
            user=user,
            label=label,
            made_by=CONVERTER_MAKERS[fmt],
            prescanned=prescanned,
            # A file this large is converted into runs whose events.jsonl are checked in a process (EventsAhead):
            # started with the converter, it is ready when the first run is.
            start_check=len(data) >= secret_scan.CHECK_IN_CHILD_BYTES,
        )


def converter_format(data: bytes) -> str:
    """Which converter takes `data` (convert_worker.FORMATS); a BundleError naming what anything else looks like."""
    if looks_like_inspect_log(data) is not None:
        return "inspect"
    otlp = looks_like_otlp(data)
    if otlp is not None:
        return f"otlp-{otlp}"
    raise BundleError(f"{NOT_A_RUN}: this is {describe(data)}")


@dataclass(frozen=True)
class _Prepared:
    """One converted run written as a bundle folder, ready for the importer."""

    root: Path
    run_id: str
    report: dict[str, Any]
    total: int | None = None  # the file's runs, when known before they are all converted


# How long the converting process may stay silent (between two runs) before the import gives up on it.
WORKER_SILENCE_S = 600.0


def _converted_by_worker(
    fmt: str, data: bytes, tmp: Path, *, while_converting: Callable[[], None] | None = None
) -> Iterator[_Prepared]:
    """The file's runs, converted and written by a process of its own (n17q_engine.formats.convert_worker) while the
    caller imports the previous one; after each, the caller's next() tells the worker that run is stored (its
    folder removed), which lets it write one more. ConversionError/BundleError as the converter said them; a worker
    that dies or hangs is a one-line BundleError, and it is always killed and reaped."""
    source = tmp / "source"
    source.write_bytes(data)
    out = tmp / "runs"
    out.mkdir()
    stderr_path = tmp / "worker.err"
    with open(stderr_path, "wb") as err:
        worker = subprocess.Popen(
            [
                *(sys.executable, "-m", "n17q_engine.formats.convert_worker", fmt, str(source), str(out)),
                *("--memory-mb", str(settings.N17Q_CONVERT_MEMORY_MB)),
                *("--cpu-seconds", str(settings.N17Q_CONVERT_CPU_S)),
            ],
            cwd=ENGINE_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            env=_worker_environment(),
        )
    assert worker.stdin is not None and worker.stdout is not None
    lines = _lines_within(worker.stdout, WORKER_SILENCE_S)
    try:
        if while_converting is not None:
            while_converting()
        for line in lines:
            try:
                message = json.loads(line)
            except ValueError:
                message = None
            if not isinstance(message, dict):
                break
            if message.get("done"):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.wait(timeout=10)  # it is exiting: let it (it is killed below if it does not)
                return
            if "error" in message:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    worker.wait(timeout=10)  # its last word said, it is exiting with its status: let it
                error = str(message["error"])
                raise ConversionError(error) if message.get("kind") == "conversion" else BundleError(error)
            yield _Prepared(Path(message["folder"]), str(message["run_id"]), message["report"], message.get("total"))
            with contextlib.suppress(OSError):  # a worker that has finished reads no more
                worker.stdin.write(b"stored\n")
                worker.stdin.flush()
        # Silence, or the pipe closed without the last word: the worker died (killed, out of memory, crashed).
        with contextlib.suppress(subprocess.TimeoutExpired):
            worker.wait(timeout=1)  # a closed pipe: its exit status is on its way
        silent = worker.poll() is None
        worker.kill()
        code = worker.wait()
        tail = (
            stderr_path.read_bytes().decode("utf-8", "replace").strip().splitlines()[-1:]
            if stderr_path.exists()
            else []
        )
        log.warning("the converting process stopped (exit %s): %s", code, tail[0][:500] if tail else "no message")
        raise BundleError(_stopped(None if silent else code))
    finally:
        if worker.poll() is None:
            worker.kill()
        worker.wait()
        for pipe in (worker.stdin, worker.stdout):
            with contextlib.suppress(OSError):
                pipe.close()


def _stopped(code: int | None) -> str:
    """Why the converting process ended without its last word, in one line (`code` None: it went silent and was
    stopped here). A kill names the limits it runs under: the kernel kills it at the CPU limit's hard edge (a C call
    that never returned to Python for the soft one) and when the host runs out of memory."""
    if code is None:
        why = f"it said nothing for {WORKER_SILENCE_S:.0f} s and was stopped"
    elif code in (-signal.SIGKILL, -signal.SIGXCPU):
        why = (
            f"its process was killed by signal {-code}; it may use {settings.N17Q_CONVERT_CPU_S} s of CPU time "
            f"and {settings.N17Q_CONVERT_MEMORY_MB} MiB of memory"
        )
    else:
        why = f"its process exited with status {code}"
    return f"the conversion stopped before the end of the file ({why}); nothing was imported"


# What the converting process inherits of the web process's environment: enough to run Python, nothing more. It
# reads an uploaded file, untrusted; it has no use for the database's address, the secret key or a broker's password.
_WORKER_ENVIRONMENT = ("PATH", "HOME", "TMPDIR", "LANG", "LC_ALL", "LC_CTYPE", "PYTHONHASHSEED", "SYSTEMROOT")


def _worker_environment() -> dict[str, str]:
    env = {name: os.environ[name] for name in _WORKER_ENVIRONMENT if name in os.environ}
    env["PYTHONPATH"] = str(ENGINE_ROOT)
    return env


def _lines_within(stream: IO[bytes], seconds: float) -> Iterator[bytes]:
    """The stream's lines, until it closes or stays silent for `seconds`."""
    selector = selectors.DefaultSelector()
    selector.register(stream, selectors.EVENT_READ)
    buffered = b""
    fd = stream.fileno()
    try:
        while True:
            newline = buffered.find(b"\n")
            if newline != -1:
                line, buffered = buffered[: newline + 1], buffered[newline + 1 :]
                yield line
                continue
            if not selector.select(timeout=remaining_wall(seconds)):
                checkpoint(now=True)  # a web request's budget ran out (BudgetExceeded), not the worker's silence
                return
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                return
            buffered += chunk
    finally:
        selector.close()


def import_converted(
    converted: Iterable[ConvertedRun],
    *,
    user: Any,
    label: str,
    made_by: str,
    on_stored: Callable[[list[ImportResult]], None] | None = None,
    masked_before: Sequence[dict[str, str]] = (),
) -> FileImport:
    """Import every run of one converted file, all or none, each written as a bundle folder and imported before the
    next is converted (the OTLP receiver's one trace; files go through the converting process instead). `made_by`:
    the converter that made them (identifiers.DERIVED_RUN_IDS), whose derived run ids they may hold.

    `on_stored`: called with the runs' results inside the import's transaction once every run is stored, so that
    what it writes commits with them (the receiver removes the buffered spans a run was made from, and records the
    run on its trace), and what it raises undoes the whole import, blob files included. `masked_before`: what the
    door masked before the runs were made ({place, path, rule, preview}: the receiver masks each request on
    arrival), recorded as each run's masked secrets beside what the import's own scan masks."""
    total = len(converted) if isinstance(converted, Sized) else None
    with tempfile.TemporaryDirectory(prefix="n17q-converted-") as tmp:
        return _import_prepared(
            _written(converted, Path(tmp), total),
            user=user,
            label=label,
            made_by=made_by,
            on_stored=on_stored,
            masked_before=masked_before,
        )


def _written(converted: Iterable[ConvertedRun], tmp: Path, total: int | None) -> Iterator[_Prepared]:
    for i, run in enumerate(converted):
        root = tmp / f"run-{i}"
        root.mkdir()
        write_bundle(run, root)
        prepared = _Prepared(root, str(run.run.get("id", "?")), run.report.to_json(), total)
        del run  # the converted events and blobs: on disk now, not needed in memory
        yield prepared


def _import_prepared(
    prepared: Iterator[_Prepared],
    *,
    user: Any,
    label: str,
    made_by: str,
    prescanned: Mapping[str, secret_scan.ScannedBlob] | None = None,
    on_stored: Callable[[list[ImportResult]], None] | None = None,
    masked_before: Sequence[dict[str, str]] = (),
    start_check: bool = False,
) -> FileImport:
    """`start_check`: start the runs' checking process now, before the first run is ready (else on first use)."""
    written: list[str] = []
    results: list[ImportResult] = []
    reports: list[dict[str, Any]] = []
    try:
        # One checking process for every run's events (the rules compiled once per file): secret_scan.EventsAhead.
        with secret_scan.EventsCheckProcess() as events_check, transaction.atomic():
            if start_check:
                events_check.start()
            for i, run in enumerate(prepared):
                checkpoint(now=True)
                reports.append(run.report)
                try:
                    results.append(
                        _import_root(
                            run.root,
                            user=user,
                            made_by=made_by,
                            blobs_written=written,
                            prescanned=prescanned,
                            masked_before=masked_before,
                            events_check=events_check,
                        )
                    )
                except BundleError as exc:
                    if run.total == 1:
                        raise
                    of = f" of {run.total}" if run.total else ""
                    raise BundleError(f"run {i + 1}{of} ({run.run_id}): {exc}") from None
                shutil.rmtree(run.root, ignore_errors=True)
            if not results:
                raise BundleError("the file holds no run (no trace, no sample)")
            if on_stored is not None:
                on_stored(results)
    except ConversionError as exc:
        _remove_blobs(written)
        raise _refused(user, label, " ".join(str(exc).splitlines())) from None
    except BundleError as exc:
        _remove_blobs(written)
        raise _refused(user, label, str(exc)) from None
    except BaseException:
        _remove_blobs(written)
        raise
    finally:
        close = getattr(prepared, "close", None)
        if close is not None:
            close()  # a converting process still running is killed and reaped now, not at garbage collection
    return FileImport(results, _merge_reports(reports), tuple(reports))


def _merge_reports(reports: list[dict[str, Any]]) -> dict[str, Any]:
    mapped: Counter[str] = Counter()
    unmapped: Counter[str] = Counter()
    notes: list[str] = []
    for report in reports:
        mapped.update(report["mapped"])
        unmapped.update(report["unmapped"])
        notes += [n for n in report["notes"] if n not in notes]
    return {
        "format": reports[0]["format"],
        "runs": len(reports),
        "mapped": dict(sorted(mapped.items())),
        "unmapped": dict(sorted(unmapped.items())),
        "notes": notes,
    }


def _refused(user: Any, label: str, message: str) -> BundleError:
    """The one-line refusal, recorded in the audit log too (after any rollback, so that it stays)."""
    message = " ".join(message.splitlines())
    audit_record(actor=user, action="run.import_refused", target=label, detail={"error": message[:1000]})
    return BundleError(message)
