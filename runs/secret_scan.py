"""The secret scan of a run bundle on import: DESIGN §7's promise ("nothing detected is ever written in the clear")
kept for runs as it is for captures, with the same rules (`n17q_secrets`).

What is scanned, before any of it is stored: the manifest's `run`, every event, every blob. What is found is masked
in what is stored (`[masked:<rule>]` in text, `*` byte for byte in a binary blob) and recorded as a `MaskedSecret`
(where, which rule, a masked preview; never the value), shown on the run page and in `import_run --json`.

How references stay consistent (docs/decisions.md, "Secrets in run bundles"):

- A blob is content-addressed. A masked blob is stored under the digest of its masked bytes; every event that names
  the blob (`tool.result.blob`, `command.receipt.output_blob`, a converter's provenance: any string equal to its
  digest) and the run's blob list are rewritten to that digest,
  so the run never names bytes the store does not hold, and a replay package built from the run carries the masked
  bytes under their own digest. The digest the harness recorded is not kept: it is a plain SHA-256 of bytes that
  held a secret, an offline oracle for a short one when the rest of the blob is visible. Kept instead, on the
  `MaskedSecret`, is an HMAC of it under the server's key (`recorded_as`): the console can still tell whether a
  digest someone holds is the one the harness recorded, nobody else can test guesses against it.
- An event's ids and references are its graph. A secret found in one (an event id, an attempt, a `*_id`, any
  reference) cannot be masked without breaking the graph: the import is refused, naming the line and the field.
- The bundle's digest (`Run.bundle_digest`) is then keyed too (`hmac:`), for the same reason as a blob's.

Events are validated and scanned ahead of the importer (`EventsAhead`, `n17q_secrets.events_check`), a megabyte of
lines at a time: in a thread for a small file, in a child process (another core) for a large one. The importer parses
a line only once the check has passed it, waits only when it catches up, and commits only when the whole file passed
and the bytes it stored are the bytes that were checked.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from stat import S_ISREG
from typing import IO, Any, NoReturn

from django.utils.crypto import salted_hmac

from n17q_engine import bundle
from n17q_engine import vocabulary as v
from n17q_engine.bundle import BundleError
from n17q_secrets import events_check, gate, scanning

from .models import Blob

MAX_SCANNED_BLOB_BYTES = 64 * 1024 * 1024  # a blob is scanned whole; a larger one is refused, never stored unscanned
# events.jsonl files this large are checked (validated, scanned) in a child process, on another core: about 20,000
# events. A smaller one is checked in a thread, where the child's start (about 0.2 s) would cost more than it saves.
CHECK_IN_CHILD_BYTES = 8 * 1024 * 1024
# Where the child process finds the project's packages (the folder holding n17q_secrets), whatever the caller's cwd.
_PROJECT_ROOT = Path(events_check.__file__).resolve().parent.parent


def digest_key() -> bytes:
    """The server's key for the digests kept of what was masked (derived from SECRET_KEY for this one purpose)."""
    return salted_hmac("n17q.run-bundle-masked-digest", "key", algorithm="sha256").digest()


def keyed(data: bytes, key: bytes) -> str:
    return "hmac:" + hmac.new(key, data, hashlib.sha256).hexdigest()


@dataclass
class BundleMasks:
    """What the scan found and changed in one bundle."""

    found: list[dict[str, str]] = field(default_factory=list)  # {place, event, path, rule, preview, blob, recorded_as}
    blob_remap: dict[str, str] = field(default_factory=dict)  # recorded digest -> digest of the masked bytes
    before: int = 0  # the first `before` of `found` were masked by the door before the bundle was made

    @classmethod
    def masked_before(cls, found: Sequence[Mapping[str, str]]) -> BundleMasks:
        """Masks that begin with what a door masked before the bundle was made (the OTLP receiver masks each request
        on arrival): recorded as the run's masked secrets, but not in the bundle's bytes."""
        before = [
            {"place": m.get("place", "received"), "path": m["path"], "rule": m["rule"], "preview": m["preview"]}
            for m in found
        ]
        return cls(found=before, before=len(before))

    @property
    def masked(self) -> bool:
        """Whether the bundle's own bytes held a secret (then its digest is kept keyed)."""
        return len(self.found) > self.before


# --- the manifest's run --------------------------------------------------------------------------------------------

_RUN_IDENTITY = (("id",), ("task", "id"), ("parent_run",), ("scenario", "name"))


