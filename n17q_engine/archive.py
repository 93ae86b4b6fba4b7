"""Safe unpacking of a bundle archive (`.zip` or `.tar.gz`) into a folder of our own.

An archive is untrusted input. Rather than trusting a library's filter to skip what it dislikes, every
member is checked and the whole archive is refused on the first member that could write outside the
folder (absolute paths, `..`, links, devices), or on absurd counts and sizes, before or while bytes
are written. Only regular files and folders are ever created.
"""

from __future__ import annotations

import lzma
import os
import shutil
import stat
import struct
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO

from .budget import checkpoint
from .bundle import BundleError

CHUNK = 1 << 20

# What reading a hostile archive can raise from zipfile, tarfile and their decompressors, besides their own
# error classes: a corrupt header gives struct.error or ValueError (a bad UTF-8 name is a UnicodeDecodeError),
# a corrupt stream zlib.error, lzma.LZMAError or OSError (bz2), an encrypted zip member RuntimeError, an
# unknown compression NotImplementedError. Each becomes a one-line BundleError.
_READ_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    tarfile.TarError,
    OSError,
    EOFError,
    ValueError,
    RuntimeError,
    NotImplementedError,
    OverflowError,
    struct.error,
    zlib.error,
    lzma.LZMAError,
)


def _safe_member_path(name: str, root: Path) -> Path:
    if not name or "\x00" in name:
        raise BundleError(f"archive member {name!r} has an empty or invalid name")
    normalized = name.replace("\\", "/")
    pure = PurePosixPath(normalized)
    if pure.is_absolute() or normalized.startswith("/") or (len(normalized) > 1 and normalized[1] == ":"):
        raise BundleError(f"archive member {name!r} has an absolute path")
    if any(part == ".." for part in pure.parts):
        raise BundleError(f"archive member {name!r} escapes the bundle folder (path traversal)")
    target = (root / Path(*pure.parts)).resolve() if pure.parts else root
    if target != root and root not in target.parents:
        raise BundleError(f"archive member {name!r} escapes the bundle folder (path traversal)")
    return target


def _copy_limited(src: IO[bytes], dst_path: Path, *, budget: list[int], name: str, max_bytes: int) -> None:
    dst_path.parent.mkdir(parents=True, exist_ok=True)
    with open(dst_path, "xb") as dst:
        while True:
            checkpoint()  # the request's budget (n17q_engine.budget), if one is open
            block = src.read(CHUNK)
            if not block:
                break
            budget[0] += len(block)
            if budget[0] > max_bytes:
                raise BundleError(f"archive unpacks to more than {max_bytes} bytes (at member {name!r})")
            dst.write(block)


def unpack(archive: Path, dest: Path, *, max_bytes: int, max_members: int, marker: str = "manifest.json") -> Path:
    """Unpack `archive` into the empty folder `dest` and return the bundle's root folder.

    The root is `dest` itself, or its single top-level folder when the archive wraps the bundle in one
    (a zipped directory usually does).
    """
    dest = dest.resolve()
    budget = [0]
    name = archive.name.lower()
    with open(archive, "rb") as fh:
        magic = fh.read(4)
    if magic.startswith(b"PK"):
        _unpack_zip(archive, dest, budget=budget, max_bytes=max_bytes, max_members=max_members)
    elif magic.startswith(b"\x1f\x8b") or name.endswith((".tar.gz", ".tgz")):
        _unpack_tar(archive, dest, budget=budget, max_bytes=max_bytes, max_members=max_members)
    else:
        raise BundleError("not a bundle archive: expected a .zip or a .tar.gz")
    return find_root(dest, marker)


