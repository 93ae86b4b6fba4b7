"""Bundle import: all or nothing, every refusal one line naming where, nothing stored on refusal."""

from __future__ import annotations

import json
import tarfile
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from console.append_only import HistoryIsAppendOnly
from n17q_demo.stories import demo_bundles, write_bundle
from n17q_engine.bundle import BundleError
from n17q_engine.canonical import digest_bytes
from runs.importer import run_import_from_path
from runs.models import Blob, Edge, Event, Finding, Run, RunObject
from tests import bundles

pytestmark = pytest.mark.django_db


def assert_nothing_stored(blob_store: Path) -> None:
    assert Run.objects.count() == 0
    assert Event.objects.count() == 0
    assert Edge.objects.count() == 0
    assert Blob.objects.count() == 0
    stored = [p for p in blob_store.rglob("*") if p.is_file()] if blob_store.exists() else []
    assert stored == []


def refused(path: Path, blob_store: Path) -> str:
    with pytest.raises(BundleError) as info:
        run_import_from_path(path)
    assert_nothing_stored(blob_store)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.fixture
def parts():
    return bundles.example_parts()


def test_it_imports_the_example_bundle_with_its_graph(tmp_path):
    result = run_import_from_path(bundles.EXAMPLE)
    answer = result.to_json()
    assert answer == {
        "run": "run-example-docs",
        "events": 9,
        "findings": [],
        # Issue 20: `findings` holds at most the first 100; the count, whether some were left out, where all are.
        "finding_count": 0,
        "findings_truncated": False,
        "findings_url": "/api/v1/runs/run-example-docs/findings/",
        "masked_secrets": [],
        "unevaluated": answer["unevaluated"],  # DESIGN §10, checked in tests/runs/test_api.py
    }
    assert [u["code"] for u in answer["unevaluated"]] == [u["code"] for u in result.run.unevaluated]
    run = Run.objects.get(run_id="run-example-docs")
    assert run.event_count == 9 and run.final_state == "completed" and run.environment == "live"
    assert list(Event.objects.filter(run=run).order_by("seq").values_list("seq", flat=True)) == list(range(1, 10))
    assert RunObject.objects.filter(run=run, kind="attempt", ref="a1").exists()
    # The claim refers to both results; the result refers back to its call. Both directions are queryable.
    claim = Event.objects.get(run=run, event_id="e-claim")
    assert sorted(claim.edges_out.values_list("target_event__event_id", flat=True)) == ["e-res1", "e-res2"]
    call = Event.objects.get(run=run, event_id="e-call1")
    assert list(call.edges_in.values_list("source__event_id", flat=True)) == ["e-res1"]
    blob = Blob.objects.get()
    assert blob.digest == "sha256:e27d186caef5f985753e164829fd65c267f9bbcc653735c24b88c8da4708a90f"


@pytest.mark.parametrize("packer", ["zip", "zip-wrapped", "tar"])
def test_it_imports_archives(tmp_path, parts, packer):
    folder = bundles.write_folder(tmp_path / "b", *parts)
    if packer == "zip":
        archive = bundles.zip_folder(folder, tmp_path / "b.zip")
    elif packer == "zip-wrapped":
        archive = bundles.zip_folder(folder, tmp_path / "b.zip", wrap="run-example-docs")
    else:
        archive = bundles.tar_folder(folder, tmp_path / "b.tar.gz")
    assert run_import_from_path(archive).events == 9


def test_it_keeps_a_dangling_reference_as_an_edge_and_a_finding(tmp_path, parts):
    manifest, events, blobs = parts
    events[6]["supports"].append("e-nowhere")
    run_import_from_path(bundles.write_folder(tmp_path / "b", manifest, events, blobs))
    edge = Edge.objects.get(target_ref="e-nowhere")
    assert edge.is_dangling and edge.field == "supports[2]"
    finding = Finding.objects.get(code="LIN011")
    assert finding.from_ref == "e-claim" and "e-nowhere" in finding.message


