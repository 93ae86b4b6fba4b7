"""`manage.py capture PATH --json`: stage a capture (`n17q.capture/1`) after redaction and secret scanning.

Prints `{"staged", "redactions": [{"path", "rule"}], "findings": [{"rule", "path", "preview"}], "promotable"}`
(DESIGN §8). A capture that breaks the format is refused with one line naming the field; nothing is stored.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from fixtures_review.intake import CaptureError
from fixtures_review.services import capture_stage

MAX_CAPTURE_BYTES = 64 * 1024 * 1024


class Command(JsonCommand):
    help = "Stage a captured tool response for review: redacted and secret-scanned before anything is stored."

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument("path", help="a capture file (n17q.capture/1 JSON), or - for standard input")
        parser.add_argument("--user", help="the capturer (who may then not approve it); default: nobody")

    def run(self, **options: Any) -> dict[str, Any]:
        path = options["path"]
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
        if len(raw) > MAX_CAPTURE_BYTES:
            raise CommandError(f"{path}: larger than {MAX_CAPTURE_BYTES} bytes")
        user = None
        if options.get("user"):
            user = get_user_model().objects.filter(username=options["user"]).first()
            if user is None:
                raise CommandError(f"no user {options['user']!r}")
        try:
            result = capture_stage(raw=raw, user=user)
        except CaptureError as exc:
            raise CommandError(f"{path}: {exc}") from None
        return result.to_json()

    def human(self, result: dict[str, Any]) -> str:
        lines = [f"Staged {result['staged']} ({result['scenario']} {result['tool']})"]
        lines += [f"  redacted {r['path']} ({r['rule']})" for r in result["redactions"]]
        lines += [f"  finding {f['rule']} at {f['path']}: {f['preview']} (masked)" for f in result["findings"]]
        lines.append(
            "  promotable" if result["promotable"] else "  not promotable yet: " + "; ".join(result["blockers"])
        )
        return "\n".join(lines)
