"""`python manage.py export_run RUN OUT.zip [--format bundle|otlp-json] [--json]`: a stored run written as a `.zip`
run bundle, or (`--format otlp-json`, OUT.json) as one OTLP/JSON trace (docs/formats/otlp.md "Export").

The bundle (runs/bundle_export.py) holds the run as the console stores it: its events in seq order, its blobs'
bytes, masked where the secret scan masked them, a blob whose bytes retention removed listed with its deletion record
and no bytes, and an `exported` key saying so (for a replay, with its scope note). OUT must not exist: an export
never overwrites a file. The export is audited (`run.exported`, with its format).
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from accounts.audit import audit_record
from runs.bundle_export import EXPORT_FORMATS, BundleExportError
from runs.cli import stored_run


class Command(BaseCommand):
    help = "Write a stored run as a .zip run bundle, or as an OTLP/JSON trace (--format otlp-json)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("run", help="the run's id")
        parser.add_argument("out", help="the file to write (must not exist): OUT.zip, or OUT.json for otlp-json")
        parser.add_argument(
            "--format",
            choices=sorted(EXPORT_FORMATS),
            default="bundle",
            help="bundle (a .zip run bundle, the default) or otlp-json (one OTLP/JSON ExportTraceServiceRequest)",
        )
        parser.add_argument("--json", action="store_true", help="answer with a JSON object")

    def handle(self, *args: Any, **options: Any) -> None:
        run_id, out = options["run"], Path(options["out"])
        run = stored_run(run_id)
        fmt = options["format"]
        if fmt == "bundle" and out.suffix.lower() != ".zip":
            raise CommandError(f"{out}: the bundle is written as a .zip file; name it OUT.zip")
        if fmt == "otlp-json" and out.suffix.lower() != ".json":
            raise CommandError(f"{out}: the OTLP export is written as a .json file; name it OUT.json")
        write = EXPORT_FORMATS[fmt][0]
        if out.exists() or out.is_symlink():
            raise CommandError(f"{out} exists: an export never overwrites a file")
        if not out.parent.is_dir():
            raise CommandError(f"{out.parent} is not a folder")
        # Written beside OUT, then renamed: a failed export leaves no half-written bundle under OUT's name.
        fd, partial = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".partial", dir=out.parent)
        try:
            with os.fdopen(fd, "wb") as fh:
                answer = write(run, fh, by="export_run")
            try:
                os.link(partial, out)  # never over a file that appeared meanwhile (a rename would replace it)
            except FileExistsError:
                raise CommandError(f"{out} appeared while the bundle was written: it was left as it is") from None
        except BundleExportError as exc:
            raise CommandError(str(exc)) from None
        finally:
            if os.path.exists(partial):
                os.unlink(partial)
        audit_record(
            actor=None, action="run.exported", target=run.run_id, detail={"by": "export_run", "format": fmt, **answer}
        )
        answer["path"] = str(out)
        if fmt != "bundle":
            answer["format"] = fmt  # the bundle's answer stays as it was; the OTLP one says its format
        if options["json"]:
            self.stdout.write(json.dumps(answer))
        else:
            self.stdout.write(
                f"exported {run.run_id} to {out}: {answer['events']} events, "
                + (f"{answer['spans']} spans" if fmt == "otlp-json" else f"{answer['blobs']} blobs")
                + (f", {len(answer['expired'])} listed as expired" if answer["expired"] else "")
            )
