"""The one writer of the blob store (issue 32): it takes only what the storage gate produced.

Run bundles' blobs (runs.importer) and capture bodies (fixtures_review.staging) were written by two helpers of their
own, each trusting its caller to have scanned; here the type says it: `blob_put` accepts a `GatedBytes` (a body the
gate masked) or a `GatedFile` (a file a door's scan masked on disk), and raises TypeError on anything else, so a new
door that forgets the gate fails at its first test, not in a user's data folder. `scripts/check_storage_gate.py`
fails CI on any `storages[...].save` outside this module.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from django.core.files.base import ContentFile, File
from django.core.files.storage import storages

from n17q_secrets.gate import GatedBytes, GatedFile


class BlobStoreRefused(RuntimeError):
    """The store saved the blob under another name than its digest's (a race, a storage backend's renaming)."""


@dataclass(frozen=True)
class StoredBlob:
    digest: str  # sha256:<hex>
    name: str  # its name in the store
    written: bool  # False when the store held it already (content-addressed: the same bytes)


def blob_storage_name(digest: str) -> str:
    return "sha256/" + digest.removeprefix("sha256:")


def blob_put(gated: GatedBytes | GatedFile, *, digest: str | None = None) -> StoredBlob:
    """Store `gated` under its digest (`digest` when the caller computed it, as an import does for its bundle's files;
    else computed here). Nothing is written when the store holds the digest already."""
    if not isinstance(gated, GatedBytes | GatedFile):
        raise TypeError(f"the blob store takes what the storage gate produced (n17q_secrets.gate), not {type(gated)}")
    if digest is None:
        if isinstance(gated, GatedBytes):
            digest = "sha256:" + hashlib.sha256(gated).hexdigest()
        else:
            h = hashlib.sha256()
            with open(gated.path, "rb") as fh:
                while block := fh.read(1 << 20):
                    h.update(block)
            digest = "sha256:" + h.hexdigest()
    store = storages["blobs"]
    name = blob_storage_name(digest)
    if store.exists(name):
        return StoredBlob(digest, name, False)
    if isinstance(gated, GatedBytes):
        saved = store.save(name, ContentFile(bytes(gated), name=name))
    else:
        with open(gated.path, "rb") as fh:
            saved = store.save(name, File(fh, name=name))
    if saved != name:
        store.delete(saved)
        raise BlobStoreRefused(f"the blob store refused {name}")
    return StoredBlob(digest, name, True)
