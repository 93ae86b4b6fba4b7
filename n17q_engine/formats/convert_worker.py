"""A trace file or log converted in a process of its own, ahead of the importer (issue 17: the 10 s file budget).

`python -m n17q_engine.formats.convert_worker FORMAT SOURCE OUTDIR`: converts SOURCE (FORMAT `otlp-protobuf`,
`otlp-json` or `inspect`) one run at a time, writes each as a bundle folder `OUTDIR/run-<i>` and says so on stdout,
one JSON line per run: `{"folder", "run_id", "report", "total"}` (total: null when not known ahead); then
`{"done": true}`. A refusal is one line `{"error": <one-line message>, "kind": "conversion" | "bundle"}`, exit
status 3.

Why a process: the conversion is pure Python, and so is the import; in one process they take turns on one core
while the machine's other core idles. Run by the import door (runs.import_formats), the converter writes run i+1
while the importer stores run i. It never runs more than one run ahead: before writing run i+2 it waits for the
importer's line on stdin saying run i is stored and its folder gone, so at most two folders are on disk and one
converted run in this process's memory. A run's original (an OTLP file keeps the file itself) is a hard link to
SOURCE, not another copy of it.

Limits (issue 35): `--memory-mb N` caps the process's address space (RLIMIT_AS) and `--cpu-seconds N` its CPU time
(RLIMIT_CPU), set by the process on itself before it reads SOURCE (the import door passes N17Q_CONVERT_MEMORY_MB and
N17Q_CONVERT_CPU_S). The converters bound what they read by caps of their own; these limits bound what nobody
foresaw. Either one reached is the one-line refusal `{"error": ..., "kind": "limit"}`, exit status 3; a process
killed at the CPU limit's hard edge (a C call that never returned to Python) is named by the import door instead.

Why not a fork of the web process: that process has threads (the OTLP receiver's sweep) and may hold a
PostgreSQL connection; a fresh interpreter inherits neither. It imports only the engine (no Django).
"""

from __future__ import annotations

import gc
import json
import resource
import signal
import sys
from collections.abc import Iterable, Sized
from pathlib import Path

from n17q_engine.bundle import BundleError

from . import ConversionError, ConvertedRun, write_bundle

FORMATS = ("otlp-protobuf", "otlp-json", "inspect")
AHEAD = 1  # runs written beyond the one the importer is storing
REFUSED_EXIT = 3
# Past the soft CPU limit, SIGXCPU (a one-line refusal); this much later, the kernel's SIGKILL.
CPU_GRACE_S = 5


class CpuLimitReached(Exception):
    """Raised by the SIGXCPU handler: the process used its CPU time."""


def apply_limits(memory_mb: int | None, cpu_seconds: int | None) -> None:
    """Caps this process's address space and CPU time (never raises a limit above its hard value)."""
    if memory_mb is not None:
        _lower(resource.RLIMIT_AS, memory_mb * 1024 * 1024)
    if cpu_seconds is not None:

        def _on_xcpu(_signum: int, _frame: object) -> None:
            raise CpuLimitReached

        signal.signal(signal.SIGXCPU, _on_xcpu)
        _lower(resource.RLIMIT_CPU, cpu_seconds, hard=cpu_seconds + CPU_GRACE_S)


def _lower(which: int, soft: int, *, hard: int | None = None) -> None:
    _old_soft, old_hard = resource.getrlimit(which)
    hard = soft if hard is None else hard
    if old_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, old_hard), min(hard, old_hard)
    resource.setrlimit(which, (soft, hard))


def _options(rest: list[str]) -> dict[str, int] | None:
    """`--memory-mb N` and `--cpu-seconds N` (positive integers); None for anything else."""
    names = {"--memory-mb": "memory_mb", "--cpu-seconds": "cpu_seconds"}
    out: dict[str, int] = {}
    if len(rest) % 2:
        return None
    for flag, value in zip(rest[::2], rest[1::2], strict=True):
        if flag not in names or not value.isdigit() or int(value) < 1:
            return None
        out[names[flag]] = int(value)
    return out


def converted_runs(fmt: str, data: bytes) -> Iterable[ConvertedRun]:
    if fmt == "inspect":
        from .inspect_log import iter_inspect_log

        return iter_inspect_log(data)  # one sample at a time, its length known ahead
    from .otlp import iter_convert_otlp

    media = "application/x-protobuf" if fmt == "otlp-protobuf" else "application/json"
    return iter_convert_otlp(data, content_type=media)


def _say(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def main(argv: list[str]) -> int:
    options = _options(argv[3:])
    if len(argv) < 3 or argv[0] not in FORMATS or options is None:
        sys.stderr.write(
            f"usage: python -m n17q_engine.formats.convert_worker {{{'|'.join(FORMATS)}}} SOURCE OUTDIR"
            " [--memory-mb N] [--cpu-seconds N]\n"
        )
        return 2
    fmt, source, outdir = argv[0], Path(argv[1]), Path(argv[2])
    memory_mb = options.get("memory_mb")
    apply_limits(memory_mb, options.get("cpu_seconds"))
    try:
        return _convert(fmt, source, outdir)
    except MemoryError:
        if memory_mb is None:
            raise
        refusal = f"the conversion needs more memory than the {memory_mb} MiB it may use"
    except CpuLimitReached:
        refusal = f"the conversion used more than the {options.get('cpu_seconds')} s of CPU time it may use"
    # Out of the handler, the exception and the frames it held are gone, and what they held with them: there is
    # room to say so.
    _say({"error": refusal, "kind": "limit"})
    return REFUSED_EXIT


def _convert(fmt: str, source: Path, outdir: Path) -> int:
    # The converters build acyclic dicts by the million; with the cyclic collector on, its full passes over them
    # cost more than the work (measured: the span range walk 0.3 s alone, 0.9 s after the spans were flattened).
    # This process lives for one file.
    gc.disable()
    stored = 0  # runs the importer has said it stored
    try:
        data = source.read_bytes()
        runs = converted_runs(fmt, data)
        total = len(runs) if isinstance(runs, Sized) else None  # an OTLP file's runs come one at a time
        for i, run in enumerate(runs):
            while stored < i - AHEAD:
                if not sys.stdin.readline():
                    return 0  # the importer went away: nothing more is wanted
                stored += 1
            root = outdir / f"run-{i}"
            root.mkdir()
            write_bundle(run, root, on_disk=(data, source))
            _say(
                {
                    "folder": str(root),
                    "run_id": str(run.run.get("id", "?")),
                    "report": run.report.to_json(),
                    "total": total,
                }
            )
            del run
    except ConversionError as exc:
        _say({"error": " ".join(str(exc).splitlines()), "kind": "conversion"})
        return REFUSED_EXIT
    except BundleError as exc:
        _say({"error": str(exc), "kind": "bundle"})
        return REFUSED_EXIT
    _say({"done": True})
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
