"""The storage gate's CI check (issue 32): no write path of the product's code goes around n17q_secrets.gate.

The gate is structural where a type can say it (console.blob_store takes only gated values; console.gated_fields
mask on write; runs.bulk.Appender refuses an ungated body). This check covers what a type cannot: code that writes
by another door. An AST walk over the product's packages (not tests, benchmarks or scripts) reports, as
`file:line: rule: what`:

- storage-save      a `Storage.save(name, content)` (`storages[...]`), anywhere but console/blob_store.py;
- open-write        `open(...)` or `.open(...)` with a mode that writes ("w", "a", "x", "+");
- path-write        `Path.write_bytes` / `Path.write_text`;
- file-copy         `shutil.copy*` / `shutil.move` / `tarfile.open(..., "w…")` / `zipfile.ZipFile(..., "w"|"a"|"x")`;
- raw-sql-write     `.execute` / `.executemany` / `.copy` of SQL that inserts or updates, or of SQL not written as a
                    literal here (an ORM write goes through the fields' get_prep_value: gated, or UNGATED with
                    its reason in console.gated_fields; `manage.py check` holds that);
- gated-construct   `GatedBytes(...)`, `GatedText(...)`, `GatedJSON(...)`, `GatedFile(...)` outside the gate;
- already-masked    `already_masked(...)` outside the modules named in ALREADY_MASKED_CALLERS.

A finding is allowed only by ALLOWED, keyed by (file, rule), with the reason the write cannot carry a secret past
the gate (a temporary work file removed before the request or task ends, a file the engine writes from values
already stored gated, …). A new write path fails the check until it goes through the gate or is named there.

Run: `python scripts/check_storage_gate.py [paths…]` (default: the product's packages); exit 1 on a finding.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT_PACKAGES = (
    "accounts",
    "console",
    "fixtures_review",
    "n17q_demo",
    "n17q_engine",
    "n17q_secrets",
    "n17q_site",
    "otlp_receiver",
    "replays",
    "runs",
)

GATE_MODULE = "n17q_secrets/gate.py"
BLOB_WRITER = "console/blob_store.py"
GATED_TYPES = frozenset({"GatedBytes", "GatedText", "GatedJSON", "GatedFile"})

# Where a value may be wrapped as gated without a second scan, and the scan each relies on.
ALREADY_MASKED_CALLERS: dict[str, str] = {
    "runs/importer.py": "event lines: EventsAhead scanned every line before it is parsed (secret_scan.mask_event "
    "masked what it found); blob files: secret_scan.mask_blobs scanned each and replaced one holding a secret",
}

_TEMP = "a temporary work file in a TemporaryDirectory or a work dir removed before the request or task ends"
# (file, rule) -> why this write cannot carry a secret past the gate.
ALLOWED: dict[tuple[str, str], str] = {
    ("runs/importer.py", "open-write"): "an upload streamed to " + _TEMP + " (the import's scan reads it next)",
    ("runs/secret_scan.py", "path-write"): "masked blob bytes (the gate's mask_bytes) into the import's " + _TEMP,
    ("runs/import_formats.py", "path-write"): "an uploaded trace file handed to the converter process, in " + _TEMP,
    ("runs/import_formats.py", "open-write"): "the converter process's stderr, in " + _TEMP,
    ("runs/bulk.py", "raw-sql-write"): "Appender: refuses a row whose gated column is not a GatedText (the gate's)",
    ("runs/import_slices.py", "raw-sql-write"): "Appender statements (see runs/bulk.py), PRAGMAs, lease rows of "
    "its own (ids, host, timestamps) and DELETEs of a refused import's rows",
    ("otlp_receiver/services.py", "raw-sql-write"): "UPDATE … RETURNING of the enqueued_at timestamp alone",
    ("replays/agents.py", "file-copy"): "an agent's wheel the operator registers, copied to its install folder "
    "(code, not captured data; replays.agents)",
    ("n17q_demo/stories/bundle.py", "path-write"): "the demo's own synthetic bundles, written to " + _TEMP,
    ("n17q_engine/package.py", "path-write"): "a scenario package the operator exports (export_package) from stored,"
    " gated rows to a path of theirs, or the demo's own scenarios",
    ("n17q_engine/package.py", "file-copy"): "the same package as a .zip or .tar.gz (export_package)",
    ("runs/bundle_export.py", "open-write"): "a run exported as a bundle (export_run, the run page, the API) from "
    "stored, gated rows and blobs read through runs.blob_access, to the operator's file or the response",
    ("runs/bundle_export.py", "file-copy"): "the same export's .zip (runs.bundle_export.run_bundle_zip)",
    ("n17q_engine/replay/output.py", "path-write"): "a replay's output bundle, imported next through the run "
    "importer's scan (the gate) from " + _TEMP,
    ("n17q_engine/formats/__init__.py", "path-write"): "a converted bundle, imported next through the run importer's "
    "scan (the gate) from " + _TEMP,
    ("n17q_engine/formats/__init__.py", "open-write"): "a converted bundle's events.jsonl, as above",
    ("n17q_engine/agent/decider.py", "open-write"): "the agent's task file inside the sandbox's working folder (the "
    "replay package's own values, already stored gated; gone with the sandbox)",
    ("n17q_engine/agent/environment.py", "path-write"): "an agent environment's requirements file (package names)",
    ("n17q_engine/agent/unpack.py", "open-write"): "an agent's wheel and the registry wheels it requires, unpacked "
    "into its environment (code, not captured data; issue 33: unpacked, never run on the host)",
    ("n17q_engine/archive.py", "open-write"): "a bundle unpacked into " + _TEMP + " for the importer's scan",
    ("n17q_engine/spill.py", "raw-sql-write"): "the engine's spill database, a temporary file of ids and graph "
    "records for one import, deleted when it ends",
    ("n17q_engine/replay_suite.py", "file-copy"): "an agent's folder (its code, from the CI suite) copied into "
    + _TEMP
    + " for the sandbox's unprivileged uid to read, removed when the replay ends; never run in the console",
}


@dataclass(frozen=True)
class Finding:
    file: str
    line: int
    rule: str
    what: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.rule}: {self.what}"


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_name(node.value)}.{node.attr}"
    if isinstance(node, ast.Subscript):
        return _name(node.value) + "[]"
    if isinstance(node, ast.Call):
        return _name(node.func) + "()"
    return "?"


def _literal(node: ast.AST | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value for v in node.values if isinstance(v, ast.Constant) and isinstance(v.value, str))
    return None


def _arg(call: ast.Call, index: int, keyword: str) -> ast.AST | None:
    if len(call.args) > index:
        return call.args[index]
    return next((k.value for k in call.keywords if k.arg == keyword), None)


def _writes(mode: str | None) -> bool:
    return mode is not None and any(c in mode for c in "wax+")


_READS = ("SELECT", "PRAGMA", "SET ", "BEGIN", "COMMIT", "ROLLBACK", "CREATE", "DELETE", "SAVEPOINT", "RELEASE")


def _sql_writes(sql: str, whole: bool) -> bool:
    """SQL that writes a value into a row; `whole`: the literal is the statement's whole text (not an f-string)."""
    words = sql.upper()
    if any(w in words for w in ("INSERT", "UPDATE", "COPY ", "REPLACE")):
        return True
    # An f-string whose literal part does not say what it is (`f"{sql} RETURNING …"`): unknown, so reported.
    return not whole and not words.lstrip().startswith(_READS)


