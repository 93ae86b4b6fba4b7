"""The check of a bundle's events.jsonl that runs ahead of the importer: every line validated (the bundle reader,
`n17q_engine.bundle.iter_event_records`: JSON, the vocabulary, seq order, unique ids) and scanned for secrets
(`scanning`), a megabyte of lines at a time, in a thread or a process of its own (issue 31).

The importer (`runs.secret_scan.EventsAhead`) parses a line only once this check has passed it, and masks in it the
values this check found. So the importer's own loop does neither the validation nor the scan, and a large bundle's
check runs on another core: `python -m n17q_secrets.events_check PATH` writes one JSON object per line on stdout.
`python -m n17q_secrets.events_check --serve` checks one path per line read on stdin (a JSON string), each answered
as below, until stdin closes: a file of many runs is checked by one process, which compiles the rules once (about
0.3 s of a core).

Messages, in order (one per chunk of lines, then one last):
- `{"through": N, "flagged": {"<line>": {"<value>": "<rule>"}}}`: lines 1..N are valid; these hold secrets.
- `{"done": N, "sha256": "<hex>"}`: the whole file is valid and has N lines; the digest of the bytes checked, which
  the importer compares with the bytes it stored (the file cannot change between the two reads unnoticed).
- `{"error": {"message", "file", "line", "field"}}`: the bundle reader's refusal (a BundleError), lines before
  `line` valid; or `{"failure": "<one line>"}` when the check itself broke.

Each of `done`, `error` and `failure` is a path's last message.

Django-free and database-free like the rest of this package (an import-linter contract keeps it so): a child
process needs neither, and starts in about 0.2 s.
"""

from __future__ import annotations

import bisect
import hashlib
import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import ahocorasick

from n17q_engine import bundle
from n17q_engine.bundle import BundleError

from . import scanning

SCAN_CHUNK_BYTES = 1 << 20

Message = dict[str, Any]


def text_chunks(stream: BinaryIO, *, digest: Any = None) -> Iterator[tuple[int, str]]:
    """(number of the first line, the lines as one text) about SCAN_CHUNK_BYTES at a time, whole lines, numbered as
    the bundle reader numbers them (a line ends at each line feed). `digest` (a hashlib object) is fed every byte."""
    first = 1
    pending = b""
    while True:
        block = stream.read(SCAN_CHUNK_BYTES)
        if digest is not None:
            digest.update(block)
        data = pending + block
        if not block:
            if data:
                yield first, data.decode("utf-8", "replace").removesuffix("\n")
            return
        cut = data.rfind(b"\n")
        if cut == -1:
            pending = data
            continue
        pending = data[cut + 1 :]
        text = data[:cut].decode("utf-8", "replace")
        yield first, text
        first += text.count("\n") + 1


def scan_text_lines(text: str) -> dict[int, dict[str, str]]:
    """{offset of a line in `text`: {value: rule}} for the lines holding a value the scan finds."""
    hits = scanning.scan_lines(text)
    if not hits:
        return {}
    automaton = ahocorasick.Automaton()
    for rule, value in hits:
        automaton.add_word(value, (value, rule))
    automaton.make_automaton()
    starts = [0]
    position = text.find("\n")
    while position != -1:
        starts.append(position + 1)
        position = text.find("\n", position + 1)
    flagged: dict[int, dict[str, str]] = {}
    for end, (value, rule) in automaton.iter(text):
        offset = bisect.bisect_right(starts, end) - 1
        flagged.setdefault(offset, {})[value] = rule
    return flagged


def check_events(
    path: Path,
    emit: Callable[[Message], None],
    stopping: Callable[[], bool] = lambda: False,
    *,
    validate: bool = True,
) -> None:
    """Validate and scan `path`, emitting the messages above. Two reads of the file, in step: the scan's chunks and
    the bundle reader, which is advanced to the last line of each chunk before the chunk is reported.

    `validate=False`: the scan alone, for an importer that validates each line itself as it reads it (in the same
    process, where validating here would only make it wait: one interpreter runs one of them at a time, while RE2
    matches with the interpreter's lock let go)."""
    digest = hashlib.sha256()
    through = 0
    try:
        with open(path, "rb") as scan_stream, open(path, "rb") as read_stream:
            records = bundle.iter_event_records(read_stream) if validate else iter(())
            for first, text in text_chunks(scan_stream, digest=digest):
                if stopping():
                    return
                flagged = scan_text_lines(text)
                last = first + text.count("\n")
                if not validate:
                    through = last
                while through < last:
                    record = next(records, None)
                    if record is None:
                        break
                    through = record.line
                emit({"through": through, "flagged": {str(first + k): v for k, v in flagged.items()}})
            # The reader's own end: "no events", and the last line's checks, are its to make.
            for record in records:
                through = record.line
        emit({"done": through, "sha256": digest.hexdigest()})
    except BundleError as exc:
        emit({"error": {"message": exc.reason, "file": exc.file, "line": exc.line, "field": exc.field}})


def _emit_to(out: Any) -> Callable[[Message], None]:
    def emit(message: Message) -> None:
        out.write(json.dumps(message, ensure_ascii=False) + "\n")
        out.flush()

    return emit


def check_one(path: Path, emit: Callable[[Message], None]) -> None:
    """`check_events`, its own breakage said as a `failure` message: the importer fails closed on it, never storing
    an unchecked line."""
    try:
        check_events(path, emit)
    except Exception as exc:
        emit({"failure": f"{type(exc).__name__}: {' '.join(str(exc).splitlines())[:500]}"})


def main(argv: list[str]) -> int:
    emit = _emit_to(sys.stdout)
    if argv == ["--serve"]:
        scanning.scan_lines("")  # the rules compiled now, while the importer prepares the first run
        for line in sys.stdin:
            check_one(Path(json.loads(line)), emit)
        return 0
    if len(argv) != 1 or argv[0].startswith("--"):
        print("usage: python -m n17q_secrets.events_check EVENTS_JSONL | --serve", file=sys.stderr)
        return 2
    check_one(Path(argv[0]), emit)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
