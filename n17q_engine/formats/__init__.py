"""Other formats in (DESIGN §10): converters from what real producers write into the run bundle's vocabulary.

Each converter is a pure function from bytes to `ConvertedRun`s (no Django, no network: the engine's import-linter
contract holds here too). A `ConvertedRun` is written as an ordinary bundle folder (`write_bundle`) and imported
through the same all-or-nothing path as any bundle, so every check, limit and secret scan applies unchanged.

A converter never drops what it cannot map: it counts it in `report.unmapped` and keeps the original (the whole
file, or the raw span/record) as a blob the run's events name, so an investigator can always see what came in.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from n17q_engine.canonical import canonical_line, digest_bytes

BUNDLE_FORMAT = "n17q.run-bundle/1"


class ConversionError(ValueError):
    """The input is not what it claimed to be, or cannot be converted: one line, naming what was wrong."""


@dataclass
class ConversionReport:
    """What a conversion mapped and what it did not, for the answer of import_run and the API.

    `mapped` counts events written per source construct (e.g. `"execute_tool span -> tool.call"`); `unmapped`
    counts what had no mapping (e.g. `"span attribute http.method"`), kept in the raw blob, never dropped."""

    source_format: str
    mapped: Counter[str] = field(default_factory=Counter)
    unmapped: Counter[str] = field(default_factory=Counter)
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.source_format,
            "mapped": dict(sorted(self.mapped.items())),
            "unmapped": dict(sorted(self.unmapped.items())),
            "notes": list(self.notes),
        }


@dataclass
class ConvertedRun:
    """One run in bundle form: the manifest's `run` object, the events in append order (each with `seq`, `id`,
    `kind`, `at`, `attempt`), and the blobs they name (digest -> (bytes, media_type, role))."""

    run: dict[str, Any]
    events: list[dict[str, Any]]
    report: ConversionReport
    blobs: dict[str, tuple[bytes, str, str]] = field(default_factory=dict)

    def add_blob(self, data: bytes, media_type: str, role: str, *, digest: str | None = None) -> str:
        """Keep `data` as a blob of this run; its digest, to name it from an event. `digest`: the caller's own
        digest_bytes(data), when it has one (bytes every run of a file keeps are hashed once)."""
        digest = digest or digest_bytes(data)
        self.blobs.setdefault(digest, (data, media_type, role))
        return digest

    def add_json_blob(self, value: Any, role: str) -> str:
        return self.add_blob(json.dumps(value, ensure_ascii=False, indent=1).encode("utf-8"), "application/json", role)


def write_bundle(converted: ConvertedRun, root: Path, *, on_disk: tuple[bytes, Path] | None = None) -> Path:
    """Write `converted` as a bundle folder under `root` (which must exist and be empty); return `root`.

    `on_disk`: bytes a file holds already, and that file (the converted file itself: a trace file's original, which
    every one of its runs keeps). A blob that is those very bytes is linked to the file rather than written again
    (a 100,000-span file's ten runs wrote 26 MB each); written where a link cannot be made."""
    blobs_meta: dict[str, dict[str, Any]] = {}
    blob_dir = root / "blobs" / "sha256"
    blob_dir.mkdir(parents=True, exist_ok=True)
    for digest, (data, media_type, role) in converted.blobs.items():
        target = blob_dir / digest.split(":", 1)[1]
        if on_disk is not None and data is on_disk[0]:
            try:
                os.link(on_disk[1], target)
            except OSError:  # another file system, or links not allowed there
                target.write_bytes(data)
        else:
            target.write_bytes(data)
        blobs_meta[digest] = {"media_type": media_type, "size": len(data), "role": role, "retention": "standard"}
    manifest = {"format": BUNDLE_FORMAT, "run": converted.run, "blobs": blobs_meta}
    (root / "manifest.json").write_text(json.dumps(manifest, ensure_ascii=False, indent=1), encoding="utf-8")
    with open(root / "events.jsonl", "w", encoding="utf-8") as out:
        for event in converted.events:
            out.write(canonical_line(event))
    return root