def test_it_counts_errors_apart_from_warnings(tmp_path, parts):
    # A dangling reference is a warning (LIN011): the run list's "errors" column must not count it, or a run
    # whose only oddity is a reference to something outside it reads as a broken chain of authority.
    manifest, events, blobs = parts
    events[6]["supports"].append("e-nowhere")
    run_import_from_path(bundles.write_folder(tmp_path / "b", manifest, events, blobs))
    run = Run.objects.get(run_id="run-example-docs")
    assert list(Finding.objects.filter(run=run).values_list("code", "severity")) == [("LIN011", "warning")]
    assert run.error_count == 0

    story = next(b for b in demo_bundles() if b.manifest["run"]["id"] == "run-003-review-request")
    run_import_from_path(write_bundle(story, tmp_path / "003"))
    run = Run.objects.get(run_id="run-003-review-request")
    severities = list(Finding.objects.filter(run=run).values_list("severity", flat=True))
    assert run.error_count == severities.count("error") > 0


def test_the_edge_check_finds_an_edge_outside_its_run_and_one_without_its_source(tmp_path):
    # The edge table has no row-wise foreign keys (runs/models.py Edge); the importer's set-wise check stands in
    # for them. It must be able to fail: an edge of this run pointing at another run's event, and an edge whose
    # source event does not exist, are both caught.
    from django.db import IntegrityError

    from runs.importer import _verify_edges

    run_import_from_path(bundles.EXAMPLE)
    story = next(b for b in demo_bundles() if b.manifest["run"]["id"] == "run-003-review-request")
    run_import_from_path(write_bundle(story, tmp_path / "003"))
    run = Run.objects.get(run_id="run-example-docs")
    other = Event.objects.filter(run__run_id="run-003-review-request").first()
    written = Edge.objects.filter(run=run).count()
    _verify_edges(run.pk, written)  # as imported: holds

    with pytest.raises(IntegrityError, match="0 point outside"):
        _verify_edges(run.pk, written + 1)  # one more written than start at the run's events
    source = Event.objects.filter(run=run).order_by("seq")[0]
    Edge.objects.create(run=run, source=source, field="x", target_ref="elsewhere", target_event=other)
    with pytest.raises(IntegrityError, match="1 point outside"):
        _verify_edges(run.pk, written + 1)
    Edge.objects.create(run=run, source_id=10**9, field="x", target_ref="e-nowhere")
    with pytest.raises(IntegrityError, match=f"{written + 2} written, {written + 1} start"):
        _verify_edges(run.pk, written + 2)


def _seen_by_the_writer(tmp_path, parts, monkeypatch, read):
    """What `read()` answers inside the writer thread of an import, then of an import refused mid-stream."""
    from runs import bulk

    seen = []
    real = bulk.BackgroundInserts._work

    def work(self):
        seen.append(read())
        real(self)

    monkeypatch.setattr(bulk.BackgroundInserts, "_work", work)
    run_import_from_path(bundles.EXAMPLE)
    manifest, events, blobs = parts
    manifest["run"]["id"] = "run-refused"
    events[3]["seq"] = events[2]["seq"]  # refused mid-stream, with the writer running
    with pytest.raises(BundleError):
        run_import_from_path(bundles.write_folder(tmp_path / "b", manifest, events, blobs))
    return seen


def test_the_switch_interval_the_writer_needs_is_put_back_after_an_import_and_after_a_refusal(
    tmp_path, parts, monkeypatch
):
    import sys

    from runs import bulk

    before = sys.getswitchinterval()
    seen = _seen_by_the_writer(tmp_path, parts, monkeypatch, sys.getswitchinterval)
    assert seen == [bulk.WRITER_SWITCH_INTERVAL_S] * 2
    assert sys.getswitchinterval() == before


