"""Shared test set-up.

Services: with CI=true a service a test needs (PostgreSQL, Redis, Chromium) that is missing is a
failure, never a skip. On a developer machine it is a skip with the reason.
"""

from __future__ import annotations

import os

import pytest

CI = os.environ.get("CI", "").lower() == "true"


def need_service(name: str, available: bool, hint: str) -> None:
    if available:
        return
    if CI:
        pytest.fail(f"{name} is required in CI and is not available: {hint}", pytrace=False)
    pytest.skip(f"{name} not available: {hint}")


def pytest_report_header(config):
    from django.conf import settings

    return f"database: {settings.DATABASES['default']['ENGINE']} ({settings.DATABASES['default'].get('NAME')})"


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