def _unpack_zip(archive: Path, dest: Path, *, budget: list[int], max_bytes: int, max_members: int) -> None:
    try:
        zf = zipfile.ZipFile(archive)
    except _READ_ERRORS as exc:
        raise BundleError(f"not a readable zip archive ({exc or exc.__class__.__name__})") from None
    with zf:
        infos = zf.infolist()
        if len(infos) > max_members:
            raise BundleError(f"archive has {len(infos)} members, more than {max_members}")
        declared = sum(i.file_size for i in infos)
        if declared > max_bytes:
            raise BundleError(f"archive declares {declared} bytes unpacked, more than {max_bytes}")
        for info in infos:
            checkpoint()
            target = _safe_member_path(info.filename, dest)
            mode = (info.external_attr >> 16) & 0o170000
            if mode and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise BundleError(f"archive member {info.filename!r} is a link or special file; only files are allowed")
            try:
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if target.exists():
                    raise BundleError(f"archive member {info.filename!r} appears twice")
                with zf.open(info) as src:
                    _copy_limited(src, target, budget=budget, name=info.filename, max_bytes=max_bytes)
            except _READ_ERRORS as exc:
                if isinstance(exc, BundleError):
                    raise
                if isinstance(exc, FileExistsError):  # "a" and "a/", or a file where a folder must go
                    raise BundleError(f"archive member {info.filename!r} appears twice") from None
                raise BundleError(
                    f"archive member {info.filename!r} cannot be read ({exc or exc.__class__.__name__})"
                ) from None


def _unpack_tar(archive: Path, dest: Path, *, budget: list[int], max_bytes: int, max_members: int) -> None:
    try:
        tf = tarfile.open(archive, mode="r:*")  # noqa: SIM115 - closed by the `with tf` below
    except tarfile.ReadError:
        # tarfile's own message lists every compression it tried, over several lines.
        raise BundleError("not a readable tar archive (not a .tar.gz, or truncated or corrupt)") from None
    except _READ_ERRORS as exc:
        raise BundleError(f"not a readable tar archive ({exc or exc.__class__.__name__})") from None
    count = 0
    try:
        with tf:
            # Iterating streams the members one at a time: memory does not grow with the archive.
            for member in tf:
                checkpoint()
                count += 1
                if count > max_members:
                    raise BundleError(f"archive has more than {max_members} members")
                target = _safe_member_path(member.name, dest)
                if member.isdir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                if not member.isreg():
                    raise BundleError(
                        f"archive member {member.name!r} is a link or special file; only files are allowed"
                    )
                if member.size > max_bytes:
                    raise BundleError(f"archive member {member.name!r} is larger than {max_bytes} bytes")
                if target.exists():
                    raise BundleError(f"archive member {member.name!r} appears twice")
                src = tf.extractfile(member)
                if src is None:
                    raise BundleError(f"archive member {member.name!r} cannot be read")
                with src:
                    _copy_limited(src, target, budget=budget, name=member.name, max_bytes=max_bytes)
    except _READ_ERRORS as exc:
        if isinstance(exc, BundleError):
            raise
        raise BundleError(f"archive is truncated or corrupt ({exc or exc.__class__.__name__})") from None


def find_root(folder: Path, marker: str = "manifest.json") -> Path:
    """The folder that holds `marker` (a bundle's manifest.json, a package's package.json): `folder` itself
    or its only subfolder."""
    if (folder / marker).is_file():
        return folder
    entries = [e for e in folder.iterdir() if not e.name.startswith("__MACOSX")]
    if len(entries) == 1 and entries[0].is_dir() and (entries[0] / marker).is_file():
        return entries[0]
    raise BundleError(f"{marker} is missing from the {'bundle' if marker == 'manifest.json' else 'package'}")


def check_directory(folder: Path) -> Path:
    """A bundle given as a folder: refuse links, so that reading it cannot leave the folder."""
    folder = folder.resolve()
    root = find_root(folder)
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in dirnames + filenames:
            path = Path(dirpath) / entry
            if path.is_symlink():
                raise BundleError(f"{path.relative_to(root)} is a symbolic link; bundles hold only files")
    return root


def remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
