"""Inspect AI eval logs (`.eval` zip and `.json` EvalLog) -> N17Q runs, one per sample and epoch.

The log format is read here, from its bytes, without importing inspect_ai (a dev dependency only, used by the
tests to write real logs): the product must accept logs from any Inspect version a team runs, not the one that
happens to be installed. What is read, and how each construct maps to the bundle vocabulary, is in
docs/formats/inspect.md; the decisions where the vocabulary and Inspect do not line up are written there too.

The `.eval` format is a zip: `_journal/start.json` (version, eval spec, plan), `samples/<id>_epoch_<n>.json` (one
EvalSample each), `header.json` (the finished EvalLog without its samples), summaries and reductions. Members are
compressed with zstd (method 93) by Inspect >= 0.3.1xx, deflate by older versions. A zip is untrusted input:
every member's declared size is checked against the caps before it is read, and reading stops at the cap even
when the declared size lies (a zip bomb never unpacks past it).
"""

from __future__ import annotations

import io
import json
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from n17q_engine import zip_members
from n17q_engine.canonical import digest_json, evidence_set_digest, request_digest
from n17q_engine.claim_extraction import claim_events, final_answer
from n17q_engine.identifiers import INSPECT_RUN_PREFIX, MAX_RUN_ID_CHARS, make_id, run_id_problem
from n17q_engine.json_values import json_values_bound

from . import ConversionError, ConversionReport, ConvertedRun

# The whole log is kept as a blob of every run, and the importer's secret scan reads a blob whole up to 64 MiB
# (runs/secret_scan.py MAX_SCANNED_BLOB_BYTES): a larger log could never be stored, so it is refused here first.
MAX_LOG_BYTES = 64 * 1024 * 1024
# One member (a sample's JSON) is read whole and kept as a blob: the same cap.
MAX_MEMBER_BYTES = 64 * 1024 * 1024
# Everything read from one zip together: a log of many samples, each near the cap, is still bounded.
MAX_UNPACKED_BYTES = 512 * 1024 * 1024
MAX_MEMBERS = 100_000
# What one sample (an `.eval` member, or a whole `.json` log) may hold, counted on its bytes before it is parsed
# (`json_values_bound`): parsed, a value costs 50-200 bytes of Python objects whatever its text costs, so a 60 MB
# member of `{},` is 20 million dicts (1.8 GB measured, from a 61 KB file). Samples are parsed one at a time.
MAX_SAMPLE_VALUES = 4_000_000
# What one sample's run may become: its events (each a dict held until the run is written), the attachment text
# substituted into them (one attachment named by every event is written once per event), and the pool messages its
# model events name (each model event digests the messages it names: quadratic in a small file).
MAX_RUN_EVENTS = 200_000
MAX_RESOLVED_CHARS = 256 * 1024 * 1024
MAX_POOL_MESSAGES = 5_000_000
# Events carry short strings a person reads (a reason, a claim's text): longer ones are cut, the full text stays
# in the sample's blob.
MAX_REASON_CHARS = 500

ZIP_STORED, ZIP_DEFLATED, ZIP_ZSTANDARD = zip_members.ZIP_STORED, zip_members.ZIP_DEFLATED, zip_members.ZIP_ZSTANDARD
_EVAL_MEMBERS = ("header.json", "_journal/start.json")
_LOCAL_HEADER = zip_members.LOCAL_HEADER
_ATTACHMENT = "attachment://"

# Inspect's ToolCallError types -> tool.result outcome. An approver's rejection and a permission error are the
# tool being refused; everything else that went wrong is an error (a cancelled call has no known result).
_TOOL_ERROR_OUTCOMES = {
    "timeout": "timeout",
    "approval": "denied",
    "permission": "denied",
    "file_not_found": "not_found",
    "cancelled": "unknown",
}
# Approver decisions the vocabulary holds (approved | rejected); "escalate" passes the call to the next
# approver and decides nothing, so it is not an approval (counted unmapped, kept in the sample's blob).
_APPROVAL_DECISIONS = {"approve": "approved", "modify": "approved", "reject": "rejected", "terminate": "rejected"}
_HUMAN_APPROVERS = frozenset({"human", "inspect_ai/human", "human_approver"})

_FORWARD = "inspect-tool-call:"
_NOT_ONE_LINE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]+")


# ---------------------------------------------------------------------------------------------------- recognition


def looks_like_inspect_log(data: bytes) -> str | None:
    """ "eval" for an Inspect `.eval` zip, "json" for an Inspect `.json` EvalLog, None for anything else.

    Cheap: a zip is recognised by its member names (the central directory, or for a cut-off file the first local
    header, which Inspect always writes as `_journal/start.json`); a JSON log by its opening keys. Whether the
    file is then readable is `convert_inspect_log`'s question, answered with a ConversionError."""
    if data[:2] == b"PK":
        names = _zip_names(data)
        if names is None:
            first = _first_local_name(data)
            return "eval" if first in _EVAL_MEMBERS or (first or "").startswith("samples/") else None
        return "eval" if any(n in _EVAL_MEMBERS or n.startswith("samples/") for n in names) else None
    head = data[: 64 * 1024].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] != b"{":
        return None
    text = head.decode("utf-8", errors="replace")
    if re.search(r'"eval"\s*:\s*\{', text) and re.search(r'"version"\s*:\s*\d', text):
        return "json"
    return None


def _zip_names(data: bytes) -> list[str] | None:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            return zf.namelist()
    except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, struct.error):
        return None


def _first_local_name(data: bytes) -> str | None:
    if len(data) < _LOCAL_HEADER.size or data[:4] != b"PK\x03\x04":
        return None
    fields = _LOCAL_HEADER.unpack_from(data, 0)
    name_len = fields[9]
    raw = data[_LOCAL_HEADER.size : _LOCAL_HEADER.size + name_len]
    return raw.decode("utf-8", errors="replace") if len(raw) == name_len else None


# ------------------------------------------------------------------------------------------------------- reading


@dataclass
class _Log:
    format: str  # "eval" | "json"
    header: dict[str, Any]  # version, status, eval, plan, ... (no samples)
    notes: list[str] = field(default_factory=list)


def _check_values(raw: bytes, what: str, cap: int) -> None:
    bound = json_values_bound(raw, cap)
    if bound > cap:
        raise ConversionError(
            f"{what} holds up to {bound} JSON values, more than the {cap} one sample may hold "
            "(parsed, each costs many times its text)"
        )


