"""The one identifier grammar: runs, events, attempts, workspaces, artifacts, tools, fixtures (docs/identifiers.md).

An identifier is shown to people, compared by people, put in URL path segments and kept in database columns, so it
must read as what it is, resolve where its link points, and fit its column together with anything derived from it.
Every door (run bundles, OTLP and Inspect conversion, scenario packages, captures) asks `id_problem` and refuses
with one line naming the field; nothing here normalises or repairs a value (a converter that builds ids from free
text makes them valid itself, see `make_id`).

The grammar:

- 1 to `max_len` characters (the column's width, or less where an id is extended: see MAX_RUN_ID_CHARS);
- each character an ASCII letter or digit, one of ``- _ . : @ + ~ =``, or a non-ASCII letter, mark or digit
  (Unicode categories L*, M*, N*): no space, no "/", "\\", "?", "#", "%", no quote or angle bracket, no control
  or format character (so no bidirectional override and no zero-width character);
- not "." or ".." (dot segments: a URL holding one resolves to another page);
- in Unicode normalisation form NFC: a non-NFC id is refused, not normalised (two spellings of one id would be
  two ids that display alike; the harness is told to send the NFC form).

Run ids a subsystem derives are reserved to it (issue 33, `DERIVED_RUN_IDS`): a replay's `<run>~<mode>-<pk>`, the
OTLP converter's `otlp-<trace id>`, the Inspect converter's `inspect-<task>-<sample>-e<epoch>…`. A run id in one of
these namespaces is imported only by the subsystem that derives it (`derived_run_id_problem`), so nobody names a run
ahead of the subsystem that will make it (a forged replay result, a trace's run pre-empted by a bundle).

Scenario names are stricter (lowercase ASCII letters, digits and "-", at most 100): they appear in
`name@version` references and in file names.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Any

# The width of the columns that keep ids (runs.models: run_id, event_id, refs; fixtures_review: tool).
MAX_ID_CHARS = 200
# A replay's run is named `<source run>~<mode>-<replay pk>` (runs.importer.REPLAY_RUN_SEPARATOR): the longest
# suffix is "~counterfactual-" and a 19-digit key (a BIGINT), 35 characters. A run id as a harness names it (the
# part before the first "~") is kept to MAX_ID_CHARS - REPLAY_SUFFIX_ROOM, so every replay of it fits its column.
REPLAY_SUFFIX_ROOM = 40
MAX_RUN_ID_CHARS = MAX_ID_CHARS - REPLAY_SUFFIX_ROOM
REPLAY_SEPARATOR = "~"
LONGEST_REPLAY_SUFFIX = len("~counterfactual-") + 19
MAX_SCENARIO_NAME_CHARS = 100

# Integer columns: PositiveIntegerField / IntegerField are 32-bit on PostgreSQL, BigIntegerField 64-bit.
INT32_MAX = 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

ID_PUNCTUATION = "-_.:@+~="
_ASCII_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789" + ID_PUNCTUATION)
_SCENARIO_NAME = re.compile(r"[a-z0-9][a-z0-9-]*")


# Every id a harness writes is plain ASCII (a uuid, "att-1", "sha256:…"): one C-level regex match tells such an id
# is all grammar characters, where the loop below costs a Python iteration per character (at 200,000 ids an import
# spent more time here than in parsing their JSON). The loop still decides everything else, so its answer (the first
# bad character) and the message made from it are unchanged; tests/engine/test_identifiers_fast_path.py holds the
# two equal on arbitrary text.
_ASCII_ID = re.compile("[A-Za-z0-9" + re.escape(ID_PUNCTUATION) + "]+")


def _bad_character(value: str) -> str | None:
    if _ASCII_ID.fullmatch(value):
        return None
    for char in value:
        if char in _ASCII_OK:
            continue
        if ord(char) >= 128 and unicodedata.category(char)[0] in "LMN":
            continue
        return char
    return None


def _describe(char: str) -> str:
    name = unicodedata.name(char, "")
    return f"U+{ord(char):04X}" + (f" {name}" if name else "")


def id_problem(value: Any, *, what: str = "an id", max_len: int = MAX_ID_CHARS) -> str | None:
    """Why `value` cannot be an identifier, as the rest of a sentence ("must be ..."), or None when it can."""
    if not isinstance(value, str):
        return f"must be {what}, a string, got {type(value).__name__}"
    if not value:
        return f"must be {what}, not empty"
    if len(value) > max_len:
        return f"must be {what} of at most {max_len} characters (has {len(value)})"
    if value in (".", ".."):
        return f"must be {what}, not {value!r} (a dot segment names another page in a link)"
    bad = _bad_character(value)
    if bad is not None:
        return (
            f"must be {what} of letters, digits and {' '.join(ID_PUNCTUATION)} only (holds {_describe(bad)} at "
            f"{value.index(bad) + 1})"
        )
    if not value.isascii() and not unicodedata.is_normalized("NFC", value):
        return f"must be {what} in Unicode normal form NFC (send {unicodedata.normalize('NFC', value)!r})"
    return None


def run_id_problem(value: Any) -> str | None:
    """As `id_problem` for a run id: the name a harness gives (before any `~`) leaves room for replay suffixes."""
    problem = id_problem(value, what="a run id")
    if problem is None and len(value.split(REPLAY_SEPARATOR, 1)[0]) > MAX_RUN_ID_CHARS:
        return (
            f"must be a run id of at most {MAX_RUN_ID_CHARS} characters (has {len(value)}), leaving room for its "
            "replays' run ids"
        )
    return problem


def replay_run_id_problem(source_run_id: str, mode: str) -> str | None:
    """Why a replay of `source_run_id` in `mode` could not name its run (its id would not fit), or None."""
    longest = len(source_run_id) + len(REPLAY_SEPARATOR) + len(mode) + 1 + 19
    if longest > MAX_ID_CHARS:
        return (
            f"run {source_run_id[:40]}\u2026's id is too long to name a replay's run ({longest} > {MAX_ID_CHARS} "
            "characters); replay the run it was replayed from instead"
        )
    return None


@dataclass(frozen=True)
class DerivedRunIds:
    """A namespace of run ids that one subsystem derives from what it converts or runs: ids holding `separator`
    anywhere, or starting with `prefix`. Only `maker` imports a run whose id is in it."""

    maker: str  # the subsystem, as the importer is told who is importing (runs.importer: `made_by`)
    named: str  # the subsystem as a sentence names it
    prefix: str = ""
    separator: str = ""

    def holds(self, run_id: str) -> bool:
        return bool(self.separator and self.separator in run_id) or bool(self.prefix and run_id.startswith(self.prefix))

    @property
    def shape(self) -> str:
        return f"holding {self.separator!r}" if self.separator else f"starting {self.prefix!r}"


# The subsystems that derive run ids, as the importer is told who imports.
REPLAY_MAKER = "replay"
OTLP_MAKER = "otlp"
INSPECT_MAKER = "inspect"
OTLP_RUN_PREFIX = "otlp-"
INSPECT_RUN_PREFIX = "inspect-"

# Every namespace of derived run ids, in the order they are matched: a replay's id starts with its source run's
# (`otlp-<trace>~replay-7`), so the separator is looked at first. A new subsystem that names runs itself declares its
# namespace here, and the importer refuses that namespace to every other door.
DERIVED_RUN_IDS = (
    DerivedRunIds(REPLAY_MAKER, "the replay worker", separator=REPLAY_SEPARATOR),
    DerivedRunIds(
        OTLP_MAKER,
        "the OTLP converter (the receiver at /v1/traces, or an OTLP trace file's import)",
        prefix=OTLP_RUN_PREFIX,
    ),
    DerivedRunIds(INSPECT_MAKER, "the Inspect log converter", prefix=INSPECT_RUN_PREFIX),
)


def derived_run_ids(run_id: str) -> DerivedRunIds | None:
    """The namespace of derived run ids `run_id` is in, or None (a name a harness may give)."""
    return next((d for d in DERIVED_RUN_IDS if d.holds(run_id)), None)


def derived_run_id_problem(run_id: str, *, made_by: str | None) -> str | None:
    """Why a run named `run_id` may not be imported by `made_by` (a maker of DERIVED_RUN_IDS; None: a bundle a
    harness or a person wrote), as the rest of a sentence ("must ..."), or None when it may."""
    derived = derived_run_ids(run_id)
    if derived is None or derived.maker == made_by:
        return None
    return (
        f"must not be a run id {derived.shape}: those are reserved for the runs {derived.named} makes; "
        "name the run otherwise"
    )


def scenario_name_problem(value: Any) -> str | None:
    if not isinstance(value, str) or not _SCENARIO_NAME.fullmatch(value) or len(value) > MAX_SCENARIO_NAME_CHARS:
        shown = repr(value if not isinstance(value, str) or len(value) <= 60 else value[:60] + "\u2026")
        return f"{shown} must be lowercase letters, digits and '-' (at most {MAX_SCENARIO_NAME_CHARS} characters)"
    return None


def int_problem(value: Any, *, low: int, high: int) -> str | None:
    """Why `value` cannot go in an integer column holding low..high, or None."""
    if not isinstance(value, int) or isinstance(value, bool):
        return f"must be an integer, got {type(value).__name__}"
    if not low <= value <= high:
        return f"must be an integer from {low} to {high}, got {value if abs(value) < 10**30 else 'a larger one'}"
    return None


# What a converter replaces when it builds an id part from free text: anything but word characters (letters, digits,
# "_": never a mark, a format or a control character) and . : @ + = -.
_NOT_ID_PART = re.compile(r"[^\w.:@+=-]+")


def make_id(text: Any, limit: int) -> str:
    """An id part from free text (an Inspect task or sample name): NFC, every run of characters outside the
    grammar replaced by "-", cut to `limit`; "x" when nothing is left. The result holds no "~" and never starts or
    ends with "-", and an ASCII name makes the same part it always made (ids of re-imported logs stay stable)."""
    part = _NOT_ID_PART.sub("-", unicodedata.normalize("NFC", str(text))).strip("-") or "x"
    return part[:limit]


__all__ = [
    "DERIVED_RUN_IDS",
    "INSPECT_MAKER",
    "INT32_MAX",
    "INT64_MAX",
    "INT64_MIN",
    "MAX_ID_CHARS",
    "MAX_RUN_ID_CHARS",
    "MAX_SCENARIO_NAME_CHARS",
    "OTLP_MAKER",
    "REPLAY_MAKER",
    "DerivedRunIds",
    "derived_run_id_problem",
    "derived_run_ids",
    "id_problem",
    "int_problem",
    "make_id",
    "replay_run_id_problem",
    "run_id_problem",
    "scenario_name_problem",
]
