"""Build run bundles for tests: folders, zips and tarballs, valid or broken on purpose."""

from __future__ import annotations

import copy
import io
import json
import tarfile
import zipfile
from pathlib import Path
from typing import Any

from n17q_engine.canonical import digest_bytes

EXAMPLE = Path(__file__).resolve().parent / "data" / "example-bundle"


def example_parts() -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, bytes]]:
    manifest = json.loads((EXAMPLE / "manifest.json").read_text())
    events = [json.loads(line) for line in (EXAMPLE / "events.jsonl").read_text().splitlines() if line]
    blobs = {"sha256:" + p.name: p.read_bytes() for p in (EXAMPLE / "blobs" / "sha256").iterdir()}
    return manifest, events, blobs


def write_folder(
    folder: Path,
    manifest: dict[str, Any],
    events: list[Any],
    blobs: dict[str, bytes],
    *,
    events_bytes: bytes | None = None,
) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    if events_bytes is None:
        events_bytes = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    (folder / "events.jsonl").write_bytes(events_bytes)
    blob_dir = folder / "blobs" / "sha256"
    blob_dir.mkdir(parents=True, exist_ok=True)
    for digest, data in blobs.items():
        (blob_dir / digest.removeprefix("sha256:")).write_bytes(data)
    return folder


def zip_folder(folder: Path, out: Path, *, wrap: str | None = None) -> Path:
    with zipfile.ZipFile(out, "w") as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                name = str(path.relative_to(folder))
                zf.write(path, f"{wrap}/{name}" if wrap else name)
    return out


def tar_folder(folder: Path, out: Path) -> Path:
    with tarfile.open(out, "w:gz") as tf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                tf.add(path, str(path.relative_to(folder)))
    return out


def tar_with_member(
    out: Path, name: str, data: bytes = b"x", *, kind: bytes = tarfile.REGTYPE, linkname: str = ""
) -> Path:
    """A tarball holding one hostile member (and nothing else)."""
    with tarfile.open(out, "w:gz") as tf:
        info = tarfile.TarInfo(name)
        info.type = kind
        info.linkname = linkname
        info.size = len(data) if kind == tarfile.REGTYPE else 0
        tf.addfile(info, io.BytesIO(data) if kind == tarfile.REGTYPE else None)
    return out


def zip_with_member(out: Path, name: str, data: bytes = b"x") -> Path:
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr(zipfile.ZipInfo(name), data)
    return out


def with_blob(blobs: dict[str, bytes], data: bytes) -> tuple[dict[str, bytes], str]:
    blobs = dict(blobs)
    digest = digest_bytes(data)
    blobs[digest] = data
    return blobs, digest


def clone(value: Any) -> Any:
    return copy.deepcopy(value)