def _parse_json(raw: bytes, what: str, max_values: int) -> Any:
    _check_values(raw, what, max_values)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConversionError(f"{what} is not UTF-8 (invalid byte at {exc.start})") from None
    try:
        # Inspect writes NaN and infinities for undefined metrics (Python's json default); they become null, which
        # is what a JSON reader elsewhere would make of them.
        return json.loads(text, parse_constant=lambda _name: None)
    except json.JSONDecodeError as exc:
        raise ConversionError(f"{what} is not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        raise ConversionError(f"{what} is nested too deeply to read") from None
    except ValueError as exc:  # an integer past Python's digit limit
        raise ConversionError(f"{what} is not valid JSON ({str(exc).split(':')[0]})") from None


class _ZipReader:
    """Reads chosen members of an untrusted zip, each capped, all together capped."""

    def __init__(self, data: bytes, *, max_member_bytes: int, max_unpacked_bytes: int, max_members: int):
        self.data = data
        self.max_member_bytes = max_member_bytes
        self.max_unpacked_bytes = max_unpacked_bytes
        self.read_total = 0
        try:
            self.zf = zipfile.ZipFile(io.BytesIO(data))
            infos = self.zf.infolist()
        except (zipfile.BadZipFile, zipfile.LargeZipFile, ValueError, OSError, EOFError, struct.error) as exc:
            raise ConversionError(
                f"the .eval log is truncated or not a readable zip ({exc or exc.__class__.__name__})"
            ) from None
        if len(infos) > max_members:
            raise ConversionError(f"the .eval log has {len(infos)} members, more than {max_members}")
        self.infos = {i.filename: i for i in infos if not i.is_dir()}

    def read(self, name: str, *, again: bool = False) -> bytes:
        """The member's bytes, capped by what it declares and by what is counted as it unpacks. `again`: a member
        read before (its bytes counted then against the log's total already)."""
        info = self.infos[name]
        if info.file_size > self.max_member_bytes:
            raise ConversionError(
                f"the .eval member {name!r} declares {info.file_size} bytes unpacked, more than {self.max_member_bytes}"
            )
        if info.flag_bits & 0x1:
            raise ConversionError(f"the .eval member {name!r} is encrypted")
        budget = (
            self.max_member_bytes if again else min(self.max_member_bytes, self.max_unpacked_bytes - self.read_total)
        )
        if info.file_size > budget:
            raise ConversionError(f"the .eval log unpacks to more than {self.max_unpacked_bytes} bytes (at {name!r})")
        try:
            if info.compress_type == ZIP_ZSTANDARD:
                raw = self._read_zstd(info, budget)
            elif info.compress_type in (ZIP_STORED, ZIP_DEFLATED):
                with self.zf.open(info) as src:
                    # zipfile stops at the declared size and checks the CRC; the cap bounds a lying size too.
                    raw = src.read(budget + 1)
            else:
                raise ConversionError(
                    f"the .eval member {name!r} uses zip compression method {info.compress_type}, "
                    "which this reader does not know"
                )
        except ConversionError:
            raise
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, RuntimeError, struct.error) as exc:
            raise ConversionError(
                f"the .eval member {name!r} is truncated or corrupt ({exc or exc.__class__.__name__})"
            ) from None
        if len(raw) > budget:
            raise ConversionError(f"the .eval member {name!r} unpacks to more than {budget} bytes")
        if len(raw) != info.file_size:
            # What was counted as it unpacked, not what the zip entry says: a member declaring more than it holds
            # passes zipfile's CRC check (computed over what is there).
            raise ConversionError(
                f"the .eval member {name!r} unpacks to {len(raw)} bytes, not the {info.file_size} its zip entry "
                "declares (truncated or corrupt)"
            )
        if not again:
            self.read_total += len(raw)
        return raw

    def _read_zstd(self, info: zipfile.ZipInfo, budget: int) -> bytes:
        try:
            out = zip_members.unzstd(zip_members.raw_member(self.data, info), budget)
        except zip_members.MemberError as exc:
            raise ConversionError(f"the .eval member {info.filename!r} {exc}") from None
        if len(out) <= budget:
            if len(out) != info.file_size:
                raise ConversionError(
                    f"the .eval member {info.filename!r} unpacks to {len(out)} bytes, not the {info.file_size} "
                    "its zip entry declares (truncated or corrupt)"
                )
            if zlib.crc32(out) != info.CRC:
                raise ConversionError(f"the .eval member {info.filename!r} fails its CRC check (corrupt)")
        return bytes(out)


def _read_eval(
    data: bytes, *, max_member_bytes: int, max_unpacked_bytes: int, max_members: int, max_values: int
) -> tuple[_Log, _EvalSamples]:
    """The log's header, and its samples one at a time in run order (`_EvalSamples`)."""
    zr = _ZipReader(
        data, max_member_bytes=max_member_bytes, max_unpacked_bytes=max_unpacked_bytes, max_members=max_members
    )
    notes: list[str] = []
    if "header.json" in zr.infos:
        header = _parse_json(zr.read("header.json"), "header.json", max_values)
    elif "_journal/start.json" in zr.infos:
        # A log still being written (or cut off before it finished) has only the journal's start.
        header = _parse_json(zr.read("_journal/start.json"), "_journal/start.json", max_values)
        notes.append("the .eval log has no header.json (unfinished eval): the eval's status and results are unknown")
    else:
        raise ConversionError("not an Inspect .eval log: the zip has neither header.json nor _journal/start.json")
    if not isinstance(header, dict) or not isinstance(header.get("eval"), dict):
        raise ConversionError("not an Inspect .eval log: its header has no 'eval' object")
    return _Log("eval", header, notes), _EvalSamples(zr, max_values)


class _EvalSamples:
    """An `.eval` log's samples in run order, each read, parsed and handed out alone: a sample's Python objects are
    dropped before the next is read. Knowing the order takes a first pass (each sample read and parsed, its id and
    epoch kept, the rest dropped): the member names do not carry the id as the sample holds it."""

    def __init__(self, zr: _ZipReader, max_values: int):
        self.zr = zr
        self.max_values = max_values
        keyed = []
        for name in zr.infos:
            if name.startswith("samples/") and name.endswith(".json"):
                sample = self._parse(name, again=False)
                keyed.append((_sample_order(sample), name))
                del sample
        self.names = [name for _key, name in sorted(keyed, key=lambda item: item[0])]

    def _parse(self, name: str, *, again: bool) -> dict[str, Any]:
        sample = _parse_json(self.zr.read(name, again=again), name, self.max_values)
        if not isinstance(sample, dict):
            raise ConversionError(f"{name} is not an Inspect sample (not a JSON object)")
        return sample

    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[tuple[dict[str, Any], bytes]]:
        for name in self.names:
            raw = self.zr.read(name, again=True)
            sample = _parse_json(raw, name, self.max_values)
            yield sample, raw
            del sample, raw


