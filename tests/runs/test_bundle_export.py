"""A run exported as a run bundle (issue 38, point 5): `manage.py export_run`, the run page's link and
`GET /api/v1/runs/<id>/bundle/` write the run as the console stores it (runs/bundle_export.py), the same reading a
replay's package is built from. The bundle imports again as the same run; what the console masked stays masked, an
expired blob is listed with its deletion record, and a replay's scope note travels in the manifest (seed 000:
"Exported traces and comparison views carried the same information")."""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from accounts.models import AuditEntry, HarnessToken
from runs.importer import run_import_from_path
from runs.models import Event, Finding, Run
from tests import bundles
from tests.runs.test_api import token_for

pytestmark = pytest.mark.django_db

EXAMPLE = Path(__file__).resolve().parents[1] / "data" / "example-bundle"


def export(run_id: str, out: Path) -> dict:
    answer = io.StringIO()
    call_command("export_run", run_id, str(out), "--json", stdout=answer)
    return json.loads(answer.getvalue())


def members(data: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


def renamed(data: bytes, run_id: str, out: Path) -> Path:
    """The exported bundle as a folder, its run given another id (the console holds the first)."""
    files = members(data)
    manifest = json.loads(files["manifest.json"])
    manifest["run"]["id"] = run_id
    folder = out / run_id
    for name, content in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(json.dumps(manifest).encode() if name == "manifest.json" else content)
    return folder


def test_an_exported_run_is_its_bundle_again_and_imports_as_the_same_run(tmp_path):
    original = run_import_from_path(EXAMPLE).run
    answer = export(original.run_id, tmp_path / "out.zip")
    files = members((tmp_path / "out.zip").read_bytes())
    source = json.loads((EXAMPLE / "manifest.json").read_text())

    manifest = json.loads(files["manifest.json"])
    assert manifest["format"] == "n17q.run-bundle/1" and manifest["run"] == source["run"]
    assert manifest["blobs"] == source["blobs"]
    events = [json.loads(line) for line in files["events.jsonl"].splitlines()]
    assert events == [json.loads(line) for line in (EXAMPLE / "events.jsonl").read_text().splitlines()]
    for digest in source["blobs"]:
        name = f"blobs/sha256/{digest.removeprefix('sha256:')}"
        assert files[name] == (EXAMPLE / name).read_bytes()
    assert set(files) == {"manifest.json", "events.jsonl", *(f"blobs/sha256/{d[7:]}" for d in source["blobs"])}
    assert answer == {
        "run": original.run_id,
        "events": len(events),
        "blobs": len(source["blobs"]),
        "expired": [],
        "masked_on_import": 0,
        "path": str(tmp_path / "out.zip"),
    }
    note = manifest["exported"]
    assert note["from"] == "N17Q" and note["run"] == original.run_id and note["scope_note"] is None
    # Imported again (under another id: the console holds the first), it is the same run: events, findings.
    again = run_import_from_path(renamed(files_zip(files), "run-example-again", tmp_path)).run
    assert list(Event.objects.filter(run=again).order_by("seq").values_list("body", flat=True)) == [
        {**body} for body in Event.objects.filter(run=original).order_by("seq").values_list("body", flat=True)
    ]
    codes = sorted(Finding.objects.filter(run=again).values_list("code", "from_ref", "to_ref"))
    assert codes == sorted(Finding.objects.filter(run=original).values_list("code", "from_ref", "to_ref"))
    # The same run exports to the same bytes, whenever (but for the moment it says it was exported).
    second = members(export_bytes(original.run_id, tmp_path / "second.zip"))
    first_manifest = {**manifest, "exported": {**manifest["exported"], "at": ""}}
    second_manifest = json.loads(second.pop("manifest.json"))
    assert {**second_manifest, "exported": {**second_manifest["exported"], "at": ""}} == first_manifest
    assert second == {k: v for k, v in files.items() if k != "manifest.json"}
    assert AuditEntry.objects.filter(action="run.exported", target=original.run_id).count() == 2


def files_zip(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return out.getvalue()


def export_bytes(run_id: str, out: Path) -> bytes:
    export(run_id, out)
    return out.read_bytes()


def test_the_demo_runs_export_what_retention_removed_and_a_replays_scope_note(tmp_path, capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()
    recorded = members(export_bytes("run-001-recorded", tmp_path / "001.zip"))
    manifest = json.loads(recorded["manifest.json"])
    expired = [d for d, meta in manifest["blobs"].items() if "expired" in meta]
    assert len(expired) == 1 and manifest["exported"]["expired_blobs"] == expired
    assert manifest["blobs"][expired[0]]["expired"]["class"] == "sensitive"
    assert f"blobs/sha256/{expired[0][7:]}" not in recorded  # listed, its bytes gone
    assert "an importer other than this console refuses them" in manifest["exported"]["expired_note"]
    # This console holds the deletion record: the bundle imports here, the blob still expired for the new run.
    again = run_import_from_path(renamed(files_zip(recorded), "run-001-again", tmp_path)).run
    assert again.events.count() == Run.objects.get(run_id="run-001-recorded").events.count()

    replay = json.loads(members(export_bytes("run-000-fail-open-replay", tmp_path / "000.zip"))["manifest.json"])
    scope = Event.objects.get(run__run_id="run-000-fail-open-replay", kind="replay.scope").body
    assert replay["exported"]["scope_note"] == {
        k: scope[k]
        for k in ("scenario", "scope", "recorded_between", "synthetic", "uncovered", "isolation")
        if k in scope
    }
    assert replay["exported"]["scope_note"]["scenario"] == scope["scenario"]


def test_export_run_refuses_bad_input_in_one_line_and_writes_nothing(tmp_path):
    run_import_from_path(EXAMPLE)
    taken = tmp_path / "taken.zip"
    taken.write_bytes(b"keep me")
    for args, said in (
        (["no-such-run", str(tmp_path / "a.zip")], "no run with id 'no-such-run'"),
        (["bad id", str(tmp_path / "a.zip")], "is not a run id"),
        (["run-example-docs", str(tmp_path / "a.tar")], "name it OUT.zip"),
        (["run-example-docs", str(taken)], "exists: an export never overwrites a file"),
        (["run-example-docs", str(tmp_path / "nowhere" / "a.zip")], "is not a folder"),
    ):
        with pytest.raises(CommandError, match=said) as caught:
            call_command("export_run", *args)
        assert "\n" not in str(caught.value)
    assert taken.read_bytes() == b"keep me"
    assert sorted(p.name for p in tmp_path.iterdir() if p.is_file()) == ["taken.zip"]  # no partial file left
    assert not AuditEntry.objects.filter(action="run.exported").exists()


def test_the_run_page_and_the_api_export_a_run_to_those_who_may_read_it(client, role_user):
    run = run_import_from_path(EXAMPLE).run
    client.force_login(role_user("viewer"))
    page = client.get(f"/runs/{run.run_id}/").content.decode()
    assert f'href="/runs/{run.run_id}/export/"' in page
    response = client.get(f"/runs/{run.run_id}/export/")
    assert response.status_code == 200 and response["Content-Type"] == "application/zip"
    assert response["Content-Disposition"] == f'attachment; filename="{run.run_id}.zip"'
    files = members(b"".join(response.streaming_content))
    assert json.loads(files["manifest.json"])["exported"]["by"] == "web"
    assert client.get("/runs/no-such-run/export/").status_code == 404
    entry = AuditEntry.objects.get(action="run.exported")
    assert entry.target == run.run_id and entry.detail["by"] == "web" and entry.detail["events"] == run.event_count

    client.logout()
    key = token_for(role_user("operator", "harness"), HarnessToken.Scope.IMPORT_RUNS)
    api = client.get(f"/api/v1/runs/{run.run_id}/bundle/", HTTP_AUTHORIZATION=f"Token {key}")
    assert api.status_code == 200 and api["Content-Type"] == "application/zip"
    assert json.loads(members(b"".join(api.streaming_content))["manifest.json"])["exported"]["by"] == "api"
    capture_only = token_for(role_user("operator", "recorder"), HarnessToken.Scope.CAPTURE)
    refused = client.get(f"/api/v1/runs/{run.run_id}/bundle/", HTTP_AUTHORIZATION=f"Token {capture_only}")
    assert refused.status_code == 403
    assert client.get(f"/runs/{run.run_id}/export/").status_code == 302  # signed out: to the sign-in page


def test_a_replay_is_packaged_from_the_same_reading(tmp_path):
    # The replay's package and the export read the run back through one function (runs.bundle_export.run_bundle).
    from replays.services import _source

    run = run_import_from_path(EXAMPLE).run
    manifest, events, blobs, expired = _source(run)
    exported = members(export_bytes(run.run_id, tmp_path / "x.zip"))
    assert events == exported["events.jsonl"]
    assert {f"blobs/sha256/{d[7:]}": b for d, b in blobs.items()} == {
        k: v for k, v in exported.items() if k.startswith("blobs/")
    }
    assert manifest["blobs"] == json.loads(exported["manifest.json"])["blobs"] and expired == {}
    assert bundles.example_parts()[0]["run"] == manifest["run"]