def test_the_collector_runs_rarely_during_an_import_and_as_before_after_it_and_after_a_refusal(
    tmp_path, parts, monkeypatch
):
    import gc

    from runs import bulk

    before = gc.get_threshold()
    seen = _seen_by_the_writer(tmp_path, parts, monkeypatch, gc.get_threshold)
    assert seen == [(bulk.IMPORT_GC_THRESHOLD, *before[1:])] * 2
    assert gc.get_threshold() == before
    # Nested (an import inside another's window, as two threads' imports overlap): put back by the last one only.
    with bulk.fewer_collections():
        with bulk.fewer_collections():
            assert gc.get_threshold()[0] == bulk.IMPORT_GC_THRESHOLD
        assert gc.get_threshold()[0] == bulk.IMPORT_GC_THRESHOLD
    assert gc.get_threshold() == before
    # A process that turned automatic collection off keeps it off.
    gc.set_threshold(0, *before[1:])
    try:
        with bulk.fewer_collections():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)


def test_it_refuses_a_second_import_of_the_same_run():
    run_import_from_path(bundles.EXAMPLE)
    with pytest.raises(BundleError, match="already imported"):
        run_import_from_path(bundles.EXAMPLE)
    assert Run.objects.count() == 1


def _bad(tmp_path, manifest, events, blobs, **kw):
    return bundles.write_folder(tmp_path / "bad", manifest, events, blobs, **kw)


def test_it_refuses_a_bad_digest(tmp_path, parts, _blob_store):
    manifest, events, blobs = parts
    digest = next(iter(blobs))
    blobs[digest] = blobs[digest].replace(b"Rotating", b"Rotatinq")
    message = refused(_bad(tmp_path, manifest, events, blobs), _blob_store)
    assert "bad digest" in message and digest.removeprefix("sha256:") in message


def test_it_refuses_a_missing_blob(tmp_path, parts, _blob_store):
    manifest, events, _ = parts
    message = refused(_bad(tmp_path, manifest, events, {}), _blob_store)
    assert "missing blob" in message


def test_it_refuses_an_event_naming_an_unlisted_blob(tmp_path, parts, _blob_store):
    manifest, events, blobs = parts
    events[5]["blob"] = digest_bytes(b"not in the bundle")
    message = refused(_bad(tmp_path, manifest, events, blobs), _blob_store)
    assert message.startswith("events.jsonl line 6, field blob:")


def test_it_refuses_an_unknown_kind(tmp_path, parts, _blob_store):
    manifest, events, blobs = parts
    events[3]["kind"] = "tool.reslut"
    message = refused(_bad(tmp_path, manifest, events, blobs), _blob_store)
    assert message == "events.jsonl line 4, field kind: unknown kind 'tool.reslut'"


def test_it_refuses_an_unknown_format_version(tmp_path, parts, _blob_store):
    manifest, events, blobs = parts
    manifest["format"] = "n17q.run-bundle/2"
    message = refused(_bad(tmp_path, manifest, events, blobs), _blob_store)
    assert message.startswith("manifest.json, field format: unknown format 'n17q.run-bundle/2'")


def test_it_refuses_a_duplicate_id(tmp_path, parts, _blob_store):
    manifest, events, blobs = parts
    events[4]["id"] = "e-call1"
    message = refused(_bad(tmp_path, manifest, events, blobs), _blob_store)
    assert message == "events.jsonl line 5, field id: duplicate id 'e-call1'"


def test_it_refuses_a_non_increasing_seq(tmp_path, parts, _blob_store):
    manifest, events, blobs = parts
    events[2]["seq"] = 2
    message = refused(_bad(tmp_path, manifest, events, blobs), _blob_store)
    assert message == "events.jsonl line 3, field seq: seq 2 does not increase (previous 2)"


def test_it_refuses_invalid_utf8(tmp_path, parts, _blob_store):
    manifest, events, blobs = parts
    lines = [json.dumps(e).encode() + b"\n" for e in events]
    lines[6] = lines[6].replace(b"key rotation", b"key rot\xe2\x28tion")
    message = refused(_bad(tmp_path, manifest, events, blobs, events_bytes=b"".join(lines)), _blob_store)
    assert message.startswith("events.jsonl line 7: invalid UTF-8")