class _JsonSamples:
    """A `.json` log's samples in run order, each written back to bytes (its blob) only when its turn comes."""

    def __init__(self, samples: list[dict[str, Any]]):
        self.samples = sorted(samples, key=_sample_order)

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[tuple[dict[str, Any], bytes]]:
        for i in range(len(self.samples)):
            sample = self.samples[i]
            self.samples[i] = {}  # converted: not held any longer than its run
            yield sample, json.dumps(sample, ensure_ascii=False, indent=1).encode("utf-8")


def _read_json(data: bytes, max_values: int) -> tuple[_Log, _JsonSamples]:
    log = _parse_json(data, "the .json log", max_values)
    if not isinstance(log, dict) or not isinstance(log.get("eval"), dict) or "version" not in log:
        raise ConversionError("not an Inspect .json log: the file is JSON but has no 'eval' object and 'version'")
    raw_samples = log.pop("samples", None) or []
    if not isinstance(raw_samples, list):
        raise ConversionError("not an Inspect .json log: 'samples' is not a list")
    for i, sample in enumerate(raw_samples):
        if not isinstance(sample, dict):
            raise ConversionError(f"samples[{i}] of the .json log is not an object")
    return _Log("json", log), _JsonSamples(raw_samples)


# -------------------------------------------------------------------------------------------------- conversion


@dataclass(frozen=True)
class Caps:
    """What one log may hold and become (the module's MAX_* constants by default)."""

    max_log_bytes: int = MAX_LOG_BYTES
    max_member_bytes: int = MAX_MEMBER_BYTES
    max_unpacked_bytes: int = MAX_UNPACKED_BYTES
    max_members: int = MAX_MEMBERS
    max_sample_values: int = MAX_SAMPLE_VALUES
    max_run_events: int = MAX_RUN_EVENTS
    max_resolved_chars: int = MAX_RESOLVED_CHARS
    max_pool_messages: int = MAX_POOL_MESSAGES


class InspectRuns:
    """The runs of one Inspect log, converted one at a time as they are iterated (its length known ahead): at most
    one sample and its run are held at once. Iterate it once."""

    def __init__(self, log: _Log, samples: _EvalSamples | _JsonSamples, source: tuple[bytes, str, str], caps: Caps):
        self.log, self.samples, self.source, self.caps = log, samples, source, caps

    def __len__(self) -> int:
        return len(self.samples)

    def __iter__(self) -> Iterator[ConvertedRun]:
        used_ids: set[str] = set()
        for sample, raw in self.samples:
            converter = _SampleConverter(self.log, sample, raw, self.source, used_ids, self.caps)
            del sample, raw
            # Not kept in this frame while the caller writes it: the next sample is read only after it is dropped.
            yield converter.convert()
            del converter


def iter_inspect_log(data: bytes, caps: Caps = Caps()) -> InspectRuns:
    """The runs (one per sample and epoch) of the Inspect log in `data`, converted as they are iterated; the log's
    header and sample order are read here, so a ConversionError (one line) for the file as a whole comes first."""
    kind = looks_like_inspect_log(data)
    if kind is None:
        raise ConversionError(f"not an Inspect AI eval log: {_what_it_looks_like(data)}")
    if len(data) > caps.max_log_bytes:
        raise ConversionError(f"the Inspect log is {len(data)} bytes, more than {caps.max_log_bytes}")
    samples: _EvalSamples | _JsonSamples
    if kind == "eval":
        log, samples = _read_eval(
            data,
            max_member_bytes=caps.max_member_bytes,
            max_unpacked_bytes=caps.max_unpacked_bytes,
            max_members=caps.max_members,
            max_values=caps.max_sample_values,
        )
    else:
        log, samples = _read_json(data, caps.max_sample_values)
    if not len(samples):
        raise ConversionError(
            "the Inspect log holds no samples (written with log_samples=False, or the eval ended before any sample)"
        )
    source = (data, "application/zip" if kind == "eval" else "application/json", "source-log")
    return InspectRuns(log, samples, source, caps)


def convert_inspect_log(data: bytes, **caps: int) -> list[ConvertedRun]:
    """One run per sample and epoch of the Inspect log in `data`, all of them; ConversionError (one line) for
    anything else. `caps`: Caps' fields. (The converting process takes them one at a time: iter_inspect_log.)"""
    return list(iter_inspect_log(data, Caps(**caps)))


def _what_it_looks_like(data: bytes) -> str:
    if not data:
        return "the file is empty"
    if data[:2] == b"PK":
        return "a zip archive without header.json, _journal/start.json or samples/ (not an Inspect .eval log)"
    head = data[:4096].lstrip(b"\xef\xbb\xbf \t\r\n")
    if head[:1] in (b"{", b"["):
        return "JSON without the 'eval' object and 'version' of an Inspect EvalLog"
    if data[:2] == b"\x1f\x8b":
        return "a gzip file (not an Inspect .eval, which is a zip)"
    return "neither a zip (.eval) nor JSON (.json)"


def _sample_order(sample: dict[str, Any]) -> tuple[int, str, int]:
    epoch = sample.get("epoch")
    sid = sample.get("id")
    return (0 if isinstance(sid, int) else 1, str(sid), epoch if isinstance(epoch, int) else 0)


def _one_line(text: Any, limit: int = MAX_REASON_CHARS) -> str:
    line = _NOT_ONE_LINE.sub(" ", str(text)).strip()
    return line if len(line) <= limit else line[: limit - 1] + "\u2026"


