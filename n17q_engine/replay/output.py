"""The output of a replay (DESIGN §5, §6): a manifest, the events as JSON lines, the blobs.

`ReplayOutput` is what a replay returns, how it crosses the sandbox's stdout (`to_wire`, and `from_wire`, which
checks it on the way back) and how it becomes a run bundle on disk (`write_bundle`). `_Log` holds a replay's
events as they are appended, each encoded once into the line the output will hold, and the blobs they name.
`_run_meta` is the manifest's `run` of a replay of either kind (the source's task, model and policy, the replay's
own id, a title naming the mode). A reconstruction (`_Reconstruction`) is output and nothing else: the source
run's events re-projected after a `replay.scope` note, with no model, no tools and no world.

The bottom of the package: it imports nothing from the other modules of `n17q_engine.replay`, so `ReplayError`,
which any of them raises for a replay that cannot start, lives here.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import canonical
from ..bundle import MAX_TITLE_CHARS, title_problem
from ..deciders import SourceRun
from ..facts import MODE_WORDS, replay_title, run_facts
from ..package import ReplayPackage, branch_basis
from ..vocabulary import BUNDLE_FORMAT
from ..world import IdSource


class ReplayError(ValueError):
    """A replay that cannot start (a bad package or variation). Never raised mid-run: a run stops with a state."""


# The sandbox's output on stdout: a header line, then the bytes it announces, unescaped and unencoded.
#   n17q.replay-output/2\n
#   {"blobs":[[digest,size],...],"events":size,"manifest":{...}}\n   (canonical JSON, blobs sorted by digest)
#   <events.jsonl><blob><blob>...
# (The first form was one JSON object holding the log as a JSON string and each blob in base64: the log was
# escaped by the engine and unescaped by the worker, 30% more bytes through the pipe.)
OUTPUT_MAGIC = b"n17q.replay-output/2\n"


@dataclass(frozen=True)
class ReplayOutput:
    manifest: dict[str, Any]
    events: bytes  # events.jsonl
    blobs: dict[str, bytes]

    def to_wire(self) -> bytes:
        blobs = sorted(self.blobs.items())
        header = {"manifest": self.manifest, "events": len(self.events), "blobs": [[d, len(b)] for d, b in blobs]}
        return b"".join([OUTPUT_MAGIC, canonical.canonical_json(header), b"\n", self.events, *(b for _d, b in blobs)])

    @classmethod
    def from_wire(cls, data: bytes) -> ReplayOutput:
        """The output of a sandbox, checked: sizes add up exactly and every blob hashes to its digest."""
        view = memoryview(data)
        try:
            if not data.startswith(OUTPUT_MAGIC):
                raise ValueError(f"it does not start with {OUTPUT_MAGIC!r}")
            end = data.index(b"\n", len(OUTPUT_MAGIC))
            header = json.loads(view[len(OUTPUT_MAGIC) : end].tobytes())
            manifest, size, listed = header["manifest"], header["events"], header["blobs"]
            if not isinstance(manifest, dict) or not isinstance(size, int) or not isinstance(listed, list):
                raise ValueError("the header is not {manifest, events, blobs}")
            offset = end + 1
            events = view[offset : offset + size].tobytes()
            offset += size
            blobs = {}
            for digest, length in listed:
                blob = view[offset : offset + length].tobytes()
                offset += length
                if len(blob) != length or canonical.digest_bytes(blob) != digest:
                    raise ValueError(f"blob {digest}: its bytes do not hash to it")
                blobs[digest] = blob
            if len(events) != size or offset != len(data):
                raise ValueError(f"{len(data)} bytes, the header accounts for {offset}")
        except (ValueError, KeyError, TypeError) as exc:
            raise ReplayError(f"the sandbox's output is not a replay output: {exc}") from None
        return cls(manifest, events, blobs)

    def write_bundle(self, directory: Path) -> Path:
        """Write as a run bundle directory (manifest.json, events.jsonl, blobs/sha256/<hex>)."""
        root = Path(directory)
        (root / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
        for digest, data in self.blobs.items():
            (root / "blobs" / "sha256" / digest.removeprefix("sha256:")).write_bytes(data)
        (root / "events.jsonl").write_bytes(self.events)
        (root / "manifest.json").write_bytes(canonical.canonical_json(self.manifest))
        return root


def iter_output_events(output: ReplayOutput) -> Iterator[dict[str, Any]]:
    for line in output.events.splitlines():
        yield json.loads(line)


# --- the log -----------------------------------------------------------------------------------------------------


class _Log:
    """The events of a replay, each encoded once, as it is appended, into the line the output will hold."""

    def __init__(self, ids: IdSource, wall: str) -> None:
        self.ids = ids
        self.wall = wall
        self.events: list[dict[str, Any]] = []
        self.lines: list[str] = []  # canonical JSON of each event, newline included; encoded to UTF-8 once
        self.blobs: dict[str, bytes] = {}
        self.blob_meta: dict[str, dict[str, Any]] = {}
        self.by_id: dict[str, dict[str, Any]] = {}
        self.last: dict[str, dict[str, Any]] = {}
        self._id_kinds: dict[str, str] = {}

    def new_id(self, kind: str) -> str:
        id_kind = self._id_kinds.get(kind)
        if id_kind is None:
            id_kind = self._id_kinds[kind] = kind.replace(".", "_")
        return self.ids.next(id_kind)

    def append(self, event: dict[str, Any]) -> str:
        event_id, kind = event["id"], event["kind"]
        event["seq"] = len(self.events) + 1
        self.events.append(event)
        self.lines.append(canonical.canonical_line(event))
        self.by_id[event_id] = event
        self.last[kind] = event
        return event_id

    def rollback(self, mark: int) -> None:
        """Drop the events appended after the first `mark` ones (a local transaction that did not complete)."""
        for event in self.events[mark:]:
            self.by_id.pop(event["id"], None)
        del self.events[mark:]
        del self.lines[mark:]
        self.last = {}
        for event in self.events:
            self.last[event["kind"]] = event

    def emit(self, kind: str, logical: str, attempt: str | None, *, event_id: str | None = None, **fields: Any) -> str:
        return self.add(kind, logical, attempt, event_id, fields)

    def add(self, kind: str, logical: str, attempt: str | None, event_id: str | None, fields: dict[str, Any]) -> str:
        """Append an event made of `fields` (the dict becomes the event: callers pass a dict of their own)."""
        if not event_id:
            event_id = self.new_id(kind)
        fields["id"] = event_id
        fields["kind"] = kind
        fields["at"] = {"logical": logical, "wall": self.wall}
        fields["attempt"] = attempt
        events = self.events
        fields["seq"] = len(events) + 1  # `append`, inlined: this runs once per event
        events.append(fields)
        self.lines.append(canonical.canonical_line(fields))
        self.by_id[event_id] = fields
        self.last[kind] = fields
        return event_id

    def blob(self, data: bytes, media_type: str, role: str) -> str:
        digest = canonical.digest_bytes(data)
        self.blobs[digest] = data
        if digest not in self.blob_meta:
            self.blob_meta[digest] = {
                "media_type": media_type,
                "size": len(data),
                "role": role,
                "retention": "standard",
            }
        return digest

    def jsonl(self) -> bytes:
        return "".join(self.lines).encode("utf-8")

    def rewrite(self, event: dict[str, Any]) -> None:
        """Encode an event again after its fields were completed (the scope note's segment, once restored)."""
        self.lines[event["seq"] - 1] = canonical.canonical_line(event)


def _run_meta(package: ReplayPackage, source: SourceRun, events: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    src = source.run
    meta = {
        "id": package.run_id,
        "task": src.get("task"),
        "model": src.get("model"),
        "policy_revision": src.get("policy_revision"),
        "created_at": package.launched_at,
        "parent_run": src.get("id"),
        **fields,
    }
    meta["title"] = _replay_title(meta, source, events)
    if isinstance(src.get("title"), str) and src["title"].strip() and title_problem(src["title"]) is None:
        # The source's title stays the source's: kept apart, never the replay's name (issue 34).
        meta["source_title"] = src["title"].strip()
    rules = src.get("compatibility_rules")
    if rules is not None:
        # The recorded admissions cite the rules the recorded run's policy declared: a replay judges them by those
        # (n17q_engine/compatibility.py), never by none (which would turn a declared reuse into LIN001).
        meta["compatibility_rules"] = rules
    return meta


def _replay_title(meta: dict[str, Any], source: SourceRun, events: list[dict[str, Any]]) -> str:
    """The replay's own title, from its own facts (n17q_engine/facts.py, issue 34): what it is, of which run, what
    happened in it. The source's title described the source: a counterfactual that opened no review request must
    not be named "Review request opened…", nor a rerun that sent twice "…sent once…"."""
    required = run_facts(source.run, [*source.history, *source.events])["validations"]["required"]
    facts = run_facts(meta, events, required=required)
    mode = str(meta.get("mode") or "")
    title = replay_title(mode, str(meta.get("parent_run") or "its source"), facts, MAX_TITLE_CHARS)
    if title_problem(title) is not None:  # a destination holding what a title may not: named without it
        title = f"{MODE_WORDS.get(mode, 'Replay')} of {meta.get('parent_run')}"[:MAX_TITLE_CHARS]
    return title


def _expired_text(entry: Mapping[str, Any]) -> str:
    """How a replay names material the console's retention sweep removed (the package's `expired` entry)."""
    sensitivity = f", sensitivity {entry['sensitivity']}" if entry.get("sensitivity") else ""
    return (
        f"expired under retention class {entry['class']!r}{sensitivity}: removed at {entry['removed_at']} "
        f"(deletion record {entry['record']}); the digest stays, the bytes are gone"
    )


# --- reconstruction --------------------------------------------------------------------------------------------------


class _Reconstruction:
    def __init__(self, package: ReplayPackage, source: SourceRun, isolation: str) -> None:
        self.package, self.source, self.isolation = package, source, isolation

    def run(self) -> ReplayOutput:
        pkg, src = self.package, self.source
        run = src.run
        basis = branch_basis(pkg)
        ids = IdSource(pkg.scenario.seed if pkg.scenario else basis, basis)
        log = _Log(ids, pkg.launched_at)
        taken = set(src.by_id)
        scope_id = log.new_id("replay.scope")
        while scope_id in taken:  # never collide with a recorded id
            scope_id = log.new_id("replay.scope")
        first = src.events[0]["at"]["logical"] if src.events else pkg.launched_at
        last = src.events[-1]["at"]["logical"] if src.events else pkg.launched_at
        missing_blobs = sorted(d for d in src.manifest.get("blobs", {}) if d not in pkg.source_blobs)
        uncovered = [
            f"blob {d}: {_expired_text(pkg.expired_blobs[d])}"
            if d in pkg.expired_blobs
            else f"blob {d}: not carried by the package (expired or withheld)"
            for d in missing_blobs
        ]
        log.emit(
            "replay.scope",
            first,
            None,
            event_id=scope_id,
            scenario=run.get("scenario") or {},
            scope="reconstruction",
            recorded_between=[first, last],
            synthetic=[],
            uncovered=uncovered,
            isolation=self.isolation,
            mode="reconstruction",
            truth="exact",
            reconstructs=run.get("id"),
            package=pkg.digest,
        )
        for event in src.events:
            copy = dict(event)
            log.append(copy)
        blobs = {}
        meta = {}
        for digest, entry in src.manifest.get("blobs", {}).items():
            if digest in pkg.source_blobs:
                blobs[digest] = pkg.source_blobs[digest]
                meta[digest] = entry
            elif digest in pkg.expired_blobs:
                # Still listed, so the recorded events that name it import unchanged; no bytes, and the record why.
                meta[digest] = {**entry, "expired": dict(pkg.expired_blobs[digest])}
        manifest = {
            "format": BUNDLE_FORMAT,
            "run": _run_meta(
                pkg,
                src,
                log.events,
                environment="sandbox",
                mode="reconstruction",
                scenario=run.get("scenario"),
                isolation=self.isolation,
                reconstructs={"id": run.get("id"), "environment": run.get("environment"), "mode": run.get("mode")},
                replay={"id": pkg.replay_id, "decider": None, "vary": {}, "package": pkg.digest, "basis": basis},
            ),
            "blobs": meta,
        }
        return ReplayOutput(manifest, log.jsonl(), blobs)
