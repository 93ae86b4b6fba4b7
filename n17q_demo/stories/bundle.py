"""A demo run as a run bundle: `StoryBundle` (its manifest, events and blobs, and the LIN codes it must produce)
and `write_bundle`, which writes one as a bundle directory for the importer.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StoryBundle:
    story: str  # seed file name without .txt, e.g. "003_1dab681921caa907"
    title: str  # one human line for the run list
    manifest: dict  # {"format": "n17q.run-bundle/1", "run": {...}, "blobs": {digest: {media_type,size,role,retention}}}
    events: list[dict]  # in append order, seq strictly increasing
    blobs: dict[str, bytes]  # digest -> bytes (digest = canonical.digest_bytes(bytes))
    expected_codes: frozenset[str]  # the LIN codes this run must produce (documentation + test oracle)


def write_bundle(bundle: StoryBundle, directory: Path) -> Path:
    """Write `bundle` as a bundle directory (manifest.json, events.jsonl, blobs/sha256/<hex>) and return it.

    The directory must be new or empty: a stray blob from an earlier write would make the bundle invalid.
    """
    directory = Path(directory)
    if directory.exists() and any(directory.iterdir()):
        raise FileExistsError(f"{directory} is not empty; a bundle is written into a new directory")
    blob_dir = directory / "blobs" / "sha256"
    blob_dir.mkdir(parents=True, exist_ok=True)
    manifest = json.dumps(bundle.manifest, indent=1, ensure_ascii=False) + "\n"
    (directory / "manifest.json").write_bytes(manifest.encode("utf-8"))
    lines = "".join(json.dumps(event, ensure_ascii=False) + "\n" for event in bundle.events)
    (directory / "events.jsonl").write_bytes(lines.encode("utf-8"))
    for digest, data in bundle.blobs.items():
        (blob_dir / digest.removeprefix("sha256:")).write_bytes(data)
    return directory
