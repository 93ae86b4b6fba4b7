"""`manage.py capture PATH --json`: stage a capture (`n17q.capture/1`), or every exchange of a HAR file or VCR.py
cassette, after redaction and secret scanning.

Prints `{"staged", "redactions": [{"path", "rule"}], "findings": [{"rule", "path", "preview"}], "promotable"}`
(DESIGN §8). For a recording file (recognised by content) those keys are the first staged exchange's, and
`format`, `recordings` (one capture answer per staged exchange, with `entry`, `method`, `url`, `rule`) and `skipped`
(`entry`, `method`, `url`, `reason`) are added: docs/formats/recordings.md. What an HTTP exchange cannot say comes
from `--scenario`, `--tool`, `--contract-revision`, `--effect-class` (and optionally `--connection`,
`--world-revision`, `--source-revision`), or per exchange from `--mapping FILE`.

Bad input is refused with one line naming the field (and the flag that gives it); nothing is stored.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from fixtures_review import recordings
from fixtures_review.intake import CaptureError
from fixtures_review.services import capture_receive, recordings_stage

MAX_CAPTURE_BYTES = 64 * 1024 * 1024


class Command(JsonCommand):
    help = (
        "Stage a captured tool response for review (an n17q.capture/1 file, or each exchange of a HAR file or VCR "
        "cassette): redacted and secret-scanned before anything is stored."
    )

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument(
            "path", help="a capture (n17q.capture/1 JSON), a HAR file or a VCR.py cassette; - for standard input"
        )
        parser.add_argument("--user", help="the capturer (who may then not approve it); default: nobody")
        group = parser.add_argument_group("recording files (HAR, VCR): what an HTTP exchange does not say")
        group.add_argument("--scenario", help="the scenario the exchanges were recorded in")
        group.add_argument("--tool", help="the tool each exchange answers")
        group.add_argument("--contract-revision", help="the tool contract's revision (a positive integer)")
        group.add_argument("--effect-class", help="read or mutation")
        group.add_argument("--connection", help="the connection's name (default: the URL's host)")
        group.add_argument("--world-revision", help="the world revision recorded against (default 0)")
        group.add_argument("--source-revision", help="the source revision of the service recorded")
        group.add_argument(
            "--source-class", help="the source class recorded (record policy; default: the connection's)"
        )
        group.add_argument("--account-scope", help="the one account recorded under (default: the connection's)")
        group.add_argument("--result-class", help="the results' class (default: the connection's default)")
        group.add_argument(
            "--mapping", help="a YAML or JSON file of rules mapping method and URL to tool, contract, effect class"
        )

    def run(self, **options: Any) -> dict[str, Any]:
        path = options["path"]
        captured_at = None
        if path == "-":
            import sys

            raw = sys.stdin.buffer.read(MAX_CAPTURE_BYTES + 1)
        else:
            file = Path(path)
            if not file.is_file():
                raise CommandError(f"{path}: no such file")
            if file.stat().st_size > MAX_CAPTURE_BYTES:
                raise CommandError(f"{path}: larger than {MAX_CAPTURE_BYTES} bytes")
            raw = file.read_bytes()
            # A cassette keeps no time per interaction: when the file was written is when it was recorded.
            captured_at = datetime.fromtimestamp(file.stat().st_mtime, UTC).isoformat().replace("+00:00", "Z")
        if len(raw) > MAX_CAPTURE_BYTES:
            raise CommandError(f"{path}: larger than {MAX_CAPTURE_BYTES} bytes")
        user = self.named_user(options.get("user"))
        fields = {name: options.get(name) for name in recordings.FLAGS}
        given = sorted(recordings.FLAGS[name] for name, value in fields.items() if value is not None)
        mapping = None
        if options.get("mapping"):
            given.append("--mapping")
            mapping_file = Path(options["mapping"])
            if not mapping_file.is_file():
                raise CommandError(f"{mapping_file}: no such mapping file")
            if mapping_file.stat().st_size > recordings.MAX_MAPPING_BYTES:
                raise CommandError(f"{mapping_file}: larger than {recordings.MAX_MAPPING_BYTES} bytes")
            try:  # read when given: a rule RE2 cannot run is refused before the recording is looked at
                mapping = recordings.parse_mapping(mapping_file.read_bytes())
            except CaptureError as exc:
                raise CommandError(f"{mapping_file}: {exc}") from None
        try:
            source = recordings.load(raw)
            if source is None:
                if given:
                    raise CommandError(
                        f"{path}: not a HAR file or a VCR cassette, and {', '.join(given)} apply only to those (a "
                        "capture names its own scenario, tool and contract)"
                    )
                return capture_receive(raw=raw, user=user).to_json()
            result = recordings_stage(source=source, fields=fields, mapping=mapping, captured_at=captured_at, user=user)
        except CaptureError as exc:
            raise CommandError(f"{path}: {exc}") from None
        return result.to_json()

    def human(self, result: dict[str, Any]) -> str:
        lines = []
        if result.get("observation"):
            return f"Nothing staged: {result['note']} (request observation {result['observation']})"
        for one in result.get("recordings") or [result]:
            where = f" entry {one['entry']} {one['method']} {one['url']}" if "entry" in one else ""
            lines.append(f"Staged {one['staged']} ({one['scenario']} {one['tool']}){where}")
            lines += [f"  redacted {r['path']} ({r['rule']})" for r in one["redactions"]]
            lines += [f"  finding {f['rule']} at {f['path']}: {f['preview']} (masked)" for f in one["findings"]]
            lines.append("  promotable" if one["promotable"] else "  not promotable yet: " + "; ".join(one["blockers"]))
        lines += [
            f"Skipped entry {s['entry']} {s['method']} {s['url']}: {s['reason']}" for s in result.get("skipped", [])
        ]
        return "\n".join(lines)
