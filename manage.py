#!/usr/bin/env python
import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "n17q_site.settings")
    from django.core.management import execute_from_command_line
    from django.db.utils import OperationalError, ProgrammingError

    try:
        from django.conf import settings

        settings.INSTALLED_APPS  # noqa: B018 - loads the settings: a missing or bad variable is one line, not a traceback
    except Exception as exc:
        from n17q_site.env import ConfigurationError

        if not isinstance(exc, ConfigurationError):
            raise
        sys.stderr.write(f"ConfigurationError: {' '.join(str(exc).split())}\n")
        sys.exit(1)
    sqlite_file = _sqlite_file()
    existed = sqlite_file is not None and sqlite_file.exists()
    try:
        execute_from_command_line(sys.argv)
    except (OperationalError, ProgrammingError) as exc:
        # Django's own commands (createsuperuser, dumpdata, changepassword…) on a database that is missing or was
        # never migrated answer with a long `no such table` traceback; N17Q's commands check first (accounts.cli).
        # Here the same one line, and the empty SQLite file the failed command just created is removed again.
        from accounts.cli import database_problem

        problem = database_problem(missing_file_ok=True)
        if problem is None:
            raise
        if sqlite_file is not None and not existed and _holds_nothing(sqlite_file):
            for leftover in (sqlite_file, *(sqlite_file.with_name(sqlite_file.name + s) for s in ("-wal", "-shm"))):
                leftover.unlink(missing_ok=True)
            problem = (
                f"there is no database at {sqlite_file} yet: run `python manage.py migrate` (or `make demo`), "
                "or point N17Q_DATA_DIR or DATABASE_URL at the database you meant"
            )
        sys.stderr.write(f"CommandError: {problem} ({exc.__class__.__name__}: {' '.join(str(exc).split())[:200]})\n")
        sys.exit(1)


def _sqlite_file():  # -> pathlib.Path | None: the configured SQLite database's file, if that is the database
    from pathlib import Path

    try:
        from django.conf import settings

        database = settings.DATABASES["default"]
    except Exception:  # settings that do not load: Django's own command line says why
        return None
    name = str(database.get("NAME") or "")
    if not database.get("ENGINE", "").endswith("sqlite3") or name == ":memory:" or "mode=memory" in name:
        return None
    return Path(name)


def _holds_nothing(path) -> bool:  # path: pathlib.Path
    """True when the SQLite file at `path` exists and holds no table, index or view: made by this failed command."""
    import sqlite3

    if not path.is_file():
        return False
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            return db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0
    except sqlite3.Error:
        return False


if __name__ == "__main__":
    main()