def test_it_refuses_a_truncated_line(tmp_path, parts, _blob_store):
    manifest, events, blobs = parts
    data = b"".join(json.dumps(e).encode() + b"\n" for e in events)
    message = refused(_bad(tmp_path, manifest, events, blobs, events_bytes=data[:-40]), _blob_store)
    assert message.startswith("events.jsonl line 9: truncated or malformed JSON")


def test_it_refuses_a_bad_enumeration_naming_the_field(tmp_path, parts, _blob_store):
    manifest, events, blobs = parts
    events[3]["outcome"] = "fine"
    message = refused(_bad(tmp_path, manifest, events, blobs), _blob_store)
    assert message.startswith("events.jsonl line 4, field outcome: 'fine' is not one of ok | not_found")


def test_it_refuses_an_unknown_environment(tmp_path, parts, _blob_store):
    manifest, events, blobs = parts
    manifest["run"]["environment"] = "production"
    message = refused(_bad(tmp_path, manifest, events, blobs), _blob_store)
    assert message.startswith("manifest.json, field run.environment:")


@pytest.mark.parametrize(
    "member",
    ["../escape.txt", "blobs/../../escape.txt", "/etc/n17q-escape", "..\\escape.txt"],
)
def test_it_refuses_path_traversal_in_tar_and_zip(tmp_path, member, _blob_store):
    for archive in (
        bundles.tar_with_member(tmp_path / "evil.tar.gz", member),
        bundles.zip_with_member(tmp_path / "evil.zip", member),
    ):
        message = refused(archive, _blob_store)
        assert "path" in message and repr(member) in message
    assert not (tmp_path.parent / "escape.txt").exists()
    assert not Path("/etc/n17q-escape").exists()


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE, tarfile.CHRTYPE, tarfile.FIFOTYPE])
def test_it_refuses_links_and_special_files_in_tar(tmp_path, kind, _blob_store):
    archive = bundles.tar_with_member(tmp_path / "evil.tar.gz", "manifest.json", kind=kind, linkname="/etc/passwd")
    assert "link or special file" in refused(archive, _blob_store)


def test_it_refuses_a_symlink_in_a_zip(tmp_path, _blob_store):
    import zipfile

    out = tmp_path / "link.zip"
    with zipfile.ZipFile(out, "w") as zf:
        info = zipfile.ZipInfo("manifest.json")
        info.external_attr = 0o120777 << 16
        zf.writestr(info, "/etc/passwd")
    assert "link or special file" in refused(out, _blob_store)


def test_it_refuses_absurd_sizes_and_counts(tmp_path, parts, settings, _blob_store):
    folder = bundles.write_folder(tmp_path / "b", *parts)
    archive = bundles.tar_folder(folder, tmp_path / "b.tar.gz")
    settings.N17Q_MAX_BUNDLE_BYTES = 1500
    assert "than 1500 bytes" in refused(archive, _blob_store)
    settings.N17Q_MAX_BUNDLE_BYTES = 10**9
    settings.N17Q_MAX_BUNDLE_MEMBERS = 2
    assert "more than 2 members" in refused(archive, _blob_store)


def test_it_refuses_a_file_that_is_not_an_archive(tmp_path, _blob_store):
    path = tmp_path / "bundle.zip"
    path.write_bytes(b"hello")
    assert refused(path, _blob_store) == "not a bundle archive: expected a .zip or a .tar.gz"


def test_it_rolls_back_blobs_when_a_late_line_is_bad(tmp_path, parts, _blob_store):
    """The blobs are verified and written before the events; a bad last line still leaves nothing."""
    manifest, events, blobs = parts
    events[-1]["kind"] = "attempt.finished"
    refused(_bad(tmp_path, manifest, events, blobs), _blob_store)