def _findings(tree: ast.AST, file: str) -> Iterator[Finding]:
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = _name(func)
        attr = func.attr if isinstance(func, ast.Attribute) else (func.id if isinstance(func, ast.Name) else "")
        if attr == "save" and len(node.args) >= 2 and file != BLOB_WRITER:
            yield Finding(file, node.lineno, "storage-save", f"{name}(name, content) writes a file past the gate")
        elif attr == "open" and not name.startswith(("os.", "tarfile.", "zipfile.")):
            mode = _literal(_arg(node, 1, "mode"))
            first = _literal(node.args[0]) if node.args else None
            if isinstance(func, ast.Attribute) and first is not None and set(first) <= set("rwabxt+"):
                mode = first  # Path.open(mode)
            if _writes(mode):
                yield Finding(file, node.lineno, "open-write", f"{name}(…, {mode!r})")
        if attr in ("write_bytes", "write_text"):
            yield Finding(file, node.lineno, "path-write", f"{name}(…)")
        elif name.startswith("shutil.") and attr.startswith(("copy", "move")):
            yield Finding(file, node.lineno, "file-copy", f"{name}(…)")
        elif name in ("tarfile.open", "zipfile.ZipFile") and _writes(_literal(_arg(node, 1, "mode"))):
            yield Finding(file, node.lineno, "file-copy", f"{name}(…, writing)")
        elif attr in ("execute", "executemany", "executescript", "copy") and isinstance(func, ast.Attribute):
            if attr == "copy" and not node.args:
                continue  # dict.copy(), list.copy()
            first_arg = _arg(node, 0, "sql")
            sql = _literal(first_arg)
            if sql is None and attr == "copy" and not isinstance(first_arg, ast.JoinedStr | ast.BinOp | ast.Name):
                continue
            if sql is None or _sql_writes(sql, whole=isinstance(first_arg, ast.Constant)):
                what = "SQL not written as a literal here" if sql is None else "SQL that writes rows"
                yield Finding(file, node.lineno, "raw-sql-write", f"{name}({what}) bypasses the gated fields")
        if attr in GATED_TYPES and file != GATE_MODULE:
            yield Finding(file, node.lineno, "gated-construct", f"{attr}(…) is made by n17q_secrets.gate alone")
        wraps = attr in ("already_masked", "already_masked_texts")
        if wraps and file not in ALREADY_MASKED_CALLERS and file != GATE_MODULE:
            yield Finding(file, node.lineno, "already-masked", f"{attr}(…) outside the callers the gate check allows")


def check_file(path: Path, root: Path = ROOT) -> list[Finding]:
    try:
        file = path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        file = path.as_posix()
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=file)
    except SyntaxError as exc:
        return [Finding(file, exc.lineno or 0, "syntax", str(exc.msg))]
    return [f for f in _findings(tree, file) if (f.file, f.rule) not in ALLOWED]


def product_files(root: Path = ROOT) -> Iterator[Path]:
    for package in PRODUCT_PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts or "tests" in path.parts:
                continue
            yield path


def unused_allowances(findings_seen: set[tuple[str, str]]) -> list[str]:
    return [
        f"{file}: {rule}: allowed in ALLOWED, no longer found"
        for file, rule in ALLOWED
        if (file, rule) not in findings_seen
    ]


def main(argv: list[str]) -> int:
    paths = [Path(a) for a in argv] if argv else list(product_files())
    found: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    for path in paths:
        file_findings = check_file(path)
        found += file_findings
        if not argv:
            tree = ast.parse(path.read_text(encoding="utf-8"))
            rel = path.resolve().relative_to(ROOT).as_posix()
            seen |= {(f.file, f.rule) for f in _findings(tree, rel)}
    stale = unused_allowances(seen) if not argv else []
    for f in found:
        print(f)
    for line in stale:
        print(line)
    if found or stale:
        print(f"storage gate: {len(found)} write path(s) around the gate, {len(stale)} stale allowance(s)")
        return 1
    print(f"storage gate: {len(paths)} files, every write path goes through the gate or is allowed with a reason")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
