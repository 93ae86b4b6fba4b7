"""Bundle import as properties: no input makes the importer crash with a traceback or the API answer 500.

Whatever the bytes, `run_import_from_path` / `run_import_from_upload` either import or raise `BundleError`
whose `str()` is one printable line, and after a refusal nothing is stored: no rows, no blob files, and
nothing written outside the extraction's temporary folder. The example-based refusals (each named
message) live in test_import.py; this file only asserts the envelope, over generated inputs.

Each hypothesis example runs in a savepoint that is always rolled back (the models are append-only, so
rows cannot be deleted between examples), and the blob store folder is emptied after each one, so every
example starts from an empty database and an empty store.
"""

from __future__ import annotations

import functools
import io
import json
import re
import shutil
import struct
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import transaction
from django.urls import reverse
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from n17q_engine import vocabulary as v
from n17q_engine.bundle import BundleError
from runs.importer import run_import_from_path, run_import_from_upload
from runs.models import Blob, Edge, Event, Finding, Run, RunBlob, RunObject
from tests import bundles
from tests.hypothesis_budget import examples

pytestmark = [
    pytest.mark.django_db,
    # The member-name property writes zips with duplicate names on purpose.
    pytest.mark.filterwarnings("ignore:Duplicate name:UserWarning"),
]

MANIFEST, EVENTS, BLOBS = bundles.example_parts()
BLOB_DIGEST = next(iter(BLOBS))
BLOB_FILE = f"blobs/sha256/{BLOB_DIGEST.removeprefix('sha256:')}"


def _settings(n: int):
    return settings(
        max_examples=examples(n), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )


# ---------------------------------------------------------------------------------------------------
# The property every import must satisfy, and the savepoint that undoes each example.


class _Undo(Exception):
    """Raised to roll back the savepoint an example ran in."""


# Characters that would break a message over lines (str.splitlines splits on all of these) or make it
# unprintable; a lone surrogate would also make the API's JSON renderer fail to encode the response.
_NOT_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


def assert_one_line(message: str) -> None:
    assert message, "a refusal must say something"
    assert not _NOT_ONE_LINE.search(message), f"not one printable line: {message!r}"
    message.encode("utf-8")


def stored_files(store: Path) -> list[Path]:
    return [p for p in store.rglob("*") if p.is_file()] if store.exists() else []


def assert_nothing_stored(store: Path) -> None:
    counts = {m.__name__: m.objects.count() for m in (Run, Event, Edge, Blob, RunBlob, RunObject, Finding)}
    assert counts == dict.fromkeys(counts, 0), counts
    assert stored_files(store) == []


@contextmanager
def rolled_back(store: Path) -> Iterator[None]:
    """One example's savepoint, always rolled back, and its blob store emptied."""
    try:
        with transaction.atomic():
            yield
            raise _Undo
    except _Undo:
        pass
    finally:
        # A successful import leaves its blobs in the store; the rollback cannot take them back.
        if store.exists():
            shutil.rmtree(store)


def outcome(do_import: Callable[[], Any], store: Path) -> str | None:
    """Run one import in a rolled-back savepoint: None when it imported, else the refusal's message.

    Any exception but BundleError propagates and fails the test (hypothesis then shrinks the input to a
    minimal reproducer).
    """
    with rolled_back(store):
        try:
            result = do_import()
        except BundleError as exc:
            message = str(exc)
            assert_one_line(message)
            assert_nothing_stored(store)
            return message
        assert Run.objects.filter(run_id=result.run.run_id).exists()
        assert Event.objects.filter(run=result.run).count() == result.events
    return None


# ---------------------------------------------------------------------------------------------------
# Writing bundles from parts, as bytes where the property needs control over every byte.


def event_line(event: Any) -> bytes:
    return json.dumps(event).encode("ascii") + b"\n"


def events_bytes(events: list[Any]) -> bytes:
    return b"".join(event_line(e) for e in events)


def manifest_bytes(manifest: Any) -> bytes:
    return json.dumps(manifest, indent=1).encode("utf-8")


EXAMPLE_FILES: dict[str, bytes] = {
    "manifest.json": manifest_bytes(MANIFEST),
    "events.jsonl": events_bytes(EVENTS),
    BLOB_FILE: BLOBS[BLOB_DIGEST],
}


