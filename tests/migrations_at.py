"""The test database moved to a point of its migrations and back: for the tests of data migrations, which build rows
as an older schema held them and run the migration over them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.migrations.executor import MigrationExecutor


def migrate_to(targets: Sequence[tuple[str, str | None]] | None = None) -> None:
    """Migrate to `targets` ((app, migration name or None for before its first)); with none, to the latest."""
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(list(targets) if targets else executor.loader.graph.leaf_nodes())


def apps_at(targets: Sequence[tuple[str, str | None]]) -> Any:
    """The models as the schema at `targets` held them (for rows written as an older version wrote them)."""
    # The stubs say (app, name); Django takes (app, None) too: the app before its first migration.
    return MigrationExecutor(connection).loader.project_state(list(targets)).apps  # type: ignore[arg-type]