def mask_run(run_meta: dict[str, Any], masks: BundleMasks) -> dict[str, Any]:
    """The manifest's `run` with what the scan finds masked; BundleError when that would change an id it holds."""
    found: list[dict[str, str]] = []
    masked = scanning.mask_json(run_meta, "run", found)
    if not found:
        return run_meta
    for path in _RUN_IDENTITY:
        if _at(masked, path) != _at(run_meta, path):
            raise BundleError(
                f"run.{'.'.join(path)} holds what the secret scan finds ({found[0]['rule']}); an id cannot be masked",
                file="manifest.json",
                field="run." + ".".join(path),
            )
    masks.found += [{"place": "manifest", **f} for f in found]
    return masked


def _at(value: Any, path: tuple[str, ...]) -> Any:
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


# --- blobs --------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScannedBlob:
    """A blob scanned before its import: its media type as scanned, its bytes as they may be stored, the findings."""

    media_type: str
    masked: bytes
    found: tuple[dict[str, str], ...]
    not_storable: str = ""  # why it cannot be stored (gate.NotStorable), when it cannot


def scan_blob_ahead(data: bytes, media_type: str, *, otlp_json: bool = False) -> tuple[str, ScannedBlob | None]:
    """Scan a blob before the bundle naming it is imported, for `mask_blobs(prescanned=...)`: the import door scans a
    trace file's original while its runs are still being converted (in another process), instead of after. None
    when it cannot be scanned whole (`mask_blobs` then says what becomes of it). `otlp_json`: an OTLP/JSON export
    (an OTLP file's original), scanned a piece at a time (`gate.mask_otlp_json`); one that cannot be is answered
    with why (`not_storable`), so that `mask_blobs` does not read it whole instead."""
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    found: list[dict[str, str]] = []
    try:
        if otlp_json:
            masked = gate.mask_otlp_json(data, where="blob", findings=found)
        else:
            masked = _mask_blob_bytes(data, media_type, found)
    except gate.NotStorable as exc:
        return digest, ScannedBlob(media_type, b"", (), not_storable=str(exc)) if otlp_json else None
    return digest, ScannedBlob(media_type, masked, tuple(found))


# An original kept for provenance (a converter's `source-log`, `source-otlp`...: the file the run was made from) that
# cannot be scanned whole is not kept; the run keeps its keyed digest instead (issue 32). Any other blob that cannot
# be is refused with the import, as a blob past the scan's size is: nothing is stored unscanned.
ORIGINAL_ROLE_PREFIX = "source-"
NOT_KEPT_RULE = "original-not-kept"


def mask_blobs(
    blob_paths: dict[str, Path],
    manifest: bundle.Manifest,
    workdir: Path,
    masks: BundleMasks,
    *,
    prescanned: Mapping[str, ScannedBlob] | None = None,
) -> tuple[dict[str, Path], bundle.Manifest]:
    """Every blob scanned; one that holds a secret is written masked into `workdir` and listed under the digest of
    its masked bytes. Returns the blobs to store and the manifest that names them. `prescanned`: blobs the caller
    scanned ahead (`scan_blob_ahead`), by digest; each is used only for the media type it was scanned as (the
    digest was verified against the bundle's file before this is called)."""
    key = digest_key()
    paths = dict(blob_paths)
    entries = dict(manifest.blobs)
    # Blob rows are written by the importer alone, after this scan: bytes the store already holds under their own
    # digest were scanned on their way in and held nothing (masked bytes are stored under the masked digest). Not
    # scanning them again matters for a converted file whose runs all keep the same original (one OTLP file, ten
    # traces: ten scans of the whole file before this).
    held = set(Blob.objects.filter(digest__in=list(blob_paths)).values_list("digest", flat=True))
    for digest, path in sorted(blob_paths.items()):
        if digest in held:
            continue
        size = path.stat().st_size
        if size > MAX_SCANNED_BLOB_BYTES:
            raise BundleError(
                f"blob is larger than {MAX_SCANNED_BLOB_BYTES} bytes, which the secret scan reads whole",
                file=f"blobs/sha256/{digest.removeprefix('sha256:')}",
            )
        ahead = prescanned.get(digest) if prescanned else None
        if ahead is not None and ahead.media_type == entries[digest].media_type:
            if ahead.not_storable:
                _not_kept(digest, ahead.not_storable, paths, entries, masks, key)
                continue
            masked, found = ahead.masked, list(ahead.found)
        else:
            found = []
            try:
                masked = _mask_blob_bytes(path.read_bytes(), entries[digest].media_type, found)
            except gate.NotStorable as exc:
                _not_kept(digest, str(exc), paths, entries, masks, key)
                continue
        if not found:
            continue
        new_digest = "sha256:" + hashlib.sha256(masked).hexdigest()
        target = workdir / new_digest.removeprefix("sha256:")
        target.write_bytes(masked)
        entry = entries.pop(digest)
        del paths[digest]
        paths[new_digest] = target
        entries.setdefault(
            new_digest, bundle.BlobEntry(new_digest, entry.media_type, len(masked), entry.role, entry.retention)
        )
        masks.blob_remap[digest] = new_digest
        recorded_as = keyed(digest.encode("ascii"), key)
        for f in found:
            masks.found.append(
                {
                    "place": "blob",
                    **f,
                    "path": "blob " + new_digest + f["path"].removeprefix("blob"),
                    "blob": new_digest,
                    "recorded_as": recorded_as,
                }
            )
    return paths, bundle.Manifest(run=manifest.run, blobs=entries)


