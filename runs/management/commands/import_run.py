from pathlib import Path
from typing import Any

from accounts.cli import JsonCommand
from runs.import_formats import runs_import_from_path


class Command(JsonCommand):
    help = (
        "Import a run bundle (a folder, .zip or .tar.gz in n17q.run-bundle/1), an OTLP trace file (JSON or protobuf) "
        "or an Inspect AI log (.eval, .json), recognised by content. All or nothing."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("path", type=Path)
        super().add_arguments(parser)

    def run(self, *, path: Path, **options: Any) -> dict[str, Any]:
        imported = runs_import_from_path(path)
        # `title` (DESIGN §10) is a key added after the shape of §8 was fixed; those keys stay as they are. A
        # converted file adds `runs` and `conversion` (runs.import_formats).
        return {**imported.to_json(), "title": imported.first.run.title}

    def human(self, result: dict[str, Any]) -> str:
        answers = result.get("runs") or [result]
        lines = []
        if "conversion" in result:
            conversion = result["conversion"]
            lines.append(
                f"converted {conversion['format']}: {len(answers)} run(s), "
                f"{sum(conversion['mapped'].values())} mapped, {sum(conversion['unmapped'].values())} unmapped"
            )
        for answer in answers:
            lines.append(
                f"imported {answer['run']}: {answer['events']} events, "
                f"{answer.get('finding_count', len(answer['findings']))} lineage findings"
            )
            lines += [
                f"  {f['code']} {f['severity']}: {f['message']} ({f['from']} -> {f['to']})" for f in answer["findings"]
            ]
        return "\n".join(lines)
