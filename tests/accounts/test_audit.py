"""The audit log: sign-ins (and refused ones), operator actions, tokens; append-only; read-only for admins."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.urls import reverse

from accounts.audit import audit_record, audit_via
from accounts.models import AuditEntry, HarnessToken
from console.append_only import HistoryIsAppendOnly
from runs.importer import run_import_from_path
from tests import bundles

pytestmark = pytest.mark.django_db
PASSWORD = "a-long-test-password"


def entries(action: str) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action).order_by("id"))


def example_zip(tmp_path) -> io.BytesIO:
    folder = bundles.write_folder(tmp_path / "b", *bundles.example_parts())
    upload = io.BytesIO(bundles.zip_folder(folder, tmp_path / "b.zip").read_bytes())
    upload.name = "bundle.zip"
    return upload


def test_it_records_a_sign_in_and_a_refused_one(client, role_user):
    role_user("viewer", "vera")
    refused = client.post(reverse("login"), {"username": "vera", "password": "wrong-password"})
    assert refused.status_code == 200  # the form again, with its error
    client.post(reverse("login"), {"username": "vera", "password": PASSWORD})

    (failure,) = entries("auth.sign_in_refused")
    assert (failure.actor, failure.target, failure.via, failure.ip) == ("", "vera", "web", "127.0.0.1")
    (success,) = entries("auth.sign_in")
    assert (success.actor, success.target, success.via, success.ip) == ("vera", "vera", "web", "127.0.0.1")
    stored = json.dumps([e.detail for e in AuditEntry.objects.all()])
    assert "wrong-password" not in stored and PASSWORD not in stored


def test_it_records_a_sign_out(client, role_user):
    client.force_login(role_user("viewer", "vera"))
    client.post(reverse("logout"))
    assert [e.actor for e in entries("auth.sign_out")] == ["vera"]


def test_it_records_an_import_by_a_harness_token_naming_the_token(client, role_user, tmp_path):
    key = HarnessToken.new_key()
    HarnessToken.objects.create(
        name="ci",
        user=role_user("operator", "harness"),
        key_digest=HarnessToken.digest_key(key),
        prefix=key[:9],
        scopes=["runs:import"],
    )
    response = client.post(reverse("api-runs"), {"bundle": example_zip(tmp_path)}, HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 201
    (entry,) = entries("run.import")
    assert (entry.actor, entry.via, entry.target) == ("harness", f"token {key[:9]}", "run-example-docs")
    assert entry.detail["events"] == 9 and entry.detail["bundle_digest"].startswith("sha256:")
    assert key not in json.dumps(entry.detail) and key not in entry.via


def test_it_records_an_import_from_the_page_and_a_refused_one(client, role_user, tmp_path):
    client.force_login(role_user("operator", "olga"))
    bad = io.BytesIO(b"not an archive")
    bad.name = "junk.zip"
    assert client.post(reverse("runs:run-import"), {"bundle": bad}).status_code == 400
    assert client.post(reverse("runs:run-import"), {"bundle": example_zip(tmp_path)}).status_code == 302

    (refusal,) = entries("run.import_refused")
    assert (refusal.actor, refusal.via, refusal.target) == ("olga", "web", "upload junk.zip")
    assert "not a bundle archive" in refusal.detail["error"]
    (imported,) = entries("run.import")
    assert (imported.actor, imported.via) == ("olga", "web")


def test_it_records_an_import_from_the_command_line(capsys):
    call_command("import_run", str(bundles.EXAMPLE), "--json")
    (entry,) = entries("run.import")
    assert entry.actor == "" and entry.via.startswith("cli ")


def test_it_records_a_replay_launched_from_the_command_line(capsys):
    run_import_from_path(bundles.EXAMPLE)
    with pytest.raises(CommandError, match="not a declared variable"):
        call_command("replay", "run-example-docs", "--mode", "counterfactual", "--vary", "x=y", "--inline")
    assert entries("replay.create") == []  # refused before anything was created: nothing to account for

    call_command("replay", "run-example-docs", "--mode", "reconstruction", "--inline", "--json")
    replay = json.loads(capsys.readouterr().out)["replay"]
    (entry,) = entries("replay.create")
    assert entry.via.startswith("cli ") and entry.target == f"replay {replay} of run-example-docs"
    assert entry.detail == {
        "replay": replay,
        "run": "run-example-docs",
        "mode": "reconstruction",
        "vary": {},
        "scenario": None,
        "checkpoint": "start",
    }
    # The worker's import of the replay's run is recorded as the worker's (here: run in this process).
    assert [e.target for e in entries("run.import")][-1].startswith("run-example-docs~reconstruction-")


def test_it_names_how_an_action_arrived_outside_a_request():
    with audit_via("worker"):
        audit_record(actor=None, action="replay.recover", target="replay 1")
    audit_record(actor=None, action="replay.recover", target="replay 2")
    assert [e.via for e in entries("replay.recover")] == ["worker", "system"]


def test_it_records_a_token_issued_and_revoked(client, role_user, capsys):
    role_user("operator", "harness")
    call_command("issue_token", "harness", "--name", "ci", "--scope", "runs:import", "--json")
    key = json.loads(capsys.readouterr().out)["token"]
    (issued,) = entries("token.issue")
    assert issued.via.startswith("cli ") and issued.detail["owner"] == "harness"
    assert issued.detail["scopes"] == ["runs:import"] and key not in json.dumps(issued.detail)

    client.force_login(role_user("admin", "ada"))
    token = HarnessToken.objects.get()
    client.post("/admin/accounts/harnesstoken/", {"action": "revoke", "_selected_action": [token.pk]})
    (revoked,) = entries("token.revoke")
    assert (revoked.actor, revoked.via, revoked.detail["token"]) == ("ada", "web", token.pk)
    # Revoking again changes nothing and records nothing.
    client.post("/admin/accounts/harnesstoken/", {"action": "revoke", "_selected_action": [token.pk]})
    assert len(entries("token.revoke")) == 1


def test_it_keeps_who_acted_after_the_account_is_gone(role_user):
    user = role_user("operator", "gone")
    audit_record(actor=user, action="run.import", target="r")
    user.delete()
    entry = AuditEntry.objects.get(action="run.import")
    assert entry.actor == "gone" and entry.actor_user_id is not None


def test_it_refuses_to_change_or_delete_an_audit_entry():
    audit_record(actor=None, action="auth.sign_in_refused", target="mallory")
    entry = AuditEntry.objects.get()
    entry.target = "someone else"
    with pytest.raises(HistoryIsAppendOnly):
        entry.save()
    with pytest.raises(HistoryIsAppendOnly):
        entry.delete()
    with pytest.raises(HistoryIsAppendOnly):
        AuditEntry.objects.update(target="x")
    with pytest.raises(HistoryIsAppendOnly):
        AuditEntry.objects.all().delete()
    assert AuditEntry.objects.get().target == "mallory"


def test_it_refuses_raw_sql_changes_to_the_audit_log_on_postgresql():
    if connection.vendor != "postgresql":
        pytest.skip("the database trigger is PostgreSQL's; SQLite keeps the model-level guard")
    audit_record(actor=None, action="auth.sign_in_refused", target="mallory")
    for statement in ("UPDATE runs_auditentry SET target = 'x'", "DELETE FROM runs_auditentry"):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cur:
            cur.execute(statement)
    assert AuditEntry.objects.get().target == "mallory"


def test_it_shows_the_audit_log_read_only_to_admins_only(client, role_user):
    audit_record(actor=None, action="auth.sign_in_refused", target="mallory")
    entry = AuditEntry.objects.get()
    client.force_login(role_user("admin", "ada"))
    listing = client.get("/admin/accounts/auditentry/")
    assert listing.status_code == 200 and b"mallory" in listing.content and b"auth.sign_in_refused" in listing.content
    assert client.get(f"/admin/accounts/auditentry/{entry.pk}/change/").status_code == 200  # a view, not a form
    assert client.post(f"/admin/accounts/auditentry/{entry.pk}/change/", {"target": "x"}).status_code == 403
    assert client.get("/admin/accounts/auditentry/add/").status_code == 403
    assert client.post(f"/admin/accounts/auditentry/{entry.pk}/delete/").status_code == 403
    assert b'href="/admin/accounts/auditentry/"' in client.get("/").content  # reachable from the console's menu
    client.force_login(role_user("operator", "olga"))
    assert client.get("/admin/accounts/auditentry/").status_code == 302  # not staff: sent to the admin's login
    assert b"/admin/accounts/auditentry/" not in client.get("/").content


def test_a_launch_from_its_button_is_one_entry_with_the_operator_and_address(client, role_user, capsys, monkeypatch):
    from replays import services as replays

    monkeypatch.setattr(replays, "replay_enqueue", lambda pk: True)  # no broker needed to launch
    call_command("load_demo", "--json")
    capsys.readouterr()
    client.force_login(role_user("operator", "olga"))
    page = client.get("/runs/run-001-recorded/launch/replay/").content.decode()
    digest = re.search(r'name="summary_digest" value="([^"]+)"', page).group(1)  # the summary the operator saw
    response = client.post("/runs/run-001-recorded/launch/replay/", {"summary_digest": digest})
    assert response.status_code == 302
    launches = [e for e in AuditEntry.objects.order_by("id") if e.action.startswith("replay.")]
    assert [(e.action, e.actor, e.via, e.ip) for e in launches] == [("replay.create", "olga", "web", "127.0.0.1")]
    assert launches[0].detail["mode"] == "rerun" and launches[0].detail["scenario"] == "email-delivery@1"


def test_it_records_the_demo_load_and_a_scenario_package_imported_from_the_command_line(tmp_path, capsys):
    from n17q_demo import seed_scenarios

    package = seed_scenarios.seed_packages()[0]
    folder = package.write_dir(tmp_path / "seed")
    call_command("import_package", str(folder), "--json")
    call_command("import_package", str(folder), "--json")  # held already: nothing new, nothing recorded
    (imported,) = entries("scenario.import")
    ref = package.manifest["scenario"]
    assert imported.target == f"scenario:{ref['name']}@{ref['version']}" and imported.via.startswith("cli ")
    call_command("load_demo", "--json")
    (demo,) = entries("demo.load")
    assert sorted(demo.detail["passwords_reset_for"]) == ["admin", "operator", "reviewer", "viewer"]


def test_it_records_changes_made_in_the_django_admin(client, role_user):
    client.force_login(role_user("admin", "ada"))
    response = client.post("/admin/auth/group/add/", {"name": "auditors"})
    assert response.status_code == 302
    (added,) = entries("admin.add")
    assert (added.actor, added.via, added.target) == ("ada", "web", "auth.group:auditors")