def _not_kept(
    digest: str,
    why: str,
    paths: dict[str, Path],
    entries: dict[str, bundle.BlobEntry],
    masks: BundleMasks,
    key: bytes,
) -> None:
    """A blob that cannot be scanned whole: an original is dropped, and every place the run named it names its keyed
    digest instead (which says what it was to whoever holds the file, and is no oracle for anyone else); any other
    blob refuses the import."""
    entry = entries[digest]
    if not entry.role.startswith(ORIGINAL_ROLE_PREFIX):
        raise BundleError(
            f"blob cannot be scanned whole for secrets, so it cannot be stored: {why}",
            file=f"blobs/sha256/{digest.removeprefix('sha256:')}",
        )
    kept_as = keyed(digest.encode("ascii"), key)
    del entries[digest], paths[digest]
    masks.blob_remap[digest] = kept_as
    masks.found.append(
        {
            "place": "blob",
            "path": f"blob {kept_as} ({entry.role}, {entry.media_type})",
            "rule": NOT_KEPT_RULE,
            "preview": f"not kept: {why}"[:100],
            "recorded_as": kept_as,
        }
    )


PROTOBUF_TYPES = gate.PROTOBUF_TYPES


def mask_otlp_protobuf(raw: bytes, where: str, found: list[dict[str, str]]) -> bytes:
    """An OTLP protobuf request masked byte for byte and never past a value: the body still parses, and the byte
    ranges a converted run's events name in it (an OTLP original) still hold their spans. It is scanned by its texts
    (`otlp_strings`). The OTLP file door's original and the receiver's buffered requests (otlp_receiver) alike."""
    return gate.mask_bytes(raw, media_type="application/x-protobuf", where=where, findings=found)


def _mask_blob_bytes(raw: bytes, media_type: str, found: list[dict[str, str]]) -> bytes:
    # The storage gate's masking (n17q_secrets.gate), as bytes: the scan digests the masked bytes before storing them.
    # gate.NotStorable when it is a container that cannot be rebuilt masked (the caller decides what becomes of it).
    return gate.mask_bytes(raw, media_type=media_type, where="blob", findings=found)


# --- events -------------------------------------------------------------------------------------------------------