def test_it_keeps_history_append_only():
    run_import_from_path(bundles.EXAMPLE)
    event = Event.objects.first()
    event.kind = "run.state"
    with pytest.raises(HistoryIsAppendOnly):
        event.save()
    with pytest.raises(HistoryIsAppendOnly):
        event.delete()
    with pytest.raises(HistoryIsAppendOnly):
        Event.objects.filter(pk=event.pk).update(kind="run.state")
    with pytest.raises(HistoryIsAppendOnly):
        Event.objects.all().delete()
    with pytest.raises(HistoryIsAppendOnly):
        Run.objects.get().delete()
    assert Event.objects.get(pk=event.pk).kind == "attempt.started"


def test_it_refuses_raw_sql_changes_to_history_on_postgresql():
    from django.db import DatabaseError, connection, transaction

    if connection.vendor != "postgresql":
        pytest.skip("the database trigger is PostgreSQL's; SQLite keeps the model-level guard")
    run_import_from_path(bundles.EXAMPLE)
    for statement in (
        "UPDATE runs_event SET kind = 'run.state'",
        "DELETE FROM runs_edge",
        "DELETE FROM runs_runobject",
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cur:
            cur.execute(statement)
    assert Event.objects.filter(kind="run.state").count() == 1


def test_it_prints_one_json_object_from_the_command(capsys):
    call_command("import_run", str(bundles.EXAMPLE), "--json")
    assert json.loads(capsys.readouterr().out) == {
        "run": "run-example-docs",
        "events": 9,
        "findings": [],
        "finding_count": 0,
        "findings_truncated": False,
        "findings_url": "/api/v1/runs/run-example-docs/findings/",
        "masked_secrets": [],
        "title": "",  # the example bundle's run has none (DESIGN §10: optional)
        "unevaluated": Run.objects.get(run_id="run-example-docs").unevaluated,
    }


def test_it_fails_the_command_with_one_line(tmp_path, parts):
    manifest, events, blobs = parts
    events[0]["seq"] = "one"
    folder = _bad(tmp_path, manifest, events, blobs)
    with pytest.raises(CommandError, match=r"^events.jsonl line 1, field seq: must be an integer$"):
        call_command("import_run", str(folder), "--json")


def test_it_stores_each_event_exactly_as_the_bundle_held_it(tmp_path, parts):
    """Rows are written as raw text (COPY on PostgreSQL): escapes, tabs and unicode must survive."""
    manifest, events, blobs = parts
    events[6]["text"] = 'tab\there, newline\nthere, back\\slash, quote", \\N, é, 😀'
    events[6]["extension"] = {"nested": ["\r", "\\t", None, 1.5, True]}
    run_import_from_path(bundles.write_folder(tmp_path / "b", manifest, events, blobs))
    stored = {e.event_id: e.body for e in Event.objects.all()}
    assert stored == {e["id"]: e for e in events}
    assert Event.objects.get(event_id="e-claim").logical_at.isoformat() == "2026-07-01T09:00:07+00:00"


def test_the_lineage_command_says_which_checks_it_could_not_evaluate(capsys):
    call_command("import_run", str(bundles.EXAMPLE), "--json")
    capsys.readouterr()
    call_command("lineage", "run-example-docs", "--json")
    answer = json.loads(capsys.readouterr().out)
    assert set(answer) == {"run", "findings", "finding_count", "error_count", "findings_truncated", "unevaluated"}
    assert answer["findings"] == [] and answer["finding_count"] == 0 and not answer["findings_truncated"]
    assert {"code": "LIN009", "reason": "the run holds no workspaces"} in answer["unevaluated"]
    call_command("lineage", "run-example-docs")
    said = capsys.readouterr().out.splitlines()
    assert said[0] == "run-example-docs: no lineage findings"
    assert "  LIN009 not evaluated: the run holds no workspaces" in said
