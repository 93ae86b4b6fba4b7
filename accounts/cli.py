"""A base for N17Q's commands: `--json` prints one JSON object on stdout; an error is one line on stderr.

Errors become CommandError, which Django prints as a single `CommandError: …` line with exit status 1
(and raises to the caller under call_command, which the tests use).
"""

from __future__ import annotations

import getpass
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import DEFAULT_DB_ALIAS, connections

from n17q_engine.bundle import BundleError

from .audit import audit_via


def _os_user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry and no LOGNAME/USER: a container's arbitrary uid
        return "unknown"


def database_problem(*, missing_file_ok: bool = False) -> str | None:
    """What is wrong with the configured database for a command that reads it, in one line, or None.

    A missing SQLite file is found before anything connects (connecting would create it, leaving an empty database
    where the user expected the demo's); `missing_file_ok` skips that check for a caller that has already made it.
    """
    connection = connections[DEFAULT_DB_ALIAS]
    where = connection.settings_dict["NAME"]
    if connection.vendor == "sqlite":
        where = str(where)
        in_memory = where == ":memory:" or "mode=memory" in where
        if not missing_file_ok and not in_memory and not Path(where).is_file():
            return (
                f"there is no database at {where} yet: run `python manage.py migrate` (or `make demo`), "
                "or point N17Q_DATA_DIR or DATABASE_URL at the database you meant"
            )
    if "django_migrations" not in connection.introspection.table_names():
        return f"the database at {where} has no tables yet: run `python manage.py migrate` (or `make demo`)"
    return None


def database_ready() -> None:
    """Refuse, in one line, to work on a database that has no tables: the user meant another one, or has not migrated.

    Without this a command answered with a long `no such table` traceback, and SQLite first created the missing
    file, leaving an empty database where the user expected the demo's. Django's own commands get the same line
    from manage.py (`main`), which catches their database errors.
    """
    problem = database_problem()
    if problem is not None:
        raise CommandError(problem)


class JsonCommand(BaseCommand):
    # The JSON commands are what other programs call (DESIGN §8): they answer without running the system checks of
    # every template library and URL first (a third of their start); `manage.py check`, `migrate` and the servers do.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")

    @staticmethod
    def named_user(username: str | None) -> Any:
        """The user a `--user NAME` option names (None when not given); one line when there is no such user."""
        if not username:
            return None
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        return user

    def handle(self, *args: Any, **options: Any) -> None:
        database_ready()
        try:
            with audit_via(f"cli {_os_user()}"):
                result = self.run(**options)
        except CommandError:
            raise
        except BundleError as exc:
            raise CommandError(" ".join(str(exc).splitlines())) from None
        if options.get("json"):
            self.stdout.write(json.dumps(result, ensure_ascii=False))
        else:
            self.stdout.write(self.human(result))

    # Each command's own work: its parsed options in (keyword-only, named as the command declares them), the
    # JSON answer out. Declared as a callable rather than a method so each command names its own options.
    run: Callable[..., dict[str, Any]]

    def human(self, result: dict[str, Any]) -> str:
        return json.dumps(result, indent=2, ensure_ascii=False)