def _iso(value: Any) -> str | None:
    """An ISO-8601 time with a timezone (Inspect writes UTC offsets; a naive time is read as UTC), or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    try:
        # In UTC, so that two times compare as their strings do (the walk orders tool results by time).
        return parsed.astimezone(UTC).isoformat()
    except OverflowError:
        return None


def _run_id_part(value: Any, limit: int) -> str:
    return make_id(value, limit)


class _SampleConverter:
    """Walks one sample's events in the order the log holds them and writes the run's events.

    A tool's result is written when the tool completed (its `completed` time), so what ran inside it (a sandbox
    command) comes before its result, as it happened; the tool call itself is written where the log has it."""

    def __init__(
        self,
        log: _Log,
        sample: dict[str, Any],
        raw: bytes,
        source: tuple[bytes, str, str],
        used_ids: set[str],
        caps: Caps,
    ):
        self.log = log
        self.caps = caps
        self.resolved_chars = 0  # attachment text substituted into this run's events
        self.pool_messages = 0  # pool messages this run's model events named
        self.sample = sample
        self.spec: dict[str, Any] = log.header["eval"]
        self.report = ConversionReport(f"inspect-{log.format}")
        self.report.notes.extend(log.notes)
        self.events: list[dict[str, Any]] = []
        self.attachments = _obj(sample.get("attachments"))
        events_data = _obj(sample.get("events_data"))
        pool = events_data.get("messages") if isinstance(events_data, dict) else None
        self.message_pool: list[Any] = pool if isinstance(pool, list) else []
        self.run = self._run_object(used_ids)
        self.converted = ConvertedRun(self.run, self.events, self.report)
        self.source_digest = self.converted.add_blob(*source)
        self.sample_digest = self.converted.add_blob(raw, "application/json", "inspect-sample")
        self.attempt: str | None = None
        self.last_at = self.run["created_at"]
        # tool call id -> (model.proposal event id); Inspect tool event index -> tool.call event id
        self.proposal_for_call: dict[str, str] = {}
        self.call_event_for_tool_id: dict[str, str] = {}
        self.pending_results: list[tuple[str, dict[str, Any]]] = []  # (completed time, tool.result event)
        self.workspace: str | None = None
        self.failed_state_written = False
        self.limit_state_written = False
        self.scores_seen = False
        # span id -> span_begin event; span id -> the tool events written in that span (found before the walk,
        # because a tool event may be logged after the commands it ran)
        self.spans: dict[str, dict[str, Any]] = {}
        self.span_ends: dict[str, dict[str, Any]] = {}
        self.tools_by_span: dict[str, list[dict[str, Any]]] = {}

    # ---- the run

    def _run_object(self, used_ids: set[str]) -> dict[str, Any]:
        spec, sample = self.spec, self.sample
        task = _text(spec.get("task"), "task")
        sid, epoch = sample.get("id"), sample.get("epoch")
        if not isinstance(epoch, int) or isinstance(epoch, bool):
            raise ConversionError(f"sample {sid!r} of the Inspect log has no epoch number")
        if not isinstance(sid, (int, str)) or isinstance(sid, bool):
            raise ConversionError("a sample of the Inspect log has no id")
        eval_id = _run_id_part(spec.get("eval_id") or spec.get("run_id") or "", 8)
        base = f"{INSPECT_RUN_PREFIX}{_run_id_part(task, 80)}-{_run_id_part(sid, 80)}-e{epoch}"
        if len(base) + 12 > MAX_RUN_ID_CHARS:  # room for "-<eval id>-<n>" within a run id's length
            base = f"{INSPECT_RUN_PREFIX}{_run_id_part(task, 60)}-{_run_id_part(sid, 60)}-e{epoch}"
        # Two evals of one task name the same samples: the eval's id tells their runs apart, and importing the
        # same log twice names the same runs (refused as already imported, never doubled).
        run_id = f"{base}-{eval_id}" if eval_id and eval_id != "x" else base
        n = 2
        while run_id in used_ids:  # two sample ids that differ only in characters a run id cannot hold
            run_id, n = f"{base}-{eval_id}-{n}", n + 1
        problem = run_id_problem(run_id)
        if problem is not None:  # an epoch of dozens of digits: no run id can name the sample
            raise ConversionError(f"sample {str(sid)[:80]!r} epoch {str(epoch)[:20]}: its run id {problem}")
        used_ids.add(run_id)
        model = _text(spec.get("model"), "unknown")
        created = (
            _iso(sample.get("started_at"))
            or _iso(spec.get("created"))
            or _first_event_time(sample)
            or "1970-01-01T00:00:00+00:00"
        )
        version = spec.get("task_version", 0)
        display = _text(spec.get("task_display_name"), task)
        title = _one_line(f"{display} \u00b7 sample {sid} \u00b7 epoch {epoch}", 300)
        config = _obj(spec.get("config"))
        approval = config.get("approval")
        return {
            "id": run_id,
            "title": title,
            "task": {"id": task[:200], "revision": str(version)[:200]},
            "environment": "live",
            "mode": "recorded",
            "scenario": None,
            "model": {"name": model[:200], "version": _model_version(sample, model)[:200]},
            "policy_revision": (
                f"inspect-approval@{digest_json(approval)[7:19]}" if approval else "inspect:no-approval-policy"
            ),
            "created_at": created,
            "parent_run": None,
        }

    # ---- writing events

    def _emit(self, kind: str, at: str | None, fields: dict[str, Any], *, mapped: str, origin: Any = None) -> str:
        when = at or self.last_at
        if kind != "tool.result":
            self._flush_results(until=when)
        return self._append(kind, when, fields, mapped=mapped, origin=origin)

    def _append(self, kind: str, when: str, fields: dict[str, Any], *, mapped: str, origin: Any = None) -> str:
        seq = len(self.events) + 1
        if seq > self.caps.max_run_events:
            raise ConversionError(
                f"sample {str(self.sample.get('id'))[:80]!r} epoch {str(self.sample.get('epoch'))[:20]} converts to "
                f"more than {self.caps.max_run_events} events (the cap of one run converted from an Inspect log)"
            )
        event_id = f"ev-{seq}"
        event: dict[str, Any] = {
            "seq": seq,
            "id": event_id,
            "kind": kind,
            "at": {"logical": when, "wall": when},
            "attempt": self.attempt,
            **fields,
        }
        if origin is not None:
            event["inspect"] = origin
        self.events.append(event)
        self.report.mapped[mapped] += 1
        if when > self.last_at:
            self.last_at = when
        return event_id

    def _flush_results(self, until: str | None) -> None:
        keep = []
        for completed, event in self.pending_results:
            if until is None or completed <= until:
                self._append("tool.result", completed, event["fields"], mapped=event["mapped"], origin=event["origin"])
            else:
                keep.append((completed, event))
        self.pending_results = keep

    def _unmapped(self, what: str) -> None:
        self.report.unmapped[what] += 1

    # ---- the walk

    def convert(self) -> ConvertedRun:
        sample = self.sample
        retries = _items(sample.get("error_retries"))
        number = 0
        for retry in retries:
            number += 1
            self._start_attempt(
                number, "a try of the sample that ended in an error and was retried", retry_of=self.attempt
            )
            self._walk(_items(_obj(retry).get("events")))
            self._flush_results(until=None)
            message = _one_line(_obj(retry).get("message", "error"))
            self._emit("attempt.ended", None, {"outcome": "error", "error": message}, mapped="sample error_retries")
        number += 1
        previous = self.attempt
        reason = f"Inspect sample {sample.get('id')}, epoch {sample.get('epoch')}"
        self._start_attempt(number, reason if number == 1 else f"{reason}, retried after an error", retry_of=previous)
        events = _items(sample.get("events"))
        self._walk(events)
        self._finish()
        self._link_forward()
        self.report.notes.append(
            f"sample {sample.get('id')} epoch {sample.get('epoch')}: the original log is kept as blob "
            f"{self.source_digest} (source-log), the sample as {self.sample_digest} (inspect-sample)"
        )
        return self.converted

    def _start_attempt(self, number: int, reason: str, *, retry_of: str | None) -> None:
        attempt = f"attempt-{number}"
        self.attempt = attempt
        at = _iso(self.sample.get("started_at")) if number == 1 else None
        self._emit(
            "attempt.started",
            at,
            {
                "number": number,
                "reason": reason,
                "parent_attempt_id": retry_of,
                "inspect_sample": {
                    "id": self.sample.get("id"),
                    "epoch": self.sample.get("epoch"),
                    "uuid": self.sample.get("uuid"),
                    "sample_blob": self.sample_digest,
                    "source_log": self.source_digest,
                },
            },
            mapped="sample start -> attempt.started",
        )

    def _walk(self, events: list[Any]) -> None:
        for _index, event in _flatten(events):
            if not isinstance(event, dict):
                continue
            if event.get("event") == "span_begin" and isinstance(event.get("id"), str):
                self.spans[event["id"]] = event
            elif event.get("event") == "span_end" and isinstance(event.get("id"), str):
                self.span_ends[event["id"]] = event
            elif event.get("event") == "tool" and isinstance(event.get("span_id"), str):
                self.tools_by_span.setdefault(event["span_id"], []).append(event)
        for index, event in _flatten(events):
            if not isinstance(event, dict):
                self._unmapped("event that is not an object")
                continue
            kind = event.get("event")
            at = _iso(event.get("timestamp"))
            origin = {"event": kind, "uuid": event.get("uuid"), "index": index}
            if isinstance(event.get("span_id"), str):
                origin.update(self._span_of(event["span_id"], tool=kind == "tool"))
            handler = _HANDLERS.get(kind) if isinstance(kind, str) else None
            if handler is None:
                self._unmapped(f"{kind} event" if isinstance(kind, str) else "event without a type")
                continue
            handler(self, event, at, origin)

    def _span_of(self, span_id: str, *, tool: bool) -> dict[str, Any]:
        """The Inspect span an event was written in (`span`) and, for a tool event, the spans above that one
        (`ancestors`, nearest first, at most 64): a span subtree's tool results are chosen by them (staging)."""
        named: dict[str, Any] = {"span": span_id[:200]}
        # The span's name, type, parent and times, so that the run page's span tree nests and times every span from
        # any of its events (issue 38).
        begin = self.spans.get(span_id) or {}
        for key, value in (
            ("name", begin.get("name")),
            ("type", begin.get("type")),
            ("parent", begin.get("parent_id")),
            ("start", _iso(begin.get("timestamp"))),
            ("end", _iso((self.span_ends.get(span_id) or {}).get("timestamp"))),
        ):
            if isinstance(value, str) and value:
                named[key] = value[:200]
        # The spans above it as [id, name] pairs, nearest first (at most 16): Inspect's solver and sample spans make
        # no event of their own, and the tree names them from here.
        path: list[list[str]] = []
        parent = begin.get("parent_id")
        while isinstance(parent, str) and len(path) < 16 and all(parent != p for p, _ in path):
            above = self.spans.get(parent) or {}
            path.append([parent[:200], str(above.get("name") or "")[:200]])
            parent = above.get("parent_id")
        if path:
            named["path"] = path
        if tool:
            ancestors: list[str] = []
            parent = (self.spans.get(span_id) or {}).get("parent_id")
            while isinstance(parent, str) and parent not in ancestors and len(ancestors) < 64:
                ancestors.append(parent[:200])
                parent = (self.spans.get(parent) or {}).get("parent_id")
            named["ancestors"] = ancestors
        return named

    def _finish(self) -> None:
        self._flush_results(until=None)
        answer = final_answer(self.events)
        for fields in claim_events(self.events):
            # The agent's own account, read from its final answer (n17q_engine/claim_extraction.py), at its time.
            when = answer["at"]["logical"] if answer is not None else None
            self._emit("account.claim", when, fields, mapped="final answer -> account.claim (extracted)")
        sample = self.sample
        if not self.scores_seen and isinstance(sample.get("scores"), dict):
            for scorer, score in sample["scores"].items():
                if isinstance(score, dict):
                    self._claim(str(scorer), score, _iso(sample.get("completed_at")), None, "sample scores")
        end_at = _iso(sample.get("completed_at"))
        error = sample.get("error")
        limit = sample.get("limit")
        if isinstance(error, (dict, str)):
            if not self.failed_state_written:
                message = error.get("message", "error") if isinstance(error, dict) else error
                self._emit(
                    "run.state", end_at, {"state": "failed", "reason": _one_line(message)}, mapped="sample error"
                )
            outcome = "error"
        elif isinstance(limit, dict):
            if not self.limit_state_written:
                reason = f"{limit.get('type')} limit {limit.get('limit')}"
                self._emit(
                    "run.state", end_at, {"state": "stopped", "reason": _one_line(reason)}, mapped="sample limit"
                )
            outcome = "limit"
        elif end_at is None and self.log.header.get("status") in ("started", "cancelled"):
            self._emit(
                "run.state",
                None,
                {"state": "interrupted", "reason": f"the eval's status is {self.log.header.get('status')}"},
                mapped="eval status -> run.state",
            )
            outcome = "interrupted"
        else:
            self._emit(
                "run.state",
                end_at,
                {"state": "completed", "reason": "sample completed"},
                mapped="sample end -> run.state completed",
            )
            outcome = "completed"
        self._emit("attempt.ended", end_at, {"outcome": outcome}, mapped="sample end -> attempt.ended")

    # ---- handlers, one per Inspect event type

    def _sample_init(self, event: dict[str, Any], at: str | None, origin: dict[str, Any]) -> None:
        # The attempt is already started at the sample's start; the init event's state stays in the blob.
        self.report.mapped["sample_init event -> attempt.started"] += 1

    def _model(self, event: dict[str, Any], at: str | None, origin: dict[str, Any]) -> None:
        messages = self._model_input(event)
        output = _obj(event.get("output"))
        choices = _items(output.get("choices"))
        message = choices[0].get("message") if choices and isinstance(choices[0], dict) else None
        message = message if isinstance(message, dict) else {}
        stop_reason = choices[0].get("stop_reason") if choices and isinstance(choices[0], dict) else None
        text = self._resolve(_message_text(message.get("content")))
        calls = []
        for call in message.get("tool_calls") or []:
            if isinstance(call, dict):
                calls.append(
                    {
                        "call": call.get("id"),
                        "tool": call.get("function"),
                        "arguments": self._resolve(call.get("arguments")),
                    }
                )
        proposal: dict[str, Any]
        if calls:
            proposal = {"type": "tool_call", "tool": calls[0]["tool"], "calls": calls, "text": text}
        elif text:
            proposal = {"type": "message", "text": text}
        else:
            proposal = {"type": "stop"}
        if stop_reason is not None:
            proposal["stop_reason"] = stop_reason
        fields: dict[str, Any] = {
            "context_digest": digest_json(messages),
            "proposal": proposal,
            "accepted": event.get("error") is None,
            "model": event.get("model"),
        }
        if event.get("error") is not None:
            fields["error"] = _one_line(event["error"])
        self._chat_fields(fields, event, messages, choices, output)
        proposal_id = self._emit("model.proposal", at, fields, mapped="model event -> model.proposal", origin=origin)
        for call in calls:
            if isinstance(call["call"], str):
                self.proposal_for_call[call["call"]] = proposal_id
        usage = output.get("usage")
        if isinstance(usage, dict):
            total = usage.get("total_tokens")
            if not isinstance(total, (int, float)) or isinstance(total, bool):
                total = sum(
                    v
                    for k in ("input_tokens", "output_tokens")
                    if isinstance(v := usage.get(k), (int, float)) and not isinstance(v, bool)
                )
            charged = {"resource": "tokens", "amount": total, "model": event.get("model")}
            for key in ("input_tokens", "output_tokens", "input_tokens_cache_read", "input_tokens_cache_write"):
                if isinstance(usage.get(key), int):
                    charged[key] = usage[key]
            self._emit(
                "budget.charged", _iso(event.get("completed")) or at, charged, mapped="model usage -> budget.charged"
            )

    def _chat_fields(
        self, fields: dict[str, Any], event: dict[str, Any], messages: list[Any], choices: list[Any], output: Any
    ) -> None:
        """The model call as it was asked and answered (additive fields, docs/formats/inspect.md "Model calls"): the
        input messages (Inspect ChatMessages, attachments resolved), the tools offered (ToolInfo), the tool choice,
        the generate config's settings, the answer's messages and usage; each inline when small, else a JSON blob
        (`<name>_blob`), as the OTLP format does. `n17q_engine.recorded_chat` reads them back as a chat request."""
        fields["messages_form"] = "inspect"
        self._inline_or_blob(fields, "input_messages", messages, "model-input")
        answers = [c.get("message") for c in choices if isinstance(c, dict) and isinstance(c.get("message"), dict)]
        if answers:
            out = [
                {**self._resolve(m), "stop_reason": c.get("stop_reason")}
                for c, m in zip(choices, answers, strict=False)
            ]
            self._inline_or_blob(fields, "output_messages", out, "model-output")
        tools = event.get("tools")
        if isinstance(tools, list):
            self._inline_or_blob(fields, "tools", self._resolve(tools), "model-tools")
        choice = event.get("tool_choice")
        if isinstance(choice, (str, dict)):
            fields["tool_choice"] = choice
        config = event.get("config")
        if isinstance(config, dict):
            settings = {k: v for k, v in config.items() if v is not None}
            if settings:
                self._inline_or_blob(fields, "config", settings, "model-config")
        usage = output.get("usage") if isinstance(output, dict) else None
        if isinstance(usage, dict):
            fields["usage"] = {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}

    def _inline_or_blob(self, fields: dict[str, Any], name: str, value: Any, role: str) -> None:
        if len(json.dumps(value, ensure_ascii=False, separators=(",", ":"))) <= _INLINE_CHAT_BYTES:
            fields[name] = value
        else:
            fields[f"{name}_blob"] = self.converted.add_json_blob(value, role)

    def _tool(self, event: dict[str, Any], at: str | None, origin: dict[str, Any]) -> None:
        call_id = event.get("id") if isinstance(event.get("id"), str) else None
        function = event.get("function") if isinstance(event.get("function"), str) else "unknown"
        arguments = self._resolve(event.get("arguments"))
        request = arguments if isinstance(arguments, dict) else {"arguments": arguments}
        tool_call = self._emit(
            "tool.call",
            at,
            {
                "tool": function,
                # Inspect has no tool contracts: 0 says "no contract revision recorded" (docs/formats/inspect.md).
                "contract_revision": 0,
                "request": request,
                "request_digest": request_digest(request),
                "proposal_id": self.proposal_for_call.get(call_id) if call_id else None,
                "workspace_id": None,
                "tool_call": call_id,
            },
            mapped="tool event -> tool.call",
            origin=origin,
        )
        if call_id:
            self.call_event_for_tool_id.setdefault(call_id, tool_call)
        error = event.get("error") if isinstance(event.get("error"), dict) else None
        if error is not None:
            outcome = _TOOL_ERROR_OUTCOMES.get(str(error.get("type")), "error")
        elif event.get("failed") or event.get("pending"):
            outcome = "error" if event.get("failed") else "unknown"
        else:
            outcome = "ok"
        result = self._resolve(event.get("result"))
        if error is None and not event.get("failed") and isinstance(result, str):
            blob = self.converted.add_blob(result.encode("utf-8"), "text/plain; charset=utf-8", "tool-output")
        else:
            body: dict[str, Any] = {"result": result, "error": error, "failed": bool(event.get("failed"))}
            if event.get("truncated") is not None:
                body["truncated"] = event.get("truncated")
            blob = self.converted.add_json_blob(body, "tool-output")
        fields: dict[str, Any] = {"call_id": tool_call, "origin": "historical", "outcome": outcome, "blob": blob}
        fields["absent"] = {}
        if error is not None:
            fields["error"] = {"type": error.get("type"), "message": _one_line(error.get("message", ""))}
        completed = _iso(event.get("completed")) or at or self.last_at
        self.pending_results.append(
            (completed, {"fields": fields, "mapped": "tool event -> tool.result", "origin": origin})
        )

    def _sandbox(self, event: dict[str, Any], at: str | None, origin: dict[str, Any]) -> None:
        if event.get("action") != "exec":
            self._unmapped(f"sandbox {event.get('action')} event")
            return
        workspace = self._sandbox_workspace(at)
        around = self._tool_call_around(event)
        exit_code = event.get("result")
        exit_code = exit_code if isinstance(exit_code, int) and not isinstance(exit_code, bool) else None
        output = self._resolve(event.get("output"))
        output_blob = (
            self.converted.add_blob(output.encode("utf-8"), "text/plain; charset=utf-8", "command-output")
            if isinstance(output, str)
            else None
        )
        self._emit(
            "command.receipt",
            _iso(event.get("completed")) or at,
            {
                "call_id": self._tool_call_event(around) if around is not None else None,
                "workspace_id": workspace,
                "command": str(event.get("cmd") or ""),
                "suites": [],
                # Inspect records no file trees: unknown stays unknown (docs/formats/inspect.md). A command that
                # never finished has no post-run tree at all, so it is null rather than a word standing in for one.
                "pre_tree": "unknown",
                "post_tree": "unknown" if exit_code is not None else None,
                "environment_revision": self._environment_revision(),
                "completion": "completed" if exit_code is not None else "started",
                "exit_code": exit_code,
                "results": {},
                "output_blob": output_blob,
            },
            mapped="sandbox exec event -> command.receipt",
            origin=origin,
        )

    def _approval(self, event: dict[str, Any], at: str | None, origin: dict[str, Any]) -> None:
        decision = event.get("decision")
        mapped_decision = _APPROVAL_DECISIONS.get(str(decision))
        if mapped_decision is None:
            self._unmapped(f"approval event with decision {decision}")
            self._note_once(
                f"approval decision {decision!r} is not an approval or rejection (it hands the call to the next "
                "approver): not mapped, kept in the sample's blob"
            )
            return
        approver = str(event.get("approver") or "unknown")
        call = _obj(event.get("call"))
        fields: dict[str, Any] = {
            # The subject is the tool call being approved; Inspect writes the approval before the tool event.
            "subject": self._tool_call_event(call.get("id")),
            "evidence_set_digest": evidence_set_digest([]),
            "decision": mapped_decision,
            "actor_role": approver[:200],
            "origin": "human" if approver in _HUMAN_APPROVERS else "simulated",
            "run": self.run["id"],
            "environment": self.run["environment"],
        }
        if event.get("explanation") is not None:
            fields["rationale"] = _one_line(event["explanation"])
        if decision in ("modify", "terminate"):
            fields["inspect_decision"] = decision
            if decision == "modify" and isinstance(event.get("modified"), dict):
                fields["modified_call"] = self._resolve(event["modified"])
            self._note_once(
                f"approval decision {decision!r} is recorded as {mapped_decision} with inspect_decision={decision!r}"
            )
        self._emit("approval.recorded", at, fields, mapped="approval event -> approval.recorded", origin=origin)

    def _error(self, event: dict[str, Any], at: str | None, origin: dict[str, Any]) -> None:
        error = _obj(event.get("error"))
        self._emit(
            "run.state",
            at,
            {"state": "failed", "reason": _one_line(error.get("message", "error"))},
            mapped="error event -> run.state failed",
            origin=origin,
        )
        self.failed_state_written = True

    def _sample_limit(self, event: dict[str, Any], at: str | None, origin: dict[str, Any]) -> None:
        reason = f"{event.get('type')} limit" + (f" {event['limit']}" if event.get("limit") is not None else "")
        if event.get("message"):
            reason += f": {event['message']}"
        self._emit(
            "run.state",
            at,
            {"state": "stopped", "reason": _one_line(reason)},
            mapped="sample_limit event -> run.state stopped",
            origin=origin,
        )
        self.limit_state_written = True

    def _score(self, event: dict[str, Any], at: str | None, origin: dict[str, Any]) -> None:
        if event.get("intermediate"):
            self._unmapped("score event (intermediate)")
            return
        score = _obj(event.get("score"))
        self.scores_seen = True
        self._claim(str(event.get("scorer") or "scorer"), score, at, origin, "score event -> account.claim")

    def _claim(self, scorer: str, score: dict[str, Any], at: str | None, origin: Any, mapped: str) -> None:
        value = score.get("value")
        shown = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        text = f"Scorer {scorer} scored {shown}"
        if score.get("answer") is not None:
            text += f" (answer: {score['answer']})"
        fields = {
            "text": _one_line(text),
            # A score is the harness's verdict on the sample, not the agent's account of its work: "other", so
            # LIN008 does not ask it for command receipts the harness never meant it to rest on.
            "claim_kind": "other",
            "supports": [],
            "claimant": f"scorer:{scorer}"[:200],
            "score": {
                "value": value,
                "answer": score.get("answer"),
                "explanation": score.get("explanation"),
            },
        }
        self._emit("account.claim", at, fields, mapped=mapped, origin=origin)

    # ---- helpers

    def _note_once(self, note: str) -> None:
        if note not in self.report.notes:
            self.report.notes.append(note)

    def _resolve(self, value: Any) -> Any:
        """Replace `attachment://<hash>` strings (Inspect moves long text into the sample's attachments)."""
        if isinstance(value, str):
            if value.startswith(_ATTACHMENT):
                found = self.attachments.get(value[len(_ATTACHMENT) :])
                if not isinstance(found, str):
                    return value
                self.resolved_chars += len(found)
                if self.resolved_chars > self.caps.max_resolved_chars:
                    raise ConversionError(
                        f"sample {str(self.sample.get('id'))[:80]!r} names its attachments for more than "
                        f"{self.caps.max_resolved_chars} characters in all (the cap of one run's attachment text)"
                    )
                return found
            return value
        if isinstance(value, list):
            return [self._resolve(v) for v in value]
        if isinstance(value, dict):
            return {k: self._resolve(v) for k, v in value.items()}
        return value

    def _model_input(self, event: dict[str, Any]) -> list[Any]:
        """The messages the model saw: inline, or from the sample's message pool (`input_refs` ranges)."""
        messages = list(event.get("input") or []) if isinstance(event.get("input"), list) else []
        refs = event.get("input_refs")
        if isinstance(refs, list):
            for ref in refs:
                if isinstance(ref, list) and len(ref) == 2 and all(isinstance(i, int) for i in ref):
                    named = self.message_pool[ref[0] : ref[1]]
                    self.pool_messages += len(named)
                    if self.pool_messages > self.caps.max_pool_messages:
                        raise ConversionError(
                            f"sample {str(self.sample.get('id'))[:80]!r}: its model events name more than "
                            f"{self.caps.max_pool_messages} pool messages in all (the cap of one run)"
                        )
                    messages.extend(named)
        return self._resolve(messages)

    def _tool_call_event(self, call_id: Any) -> str:
        """The tool.call event id of Inspect tool call `call_id`, written now or later in this walk."""
        if isinstance(call_id, str):
            if call_id in self.call_event_for_tool_id:
                return self.call_event_for_tool_id[call_id]
            # Inspect writes an approval before its tool event: the reference is made good by _link_forward once
            # the tool.call is written; one that stays names a call the log never ran (a dangling edge, LIN011).
            return f"{_FORWARD}{call_id}"[:200]
        return f"{_FORWARD}unknown"

    def _link_forward(self) -> None:
        for event in self.events:
            for name in ("subject", "call_id"):
                value = event.get(name)
                if isinstance(value, str) and value.startswith(_FORWARD):
                    target = self.call_event_for_tool_id.get(value.removeprefix(_FORWARD))
                    if target is not None:
                        event[name] = target

    def _tool_call_around(self, event: dict[str, Any]) -> str | None:
        """The tool.call whose execution ran this sandbox command: the nearest enclosing span of type "tool",
        matched to the tool event of the same function in that span's parent whose run covers the command."""
        span = self.spans.get(str(event.get("span_id")))
        depth = 0
        while span is not None and span.get("type") != "tool" and depth < 100:
            span = self.spans.get(str(span.get("parent_id")))
            depth += 1
        if span is None:
            return None
        when = _iso(event.get("timestamp")) or ""
        candidates = [
            tool.get("id")
            for tool in self.tools_by_span.get(str(span.get("parent_id")), [])
            if tool.get("function") == span.get("name")
            and isinstance(tool.get("id"), str)
            and (_iso(tool.get("timestamp")) or "") <= when <= (_iso(tool.get("completed")) or "\uffff")
        ]
        # Two calls of one tool running at once cannot be told apart: no link rather than a guessed one.
        return candidates[0] if len(candidates) == 1 else None

    def _sandbox_workspace(self, at: str | None) -> str:
        if self.workspace is None:
            sandbox = self.sample.get("sandbox") or self.spec.get("sandbox")
            files = self.sample.get("files") or []
            self.workspace = "inspect-sandbox"
            self._emit(
                "workspace.created",
                at,
                {
                    "workspace_id": self.workspace,
                    # Digests of what the log declares (the sandbox spec, the sample's files), not of file trees:
                    # Inspect records no trees (docs/formats/inspect.md).
                    "base_digest": digest_json({"sandbox": sandbox}),
                    "overlay_digest": digest_json({"files": files}),
                    "environment_revision": self._environment_revision(),
                    "derived_from": None,
                    "sandbox": sandbox,
                },
                mapped="first sandbox exec -> workspace.created",
            )
        return self.workspace

    def _environment_revision(self) -> str:
        sandbox = self.sample.get("sandbox") or self.spec.get("sandbox")
        if isinstance(sandbox, dict):
            kind = sandbox.get("type", "unknown")
            config = sandbox.get("config")
            return _one_line(f"inspect-sandbox:{kind}" + (f"@{digest_json(config)[7:19]}" if config else ""), 200)
        return "inspect-sandbox:unknown"