class EventsCheckProcess:
    """A process that checks events.jsonl files (`python -m n17q_secrets.events_check --serve`), one after the other,
    for every run of one file's import: the rules are compiled once per file, not once per run (a 100,000-span OTLP
    file is ten runs: 3 s of a core otherwise). Started on first use; a check left before its end (the importer
    stopped, the process died) discards it, and the next run starts a fresh one. Used by one import, one run at a
    time (`EventsAhead`); closed at the end of the import (`with`)."""

    def __init__(self) -> None:
        self._child: subprocess.Popen[bytes] | None = None
        self._stderr: IO[bytes] | None = None

    def __enter__(self) -> EventsCheckProcess:
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.close()
        else:
            # A refused import does not wait for the process to end on its own (it may still be starting: `start`).
            self.discard()

    def start(self) -> EventsCheckProcess:
        """Start the process now, if it is not running: it starts and compiles its rules (half a second of a core)
        while the caller does something else, rather than when the first events.jsonl is ready to check. Started
        and never asked, it is closed with the rest (`close`)."""
        if self._child is None or self._child.poll() is not None:
            self.discard()
            # Never a pipe: a process that lives long must never block on it. Closed by discard().
            self._stderr = tempfile.TemporaryFile()  # noqa: SIM115
            self._child = subprocess.Popen(
                [sys.executable, "-m", "n17q_secrets.events_check", "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self._stderr,
                cwd=_PROJECT_ROOT,
            )
        return self

    def check(self, path: Path) -> subprocess.Popen[bytes]:
        """The process, told to check `path` next: its answers are the next lines of its stdout, up to the path's last
        message (`done`, `error` or `failure`)."""
        self.start()
        assert self._child is not None and self._child.stdin is not None
        try:
            self._child.stdin.write(json.dumps(str(path)).encode() + b"\n")
            self._child.stdin.flush()
        except OSError:
            pass  # it died: its stdout ends, and the check says how it exited
        return self._child

    def last_words(self) -> str:
        """How the process ended, in one line (it has ended or is being killed)."""
        if self._child is None:
            return "no process"
        status = self._child.wait()
        last: list[str] = []
        if self._stderr is not None:
            self._stderr.seek(0)
            last = self._stderr.read()[-2000:].decode("utf-8", "replace").strip().splitlines()
        return f"exit status {status}" + (f": {last[-1]}" if last else "")

    def kill(self) -> None:
        if self._child is not None and self._child.poll() is None:
            self._child.kill()

    def discard(self) -> None:
        """Kill and reap the process (a check left before its end): the next check starts a fresh one."""
        child, self._child = self._child, None
        if child is not None:
            if child.poll() is None:
                child.kill()
            child.wait()
            _close_pipes(child)
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def close(self) -> None:
        """Let the process end (its stdin closed), killing it if it does not."""
        child = self._child
        if child is not None and child.stdin is not None:
            with contextlib.suppress(OSError):
                child.stdin.close()
            with contextlib.suppress(subprocess.TimeoutExpired):
                child.wait(timeout=10)
        self.discard()


def _close_pipes(child: subprocess.Popen[bytes]) -> None:
    for stream in (child.stdin, child.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()


class EventsAhead:
    """events.jsonl checked ahead of the importer (`n17q_secrets.events_check`, issue 31): for a large file every line
    validated and scanned in a process of its own (another core; `process`, the import's `EventsCheckProcess` when it
    has one, else one for this file alone), the importer reading lines it need not validate again (`validates`); for a
    small file scanned in a thread (RE2 lets the interpreter's lock go while it matches), the importer validating each
    line as it reads it, as before.

    `values_for(line)` waits until that line has passed the check and gives the values the scan found in it
    (`{value: rule}`), or None; for a line the check refused it raises the check's BundleError. `finish(...)` waits
    for the end of the check and compares the digest of the bytes it checked with the digest of the bytes the importer
    read: the file cannot change between the two reads unnoticed. The import commits only after both. A check that
    stopped (a killed process, a bug) refuses the import: nothing unchecked is ever stored."""

    def __init__(self, events_path: Path, process: EventsCheckProcess | None = None) -> None:
        self._path = events_path
        self._in_process = events_path.stat().st_size < CHECK_IN_CHILD_BYTES
        self._process = process
        self._own_process = False
        self._flagged: dict[int, dict[str, str]] = {}
        self._through = 0
        self._finished = False
        self._stopping = False
        self._error: BundleError | None = None
        self._failure = ""
        self._sha256 = ""
        self._lines = 0
        self._ready = threading.Condition()
        self._child: subprocess.Popen[bytes] | None = None
        self._thread = threading.Thread(target=self._run, name="n17q-events-check", daemon=True)

    @staticmethod
    def checked_in_child(events_path: Path) -> bool:
        """Whether the check of this file will run in a process (a large file), rather than in a thread; False for a
        path that is not a regular file (the importer refuses it before any check)."""
        try:
            stat = events_path.lstat()
        except OSError:
            return False
        return S_ISREG(stat.st_mode) and stat.st_size >= CHECK_IN_CHILD_BYTES

    @property
    def in_child_process(self) -> bool:
        return not self._in_process

    @property
    def validates(self) -> bool:
        """Whether this check validates every line (the importer then reads them unchecked), or only scans them."""
        return not self._in_process

    def __enter__(self) -> EventsAhead:
        if self._in_process:
            # The rules are compiled on first use, once per process (0.15 s): here, before the thread starts, or in a
            # fresh process this thread and the importer (scanning the manifest meanwhile) would each compile them.
            scanning.scan_lines("")
        else:
            if self._process is None:
                self._process, self._own_process = EventsCheckProcess(), True
            self._child = self._process.check(self._path)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        with self._ready:
            self._stopping = True
            left_early = not self._finished
        if self._process is not None and left_early:
            self._process.kill()  # its stdout ends: the thread reading it returns
        self._thread.join()
        if self._process is not None and left_early:
            # A check left before its last message would answer the next run with this one's: the process goes.
            self._process.discard()
        elif self._process is not None and self._own_process:
            self._process.close()

    def values_for(self, line_no: int) -> dict[str, str] | None:
        if line_no > self._through:
            with self._ready:
                while line_no > self._through and not self._finished:
                    self._ready.wait()
            if line_no > self._through:
                self._raise()
        return self._flagged.pop(line_no, None)

    def finish(self, *, lines: int, sha256: str) -> None:
        """The whole file passed the check, and it is the file the importer read (`lines` lines, `sha256`)."""
        with self._ready:
            while not self._finished:
                self._ready.wait()
        if not self._sha256:
            self._raise()
        if self._lines != lines or self._sha256 != sha256:
            raise BundleError("changed while it was being imported; import it again", file="events.jsonl")

    def _raise(self) -> NoReturn:
        if self._error is not None:
            raise self._error
        raise BundleError(f"the check of events.jsonl stopped before its end ({self._failure or 'no answer'})")

    def _receive(self, message: dict[str, Any]) -> bool:
        """Take one message; True when it was the file's last."""
        with self._ready:
            if self._finished:
                return True
            if "through" in message:
                for line, values in message["flagged"].items():
                    self._flagged[int(line)] = values
                self._through = message["through"]
            elif "done" in message:
                self._through = self._lines = message["done"]
                self._sha256 = message["sha256"]
                self._finished = True
            elif "error" in message:
                e = message["error"]
                self._error = BundleError(e["message"], file=e.get("file"), line=e.get("line"), field=e.get("field"))
                self._finished = True
            else:
                self._failure = str(message.get("failure", "an unknown message"))[:500]
                self._finished = True
            self._ready.notify_all()
            return self._finished

    def _take(self, message: dict[str, Any]) -> None:
        self._receive(message)

    def _run(self) -> None:
        try:
            if self._child is None:
                events_check.check_events(self._path, self._take, lambda: self._stopping, validate=False)
            else:
                assert self._child.stdout is not None and self._process is not None
                for raw in self._child.stdout:
                    if self._receive(json.loads(raw)):
                        return
                self._receive({"failure": self._process.last_words()})
        except Exception as exc:  # the importer fails closed on it
            self._receive({"failure": f"{type(exc).__name__}: {' '.join(str(exc).splitlines())[:300]}"})
        finally:
            self._receive({"failure": "stopped"})


def mask_event(
    event: dict[str, Any], known: dict[str, str] | None, masks: BundleMasks, *, line_no: int
) -> tuple[dict[str, Any], str | None]:
    """The event as it may be stored, and its JSON text (None when nothing changed: the line is stored as read).
    BundleError when a secret sits in one of its ids or references."""
    out = event
    if masks.blob_remap:
        # Every place the event names a masked blob, not only the vocabulary's blob fields: a converter's provenance
        # (`otlp.blob`, `inspect.sample_blob`…) names blobs too, and must not point at bytes the store never held.
        out = _remap_digests(event, masks.blob_remap)
    if known:
        found: list[dict[str, str]] = []
        masked = scanning.mask_json(out, f"events[{event['seq']}]", found, known=known)
        if found:
            _refuse_masked_identity(event, masked, found, line_no)
            out = masked
            masks.found += [{"place": "event", "event": event["id"], **f} for f in found]
    if out is event:
        return event, None
    return out, json.dumps(out, ensure_ascii=False)


def _remap_digests(value: Any, remap: dict[str, str]) -> Any:
    """`value` with every string that is a remapped blob digest replaced (the same object when none is)."""
    if isinstance(value, str):
        return remap.get(value, value)
    if isinstance(value, dict):
        changed = {k: _remap_digests(v_, remap) for k, v_ in value.items()}
        return value if all(changed[k] is value[k] for k in value) else changed
    if isinstance(value, list):
        items = [_remap_digests(v_, remap) for v_ in value]
        return value if all(a is b for a, b in zip(items, value, strict=True)) else items
    return value


def _refuse_masked_identity(
    event: dict[str, Any], masked: dict[str, Any], found: list[dict[str, str]], line_no: int
) -> None:
    def refuse(name: str) -> None:
        raise BundleError(
            f"{name} holds what the secret scan finds ({found[0]['rule']}); an id or a reference cannot be masked "
            "without breaking the run's graph",
            file="events.jsonl",
            line=line_no,
            field=name,
        )

    for name in ("id", "kind", "seq", "attempt", "at"):
        if masked.get(name) != event.get(name):
            refuse(name)
    before, after = v.references(event), v.references(masked)
    if before != after:
        changed = next((b for b, a in zip(before, after, strict=False) if b != a), before[-1] if before else None)
        refuse(changed[0] if changed else "a reference")
    if v.introduced_object(masked) != v.introduced_object(event):
        refuse("the id of the object it introduces")
