from pathlib import Path
from typing import Any

from accounts.cli import JsonCommand
from runs.importer import run_import_from_path


class Command(JsonCommand):
    help = "Import a run bundle (a folder, .zip or .tar.gz in n17q.run-bundle/1). All or nothing."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("path", type=Path)
        super().add_arguments(parser)

    def run(self, *, path: Path, **options: Any) -> dict[str, Any]:
        result = run_import_from_path(path)
        # `title` (DESIGN §10) is a key added after the shape of §8 was fixed; those keys stay as they are.
        return {**result.to_json(), "title": result.run.title}

    def human(self, result: dict[str, Any]) -> str:
        lines = [f"imported {result['run']}: {result['events']} events, {len(result['findings'])} lineage findings"]
        lines += [
            f"  {f['code']} {f['severity']}: {f['message']} ({f['from']} -> {f['to']})" for f in result["findings"]
        ]
        return "\n".join(lines)