def _text(value: Any, default: str) -> str:
    return value if isinstance(value, str) and value else default


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _items(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _flatten(events: list[Any], depth: int = 0) -> Iterator[tuple[int | str, Any]]:
    """The events in log order, a tool event's nested `events` (older logs) right after it."""
    for i, event in enumerate(events):
        yield (i if depth == 0 else f"{depth}.{i}"), event
        nested = event.get("events") if isinstance(event, dict) and event.get("event") == "tool" else None
        if isinstance(nested, list) and nested and depth < 20:
            yield from _flatten(nested, depth + 1)


# A model call's messages, tools or config at most this long (JSON text) ride inline on its model.proposal; longer
# ones are blobs it names (the OTLP format's INLINE_PAYLOAD_BYTES).
_INLINE_CHAT_BYTES = 1024


def _message_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for item in content:
            if isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str):
                parts.append(item["text"])
        return "\n".join(parts)
    return ""


def _first_event_time(sample: dict[str, Any]) -> str | None:
    for event in sample.get("events") or []:
        if isinstance(event, dict) and (at := _iso(event.get("timestamp"))):
            return at
    return None


def _model_version(sample: dict[str, Any], model: str) -> str:
    """The model the provider says answered (e.g. a dated snapshot), from the first model event; else the name."""
    for event in sample.get("events") or []:
        if isinstance(event, dict) and event.get("event") == "model":
            output = event.get("output")
            if isinstance(output, dict) and isinstance(output.get("model"), str) and output["model"]:
                return output["model"]
    return model


_HANDLERS = {
    "sample_init": _SampleConverter._sample_init,
    "model": _SampleConverter._model,
    "tool": _SampleConverter._tool,
    "sandbox": _SampleConverter._sandbox,
    "approval": _SampleConverter._approval,
    "error": _SampleConverter._error,
    "sample_limit": _SampleConverter._sample_limit,
    "score": _SampleConverter._score,
}
