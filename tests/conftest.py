"""Shared test set-up.

Services: with CI=true a service a test needs (PostgreSQL, Redis, Chromium) that is missing is a
failure, never a skip. On a developer machine it is a skip with the reason.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import settings as hypothesis_settings

CI = os.environ.get("CI", "").lower() == "true"

# Property tests: `make test` runs each with its own example count bounded (profile "bounded"), so CI's time does
# not grow with every property written; `make test-deep` (HYPOTHESIS_PROFILE=deep) runs every one with the count its
# author asked for, and at least 500. A test names its full count through `examples(n)` (tests/hypothesis_budget.py);
# one that names none runs 50 bounded (Hypothesis's own default is 100).
hypothesis_settings.register_profile("bounded", deadline=None, print_blob=True, max_examples=50)
hypothesis_settings.register_profile("deep", deadline=None, print_blob=True, max_examples=500)
hypothesis_settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "bounded"))

# The PostgreSQL pass runs only the tests that use the database (N17Q_TEST_DATABASE_ONLY=1, set by
# scripts/run_checks.py and `make test-postgres`): a test that never opens a connection shows the same thing on
# either database, and runs once, in the SQLite pass.
DATABASE_FIXTURES = frozenset({"_django_db_helper", "db", "transactional_db", "live_server", "django_db_setup"})


def uses_database(item: pytest.Item) -> bool:
    # A test whose rows are only the way to what it shows (registering an agent to build its environment, importing
    # a run to draw it) says the same on either database: marked `database_incidental`, it runs once too.
    if item.get_closest_marker("database_incidental") is not None:
        return False
    if item.get_closest_marker("django_db") is not None or item.get_closest_marker("postgres") is not None:
        return True
    return not DATABASE_FIXTURES.isdisjoint(getattr(item, "fixturenames", ()))


def pytest_collection_modifyitems(config, items):
    if os.environ.get("N17Q_TEST_DATABASE_ONLY") != "1":
        return
    kept = [item for item in items if uses_database(item)]
    dropped = [item for item in items if not uses_database(item)]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def xdist_worker_index() -> int:
    """0 for a run without xdist or its first worker (gw0), 1 for gw1, …: for ranges (ports) workers must split."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
    return int(name[2:]) if name.startswith("gw") and name[2:].isdigit() else 0


def need_service(name: str, available: bool, hint: str) -> None:
    if available:
        return
    if CI:
        pytest.fail(f"{name} is required in CI and is not available: {hint}", pytrace=False)
    pytest.skip(f"{name} not available: {hint}")


def pytest_report_header(config):
    from django.conf import settings

    return f"database: {settings.DATABASES['default']['ENGINE']} ({settings.DATABASES['default'].get('NAME')})"


def pytest_configure(config):
    if config.pluginmanager.hasplugin("django"):
        from django.conf import settings

        # Users made by the suite (role_user, load_demo: hundreds a pass) hash their password once, not 1.2M times.
        settings.PASSWORD_HASHERS = ["tests.password_hashing.OneIterationPBKDF2", *settings.PASSWORD_HASHERS]


def pytest_sessionstart(session):
    if os.environ.get("N17Q_TEST_POSTGRES") == "1":
        from django.conf import settings

        assert settings.DATABASES["default"]["ENGINE"].endswith("postgresql"), (
            "N17Q_TEST_POSTGRES=1 without DATABASE_URL"
        )


@pytest.fixture(autouse=True)
def _blob_store(request, tmp_path):
    """Every test gets a blob store (and a cache) of its own, so stored-nothing assertions see only that test.

    Engine tests run without Django (`-p no:django`); they get the folder and nothing else.
    """
    if not request.config.pluginmanager.hasplugin("django"):
        return tmp_path / "blobs"
    settings = request.getfixturevalue("settings")
    storages = dict(settings.STORAGES)
    storages["blobs"] = {
        "BACKEND": "django.core.files.storage.FileSystemStorage",
        "OPTIONS": {"location": tmp_path / "blobs"},
    }
    settings.STORAGES = storages
    # A cache of its own too: throttle counts of one test must not reach the next (and a test never clears a
    # shared Redis database, which would be a FLUSHDB).
    settings.CACHES = {
        "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache", "LOCATION": str(tmp_path)}
    }
    return tmp_path / "blobs"


@pytest.fixture
def role_user(db, django_user_model):
    from django.contrib.auth.models import Group

    def make(role: str, username: str | None = None):
        user = django_user_model.objects.create_user(username or f"{role}-user", password="a-long-test-password")
        if role == "admin":
            user.is_superuser = user.is_staff = True
            user.save()
        user.groups.add(Group.objects.get(name=role))
        return user

    return make


# The connections the suite's captures come through, reviewed as record mode requires (docs/record-policy.md): each
# proposed by one person and approved by another through `fixtures_review.connections`. Reads come through live
# connections; the ones that record mutations reach a sandbox (a live mutation is always refused).
REVIEWED_CONNECTIONS: dict[str, dict] = {
    **{
        name: {"reaches": "live", "capabilities": ["read"]}
        for name in ("status-service", "docs-api", "docs-prod", "status", "docs.example", "status.example")
    },
    **{
        name: {"reaches": "sandbox", "capabilities": ["read", "mutation"]}
        for name in ("sim:review-requests", "prod-api", "x", "authored", "api.example", "mail-sandbox")
    },
}


def approve_connection(name: str, *, proposer, approver, **policy):
    """Register `name` and have it approved, through the services (the rules a person in the admin goes through)."""
    from fixtures_review.connections import connection_approve, connection_propose

    fields = {
        "reaches": "live",
        "source_classes": ["api"],
        "capabilities": ["read"],
        "account_scopes": ["test-account"],
        "capture_result_classes": ["public", "internal"],
        "default_result_class": "internal",
        **policy,
    }
    connection = connection_propose(name=name, user=proposer, **fields)
    return connection_approve(connection=connection, user=approver)


@pytest.fixture
def reviewed_connections(db, django_user_model):
    """Every connection of REVIEWED_CONNECTIONS, approved: {name: Connection}."""
    from django.contrib.auth.models import Group

    people = []
    for username in ("connection-proposer", "connection-approver"):
        user = django_user_model.objects.create_user(username, password="a-long-test-password")
        user.groups.add(Group.objects.get(name="reviewer"))
        people.append(user)
    return {
        name: approve_connection(name, proposer=people[0], approver=people[1], **policy)
        for name, policy in REVIEWED_CONNECTIONS.items()
    }


def approve_test_connection(name: str, **policy):
    """One more connection, approved by the two people `reviewed_connections` made (use after that fixture)."""
    from django.contrib.auth import get_user_model

    users = get_user_model().objects
    return approve_connection(
        name,
        proposer=users.get(username="connection-proposer"),
        approver=users.get(username="connection-approver"),
        **policy,
    )
