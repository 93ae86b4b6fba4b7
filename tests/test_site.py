"""Settings helpers and the Celery app's embedded broker."""

from __future__ import annotations

import pytest

from n17q_site import env


def test_it_reads_typed_values(monkeypatch):
    monkeypatch.setenv("N17Q_X_BOOL", "off")
    monkeypatch.setenv("N17Q_X_INT", "42")
    monkeypatch.setenv("N17Q_X_LIST", "a, b,,c")
    assert env.env_bool("N17Q_X_BOOL", True) is False
    assert env.env_int("N17Q_X_INT", 1, minimum=1) == 42
    assert env.env_list("N17Q_X_LIST", []) == ["a", "b", "c"]
    assert env.env_str("N17Q_X_UNSET", "fallback") == "fallback"


@pytest.mark.parametrize(
    ("name", "value", "call", "message"),
    [
        ("N17Q_X_BOOL", "maybe", lambda: env.env_bool("N17Q_X_BOOL", True), "N17Q_X_BOOL='maybe' is not a boolean"),
        ("N17Q_X_INT", "ten", lambda: env.env_int("N17Q_X_INT", 1), "N17Q_X_INT='ten' is not an integer"),
        ("N17Q_X_INT", "0", lambda: env.env_int("N17Q_X_INT", 1, minimum=1), "N17Q_X_INT=0 is below the minimum 1"),
    ],
)
def test_it_fails_loudly_on_a_value_it_cannot_use(monkeypatch, name, value, call, message):
    monkeypatch.setenv(name, value)
    with pytest.raises(env.ConfigurationError, match=message):
        call()


def test_it_fails_loudly_on_a_missing_required_value(monkeypatch):
    monkeypatch.delenv("N17Q_X_REQUIRED", raising=False)
    with pytest.raises(env.ConfigurationError, match="N17Q_X_REQUIRED is required"):
        env.env_str("N17Q_X_REQUIRED")


def test_it_makes_the_file_broker_folders_a_worker_polls(tmp_path):
    from n17q_site.celery import app, ensure_file_broker_folders

    previous = (app.conf.broker_url, app.conf.broker_transport_options)
    names = ("data_folder_in", "data_folder_out", "processed_folder", "control_folder")
    folders = {k: str(tmp_path / k) for k in names}
    try:
        app.conf.broker_url, app.conf.broker_transport_options = "filesystem://", folders
        ensure_file_broker_folders()
    finally:
        app.conf.broker_url, app.conf.broker_transport_options = previous
    assert all((tmp_path / k).is_dir() for k in folders)