def write_bundle(folder: Path, files: dict[str, bytes]) -> Path:
    for name, data in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return folder


class Scratch:
    """A fresh folder per example under the test's tmp_path, removed afterwards."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def __enter__(self) -> Path:
        self.path = Path(tempfile.mkdtemp(dir=self.root))
        return self.path

    def __exit__(self, *exc: object) -> None:
        shutil.rmtree(self.path, ignore_errors=True)


def import_files(tmp_path: Path, store: Path, files: dict[str, bytes]) -> str | None:
    with Scratch(tmp_path / "scratch") as folder:
        write_bundle(folder / "bundle", files)
        return outcome(lambda: run_import_from_path(folder / "bundle"), store)


# ---------------------------------------------------------------------------------------------------
# Strategies: JSON values, including the awkward ones a hostile or buggy harness can write.

# Text a database can hold: no NUL (PostgreSQL refuses it in text and jsonb), no lone surrogates.
_text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=10)
_clean_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([2**31, 2**63 - 1, 2**63, -(2**63) - 1, 10**30, -(10**30)])
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
    | st.sampled_from(["", "a\nb", "\u2028", "0001-01-01T00:00:00+14:00", "x" * 201, BLOB_DIGEST])
)
# Values a valid event may carry in its free-form fields.
clean_json_values = st.recursive(
    _clean_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_text, inner, max_size=4),
    max_leaves=12,
)
# Anything json.loads returns, the awkward values included: NaN and infinities (json.dumps writes them,
# json.loads reads them back), NULs, lone surrogates, control characters.
json_values = st.recursive(
    _clean_scalars | st.floats() | st.text(max_size=12) | st.sampled_from(["\x00", "\ud800", "a\x00b", "\udcff"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)

# Raw JSON text no json.dumps produces: deep nesting, integers past Python's digit limit, numbers that
# overflow a float, escaped NULs and lone surrogates.
_raw_json_fragments = st.sampled_from(
    [
        "[" * 5000 + "]" * 5000,
        "[" * 150 + "]" * 150,
        '{"a":' * 900 + "1" + "}" * 900,
        "1" * 5000,
        "1e400",
        "-1e400",
        "NaN",
        '"\\u0000"',
        '"\\ud800"',
        '"\\udc00x"',
        '"\\ud83d\\ude00"',
        '"\\\\u0000"',
    ]
)


def _splice(event: dict[str, Any], key: str, fragment: str) -> bytes:
    """The event as a JSON line with `key` set to a raw JSON fragment."""
    marker = "__n17q_fragment__"
    text = json.dumps({**event, key: marker})
    return text.replace(json.dumps(marker), fragment, 1).encode("ascii") + b"\n"


ENVELOPE_PATHS = ["seq", "id", "kind", "at", "at.logical", "at.wall", "attempt"]
ALL_FIELD_NAMES = sorted({name for spec in v.KINDS.values() for name in spec})


def _set_path(value: dict[str, Any], path: str, new: Any, *, delete: bool) -> None:
    *parents, last = path.split(".")
    target = value
    for part in parents:
        if not isinstance(target.get(part), dict):
            target[part] = {}
        target = target[part]
    if delete:
        target.pop(last, None)
    else:
        target[last] = new


# ---------------------------------------------------------------------------------------------------
# Valid events of every kind in the vocabulary, over a small pool of ids so that references resolve
# (or dangle) and the lineage checker has a graph to read.

ID_POOL = [f"e{i}" for i in range(12)] + ["a0", "a1", "w0", "w1", "art0", "art1", "ghost", ""]
TIMES = [
    "2026-07-01T09:00:00Z",
    "2026-07-01T09:00:01+02:00",
    "2026-07-01T09:00:02.5+00:00",
    "2026-06-30T23:59:59-05:30",
]
DIGESTS = [BLOB_DIGEST, "sha256:" + "0" * 64, "sha256:" + "ab" * 32]
_ids = st.sampled_from(ID_POOL)


def _prefixed(prefix: str, s: str) -> str:
    return prefix + (s or "w")


def _is_ref(name: str) -> bool:
    return name.endswith(("_id", "_ids")) or name in v.NAMED_REFERENCES


_SPECIAL_FIELDS: dict[tuple[str, str], st.SearchStrategy[Any]] = {
    ("tool.result", "blob"): st.none() | st.just(BLOB_DIGEST),
    ("command.receipt", "output_blob"): st.none() | st.just(BLOB_DIGEST),
    # issue 39: what an agent was told, a blob of the bundle and the digest of the document
    ("agent.context", "blob"): st.just(BLOB_DIGEST),
    ("agent.context", "context_digest"): st.sampled_from(DIGESTS),
    ("tool.result", "absent"): st.dictionaries(_text, st.sampled_from(v.ABSENCE_KINDS), max_size=3),
    ("workspace.created", "derived_from"): st.none()
    | st.fixed_dictionaries(
        {"workspace_id": _ids, "relation": st.sampled_from(v.DERIVATION_RELATIONS), "content_equal": st.booleans()}
    ),
    ("command.receipt", "results"): st.fixed_dictionaries(
        {},
        optional={
            "passed": st.integers(-3, 10) | clean_json_values,
            "failed": st.integers(-3, 10) | st.floats(allow_nan=False, allow_infinity=False) | clean_json_values,
            "skipped": st.integers(0, 10),
            "failing_suites": st.lists(_text | _ids, max_size=3) | clean_json_values,
        },
    ),
    ("evidence.admitted", "compatibility"): st.none()
    | st.fixed_dictionaries({"rule": st.none() | _text, "rationale": _text}),
    ("evidence.admitted", "purpose"): st.sampled_from(["validation:focused", "validation:broad", "docs", ""]),
    ("policy.decision", "required"): st.lists(
        st.sampled_from(["validation:focused", "validation:broad", "x"]), max_size=3
    ),
    ("checkpoint", "workspaces"): st.dictionaries(_ids, st.sampled_from(DIGESTS) | clean_json_values, max_size=3),
    ("model.proposal", "proposal"): st.fixed_dictionaries(
        {"type": st.sampled_from(v.PROPOSAL_TYPES)}, optional={"tool": _text}
    ),
    ("approval.recorded", "run"): st.sampled_from(["run-example-docs", "other-run", ""]),
    # issue 34's optional extensions: a digest of the review object, an expiry with its timezone
    ("approval.recorded", "review_digest"): st.none() | st.sampled_from(DIGESTS),
    ("approval.recorded", "expires_at"): st.none()
    | st.sampled_from(["2026-07-01T10:00:00Z", "2026-07-01T12:00:00+02:00", "2026-07-01T09:00:00.5Z"]),
    ("effect.execution", "connection"): st.sampled_from(["live:api", "fixture:x", "sim:y", "replay:z", ""]),
    ("evidence.observed", "scope"): clean_json_values | st.lists(st.sampled_from(["validation:focused", "unit"])),
    ("account.claim", "scope"): st.none() | st.lists(st.sampled_from(["validation:focused", "unit", "x"]), max_size=3),
    ("command.receipt", "suites"): st.lists(st.sampled_from(["unit", "focused", "broad"]), max_size=3),
}


def _field_strategy(kind: str, name: str, spec: v.Field) -> st.SearchStrategy[Any]:
    special = _SPECIAL_FIELDS.get((kind, name))
    if special is not None:
        base = special
    elif spec.type == v.STR:
        if spec.enum is not None:
            base = st.sampled_from(spec.enum)
            for prefix in spec.prefixes:
                base = base | _text.map(functools.partial(_prefixed, prefix))
        elif _is_ref(name):
            base = _ids
        elif "digest" in name or "tree" in name:
            base = st.sampled_from(DIGESTS) | _text
        else:
            base = _text
    elif spec.type == v.INT:
        base = st.integers(-(2**40), 2**40)
    elif spec.type == v.NUMBER:
        base = st.integers(-(2**40), 2**40) | st.floats(allow_nan=False, allow_infinity=False)
    elif spec.type == v.BOOL:
        base = st.booleans()
    elif spec.type == v.LIST:
        items = (
            _ids if (spec.items == v.STR and _is_ref(name)) else (_text if spec.items == v.STR else clean_json_values)
        )
        base = st.lists(items, max_size=3)
    elif spec.type == v.DICT:
        base = st.dictionaries(
            st.sampled_from(["a", "workspace_id", "x_ids", "rule"]) | _text, clean_json_values | _ids, max_size=3
        )
    else:
        base = clean_json_values
    return (st.none() | base) if spec.nullable else base.filter(lambda value: value is not None)


@st.composite
def valid_event(draw: st.DrawFn, index: int) -> dict[str, Any]:
    kind = draw(st.sampled_from(sorted(v.KINDS)))
    event: dict[str, Any] = {
        "seq": index + 1,
        "id": f"e{index}",
        "kind": kind,
        "at": {"logical": draw(st.sampled_from(TIMES)), "wall": draw(st.sampled_from(TIMES))},
        "attempt": f"a{index}" if kind == "attempt.started" else draw(st.none() | _ids.filter(bool)),
    }
    for name, spec in v.KINDS[kind].items():
        if name == v.INTRODUCTIONS.get(kind):
            continue
        if not spec.required and draw(st.booleans()):
            continue
        event[name] = draw(_field_strategy(kind, name, spec))
    if kind == "workspace.created":
        event["workspace_id"] = f"w{index}"
    elif kind == "command.receipt" and event["post_tree"] is None and event["completion"] == "completed":
        # Only an unfinished command may leave its post-run tree unknown (DESIGN §10): a valid event says so.
        event["completion"] = "partial"
    elif kind == "artifact.created":
        event["artifact_id"] = f"art{index}"
    if draw(st.integers(0, 5)) == 0:  # harnesses may add fields of their own; nested ids are references
        event[draw(st.sampled_from(["extra", "note_id", "trace_ids", "meta"]))] = draw(clean_json_values | _ids)
    return event


@st.composite
def valid_runs(draw: st.DrawFn) -> list[dict[str, Any]]:
    n = draw(st.integers(1, 8))
    return [draw(valid_event(i)) for i in range(n)]


# ---------------------------------------------------------------------------------------------------
# 1. events.jsonl


@_settings(120)
@given(data=st.binary(max_size=600) | st.binary(max_size=60).map(lambda b: EXAMPLE_FILES["events.jsonl"][:200] + b))
def test_it_refuses_or_imports_arbitrary_bytes_as_events(tmp_path, _blob_store, data):
    import_files(tmp_path, _blob_store, {**EXAMPLE_FILES, "events.jsonl": data})


@_settings(150)
@given(
    lines=st.lists(
        json_values.map(event_line) | _raw_json_fragments.map(lambda s: s.encode() + b"\n"), min_size=1, max_size=4
    ),
    keep=st.integers(0, len(EVENTS)),
    last_newline=st.booleans(),
)
def test_it_refuses_or_imports_arbitrary_json_lines(tmp_path, _blob_store, lines, keep, last_newline):
    data = events_bytes(EVENTS[:keep]) + b"".join(lines)
    if not last_newline:
        data = data[:-1]
    assert import_files(tmp_path, _blob_store, {**EXAMPLE_FILES, "events.jsonl": data}) is not None


@_settings(250)
@given(
    index=st.integers(0, len(EVENTS) - 1),
    path=st.sampled_from(ENVELOPE_PATHS + ALL_FIELD_NAMES + ["extra", "nested_id", "supports", "absent"]),
    new=json_values | st.sampled_from(sorted(v.KINDS)) | _ids,
    delete=st.booleans(),
    raw=st.none() | _raw_json_fragments,
)
def test_it_refuses_or_imports_an_example_event_with_one_field_mutated(
    tmp_path, _blob_store, index, path, new, delete, raw
):
    events = bundles.clone(EVENTS)
    if raw is not None and "." not in path:
        lines = [event_line(e) for e in events]
        lines[index] = _splice(events[index], path, raw)
        data = b"".join(lines)
    else:
        _set_path(events[index], path, new, delete=delete)
        data = events_bytes(events)
    import_files(tmp_path, _blob_store, {**EXAMPLE_FILES, "events.jsonl": data})


@_settings(150)
@given(
    run=valid_runs(),
    mutate=st.none()
    | st.tuples(
        st.integers(0, 7), st.sampled_from(ENVELOPE_PATHS + ALL_FIELD_NAMES), json_values | _ids, st.booleans()
    ),
)
def test_it_refuses_or_imports_valid_events_of_every_kind_with_one_field_mutated(tmp_path, _blob_store, run, mutate):
    if mutate is not None:
        index, path, new, delete = mutate
        _set_path(run[index % len(run)], path, new, delete=delete)
    message = import_files(tmp_path, _blob_store, {**EXAMPLE_FILES, "events.jsonl": events_bytes(run)})
    if mutate is None:
        assert message is None, message  # valid events only: the import must succeed


# ---------------------------------------------------------------------------------------------------
# 2. manifest.json

MANIFEST_PATHS = [
    "format",
    "run",
    "blobs",
    "extra",
    "run.id",
    "run.task",
    "run.task.id",
    "run.task.revision",
    "run.environment",
    "run.mode",
    "run.scenario",
    "run.scenario.name",
    "run.scenario.version",
    "run.model",
    "run.model.name",
    "run.model.version",
    "run.policy_revision",
    "run.created_at",
    "run.parent_run",
    "run.isolation",
    "run.title",
    f"blobs.{BLOB_DIGEST}",
    f"blobs.{BLOB_DIGEST}.size",
    f"blobs.{BLOB_DIGEST}.media_type",
    f"blobs.{BLOB_DIGEST}.role",
    f"blobs.{BLOB_DIGEST}.retention",
    "blobs.sha256:" + "0" * 64,
    "blobs.a\nb",
]


@_settings(100)
@given(
    data=st.binary(max_size=400)
    | json_values.map(lambda j: json.dumps(j).encode())
    | _raw_json_fragments.map(str.encode)
)
def test_it_refuses_or_imports_an_arbitrary_manifest(tmp_path, _blob_store, data):
    assert import_files(tmp_path, _blob_store, {**EXAMPLE_FILES, "manifest.json": data}) is not None


@_settings(200)
@given(
    mutations=st.lists(
        st.tuples(
            st.sampled_from(MANIFEST_PATHS), json_values | st.sampled_from(v.ENVIRONMENTS + v.MODES), st.booleans()
        ),
        min_size=1,
        max_size=3,
    ),
    raw=st.none() | st.tuples(st.sampled_from(["run", "blobs", "extra"]), _raw_json_fragments),
)
def test_it_refuses_or_imports_the_example_manifest_with_fields_mutated(tmp_path, _blob_store, mutations, raw):
    manifest = bundles.clone(MANIFEST)
    for path, new, delete in mutations:
        _set_path(manifest, path, new, delete=delete)  # digests hold no dot: blobs.<digest>.size is 3 parts
    data = manifest_bytes(manifest)
    if raw is not None:
        key, fragment = raw
        data = _splice(manifest, key, fragment)
    import_files(tmp_path, _blob_store, {**EXAMPLE_FILES, "manifest.json": data})


# ---------------------------------------------------------------------------------------------------
# 3. Archives


def zip_bytes(members: list[tuple[str, bytes, dict[str, int]]]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        for name, data, attrs in members:
            info = zipfile.ZipInfo(name)
            info.compress_type = attrs.get("compress_type", zipfile.ZIP_DEFLATED)
            info.external_attr = attrs.get("external_attr", 0)
            zf.writestr(info, data)
    return _with_flag_bits(out.getvalue(), [attrs.get("flag_bits", 0) for _name, _data, attrs in members])


def _with_flag_bits(data: bytes, bits: list[int]) -> bytes:
    """Set general-purpose flag bits (encrypted 0x1, UTF-8 names 0x800, ...) zipfile would not write itself.

    zipfile resets `flag_bits` when it writes a member, so they are patched into the local header and the
    central directory record of each member afterwards.
    """
    if not any(bits):
        return data
    buf = bytearray(data)

    def patch(offset: int, flags: int) -> None:
        (old,) = struct.unpack_from("<H", buf, offset)
        struct.pack_into("<H", buf, offset, old | flags)

    zf = zipfile.ZipFile(io.BytesIO(data))
    pos = zf.start_dir
    for info, flags in zip(zf.infolist(), bits, strict=True):
        patch(info.header_offset + 6, flags)
        patch(pos + 8, flags)
        name_len, extra_len, comment_len = struct.unpack_from("<HHH", buf, pos + 28)
        pos += 46 + name_len + extra_len + comment_len
    return bytes(buf)


def tar_bytes(members: list[tuple[str, bytes, dict[str, Any]]]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz", format=tarfile.PAX_FORMAT) as tf:
        for name, data, attrs in members:
            info = tarfile.TarInfo(name)
            info.type = attrs.get("type", tarfile.REGTYPE)
            info.linkname = attrs.get("linkname", "")
            regular = info.type in (tarfile.REGTYPE, tarfile.AREGTYPE)
            info.size = len(data) if regular else 0
            tf.addfile(info, io.BytesIO(data) if regular else None)
    return out.getvalue()


def example_members(wrap: str | None = None) -> list[tuple[str, bytes, dict[str, Any]]]:
    return [(f"{wrap}/{name}" if wrap else name, data, {}) for name, data in EXAMPLE_FILES.items()]


EXAMPLE_ZIP = zip_bytes(example_members())
EXAMPLE_TAR = tar_bytes(example_members())

_segments = st.sampled_from(
    [
        "..",
        ".",
        "",
        "a",
        "manifest.json",
        "events.jsonl",
        "blobs",
        "sha256",
        "C:",
        "c:\\x",
        "..\\..",
        "\x00",
        "nul\x00x",
        "é",
        "\u202e",
        "\udcff",
        "x" * 300,
        "escape.txt",
        " ",
        "~",
    ]
) | st.text(max_size=6)


@st.composite
def member_names(draw: st.DrawFn, sentinel: Path) -> str:
    """Member names, hostile ones included: traversal, absolute paths into the sentinel, backslashes, NULs."""
    parts = draw(st.lists(_segments, min_size=1, max_size=4))
    name = draw(st.sampled_from(["/", "\\"])).join(parts)
    prefix = draw(st.sampled_from(["", "", "/", "\\", "../", "../../", "../../../", f"{sentinel}/", "./"]))
    return prefix + name


_zip_attrs = st.fixed_dictionaries(
    {},
    optional={
        "compress_type": st.sampled_from(
            [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED, zipfile.ZIP_BZIP2, zipfile.ZIP_LZMA]
        ),
        "external_attr": st.sampled_from([0o100644 << 16, 0o040755 << 16, 0o120777 << 16, 0o010644 << 16, 0x10]),
        "flag_bits": st.sampled_from([0x1, 0x8, 0x800]),
    },
)
_tar_attrs = st.fixed_dictionaries(
    {},
    optional={
        "type": st.sampled_from(
            [
                tarfile.REGTYPE,
                tarfile.DIRTYPE,
                tarfile.SYMTYPE,
                tarfile.LNKTYPE,
                tarfile.FIFOTYPE,
                tarfile.CHRTYPE,
                tarfile.CONTTYPE,
            ]
        ),
        "linkname": st.sampled_from(["/etc/passwd", "../..", "manifest.json"]),
    },
)


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


@pytest.fixture
def sentinel(tmp_path, monkeypatch):
    """A folder that holds the archives and the temporary folders the importer extracts into.

    Members that climb out of the extraction folder ('..', absolute paths into it) land here if they
    escape, so after each example its tree must be what it was before.
    """
    root = tmp_path / "sentinel" / "deeper"
    (root / "tmp").mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(root / "tmp"))
    return root


def import_archive(sentinel: Path, store: Path, data: bytes, suffix: str) -> str | None:
    before = tree(sentinel.parent)
    archive_path = sentinel / f"bundle{suffix}"
    archive_path.write_bytes(data)
    try:
        return outcome(lambda: run_import_from_path(archive_path), store)
    finally:
        archive_path.unlink()
        assert tree(sentinel.parent) == before, "the import wrote outside its extraction folder"


_suffixes = st.sampled_from([".zip", ".tar.gz", ".tgz", ".bin"])


@_settings(150)
@given(
    data=st.binary(max_size=300)
    | st.tuples(
        st.sampled_from([b"PK", b"PK\x03\x04", b"PK\x05\x06", b"\x1f\x8b", b"\x1f\x8b\x08\x00"]),
        st.binary(max_size=300),
    ).map(b"".join),
    suffix=_suffixes,
)
def test_it_refuses_arbitrary_archive_bytes(sentinel, _blob_store, data, suffix):
    assert import_archive(sentinel, _blob_store, data, suffix) is not None


@_settings(150)
@given(
    packed=st.sampled_from([(EXAMPLE_ZIP, ".zip"), (EXAMPLE_TAR, ".tar.gz")]),
    cut=st.floats(0, 1),
    flips=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), max_size=3),
)
def test_it_refuses_or_imports_truncated_and_corrupted_example_archives(sentinel, _blob_store, packed, cut, flips):
    data, suffix = packed
    buf = bytearray(data[: round(len(data) * cut)])
    for where, xor in flips:
        if buf:
            buf[min(int(len(buf) * where), len(buf) - 1)] ^= xor
    message = import_archive(sentinel, _blob_store, bytes(buf), suffix)
    if cut == 1 and not flips:
        assert message is None, message


@_settings(200)
@given(st.data())
def test_it_refuses_or_imports_archives_with_arbitrary_member_names(sentinel, _blob_store, data):
    fmt = data.draw(st.sampled_from(["zip", "tar"]))
    attrs = _zip_attrs if fmt == "zip" else _tar_attrs
    extra = data.draw(
        st.lists(
            st.tuples(
                member_names(sentinel), st.sampled_from([b"", b"x", b"{}", EXAMPLE_FILES["manifest.json"]]), attrs
            ),
            min_size=1,
            max_size=3,
        )
    )
    members = data.draw(st.sampled_from([[], example_members(), example_members("wrapped")])) + extra
    data.draw(st.randoms()).shuffle(members)
    if fmt == "zip":
        try:
            packed, suffix = zip_bytes(members), ".zip"
        except (ValueError, UnicodeEncodeError):
            assume(False)  # zipfile cannot write that name; nothing to import
    else:
        try:
            packed, suffix = tar_bytes(members), ".tar.gz"
        except (ValueError, UnicodeEncodeError):
            assume(False)
    import_archive(sentinel, _blob_store, packed, suffix)


# ---------------------------------------------------------------------------------------------------
# 4. Through the API


@pytest.fixture
def operator_client(client, role_user):
    client.force_login(role_user("operator"))
    return client


def _corrupt(data: bytes, cut: float, xor: int) -> bytes:
    buf = bytearray(data[: round(len(data) * cut)])
    if buf and xor:
        buf[len(buf) // 2] ^= xor
    return bytes(buf)


_uploads = (
    st.binary(max_size=300)
    | st.sampled_from([EXAMPLE_ZIP, EXAMPLE_TAR, b""])
    | st.builds(_corrupt, st.sampled_from([EXAMPLE_ZIP, EXAMPLE_TAR]), st.floats(0, 1), st.integers(0, 255))
)


@_settings(100)
@given(
    data=_uploads,
    name=st.sampled_from(["bundle.zip", "bundle.tar.gz", "b.tgz", "bundle", "x.bin"])
    # Any name the test client can send (it needs a last path component to send at all).
    | st.text(st.characters(codec="utf-8", exclude_characters="/\\"), min_size=1, max_size=20).filter(
        lambda s: s.strip() not in ("", ".", "..")
    ),
)
def test_it_answers_201_or_400_with_one_line_to_any_upload(operator_client, _blob_store, data, name):
    # The test client re-raises an exception a view lets escape, so a would-be 500 fails here with its
    # traceback; a 500 the view renders itself fails the status assertion.
    with rolled_back(_blob_store):
        response = operator_client.post(reverse("api-runs"), {"bundle": SimpleUploadedFile(name, data)})
        assert response.status_code in (201, 400), (response.status_code, response.content[:300])
        body = response.json()
        if response.status_code == 400:
            assert set(body) == {"error"}
            assert_one_line(body["error"])
            assert_nothing_stored(_blob_store)
        else:
            assert set(body) == {
                "run",
                "events",
                "findings",
                "finding_count",
                "findings_truncated",
                "findings_url",
                "masked_secrets",
                "unevaluated",
            }
            assert Event.objects.filter(run__run_id=body["run"]).count() == body["events"]


@_settings(40)
@given(data=_uploads, name=st.sampled_from(["bundle.zip", "bundle.tar.gz", "bundle.tgz", "bundle"]))
def test_it_refuses_or_imports_any_upload_without_the_api(_blob_store, data, name):
    """The importer's own entry point for uploads (the API's, and the upload page's)."""
    upload = SimpleUploadedFile(name, data)
    outcome(lambda: run_import_from_upload(upload), _blob_store)
