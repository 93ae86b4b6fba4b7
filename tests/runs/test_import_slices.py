"""Issue 31, point 4: on SQLite an import writes its run in slices and publishes it last (runs/import_slices.py).

One import in one transaction held SQLite's only write lock for the whole import, and a capture, a sign-in and a
review action waited behind it (past the busy timeout: a 503). Every test here runs on the test database's file
(transactional: each slice is a real commit, seen by other connections). What must hold: other writers get in while
the import runs; a reader sees the run whole or not at all; a refused or crashed import leaves no row in any table
and no blob file; two imports of one run id, exactly one wins. No test measures time (benchmarks/bench_import_
writers.py does): waits poll a condition under a generous deadline.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import sys
import threading
import time
import types
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps
from django.conf import settings as django_settings
from django.db import connection, connections, transaction
from django.test import Client
from django.urls import reverse

from accounts.models import HarnessToken
from benchmarks import synth
from n17q_demo import stories
from n17q_engine.bundle import BundleError
from n17q_engine.lineage import LineageGraph
from runs import bulk, import_slices, importer, secret_scan
from runs.importer import run_import_from_path
from runs.models import Blob, Event, Finding, MaskedSecret, Run, RunBlob, RunImport, RunObject, blob_storage_name
from tests import bundles
from tests.runs.test_bundle_secrets import _bundle_with_secrets

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "sqlite", reason="slices are SQLite's (PostgreSQL: one transaction)"),
]

REPO = Path(__file__).resolve().parents[2]
DEADLINE_S = 120
PASSWORD = "a-long-test-password"


@pytest.fixture(autouse=True)
def slices_from_any_size(monkeypatch):
    """The bundles here are small, to keep the tests cheap: sliced whatever their size, as a large one is."""
    monkeypatch.setattr(import_slices, "SLICES_FROM_LINES", 0)


def test_a_small_bundle_is_imported_in_one_transaction(tmp_path, monkeypatch):
    monkeypatch.setattr(import_slices, "SLICES_FROM_LINES", 5_000)
    claimed = []
    real_claim = import_slices.claim
    monkeypatch.setattr(import_slices, "claim", lambda *a, **k: claimed.append(a) or real_claim(*a, **k))
    run_import_from_path(_synth(tmp_path, 4_999))
    assert claimed == [] and Run.objects.get(run_id="bench-run-4999").event_count == 4_999
    run_import_from_path(_synth(tmp_path, 5_000))
    assert [a[0] for a in claimed] == ["bench-run-5000"]


@pytest.fixture
def small_slices(monkeypatch):
    """Many slices from a bundle of a few thousand events: what a large run does, at a test's cost."""
    monkeypatch.setattr(importer, "EVENT_BATCH", 100)
    monkeypatch.setattr(importer, "EDGE_BATCH", 300)
    monkeypatch.setattr(importer, "FINDING_BATCH", 100)


def _synth(tmp_path: Path, n: int, run_id: str | None = None) -> Path:
    folder = tmp_path / f"synth-{n}-{run_id or 'default'}"
    synth.write_bundle(folder, n)
    if run_id is not None:
        _rename(folder, run_id)
    return folder


def _rename(folder: Path, run_id: str) -> None:
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["run"]["id"] = run_id
    (folder / "manifest.json").write_text(json.dumps(manifest))


def rows_everywhere() -> dict[str, int]:
    """The number of rows of every table the console has (its models', many-to-many tables included)."""
    counts: dict[str, int] = {}
    for model in apps.get_models(include_auto_created=True):
        table = model._meta.db_table
        if table not in counts:
            counts[table] = model._base_manager.count()
    return counts


def stored_files(blob_store: Path) -> list[Path]:
    return sorted(p for p in blob_store.rglob("*") if p.is_file()) if blob_store.exists() else []


def _wait(condition: Any, what: str, deadline_s: float = DEADLINE_S) -> None:
    until = time.monotonic() + deadline_s
    while not condition():
        if time.monotonic() > until:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.02)


def _in_thread(fn: Any, out: dict, name: str) -> threading.Thread:
    def work():
        try:
            out[name] = fn()
        except BaseException as exc:  # reported by the test, never hidden
            out[name] = exc
        finally:
            connections.close_all()

    thread = threading.Thread(target=work, name=name, daemon=True)
    thread.start()
    return thread


# ---------------------------------------------------------------- the same run, in slices or in one transaction


def _stored(run_id: str) -> dict[str, Any]:
    run = Run.objects.get(run_id=run_id)
    names: dict[int | None, str] = dict(Event.objects.filter(run=run).values_list("pk", "event_id"))
    objects: dict[int | None, str] = dict(RunObject.objects.filter(run=run).values_list("pk", "ref"))
    summary = {f: getattr(run, f) for f in importer.RUN_SUMMARY_FIELDS if f != "bundle_digest"}
    return {
        "summary": summary,
        "title": run.title,
        "events": list(
            Event.objects.filter(run=run)
            .order_by("seq")
            .values_list("seq", "event_id", "kind", "attempt_ref", "workspace_ref", "logical_at", "wall_at", "body")
        ),
        "objects": sorted((o.kind, o.ref, names[o.introduced_by_id]) for o in RunObject.objects.filter(run=run)),
        "edges": sorted(
            (names[e.source_id], e.field, e.target_ref, names.get(e.target_event_id), objects.get(e.target_object_id))
            for e in run.edges.all()
        ),
        "findings": [
            (f.code, f.severity, f.from_ref, f.to_ref, names.get(f.from_event_id), names.get(f.to_event_id), f.message)
            for f in Finding.objects.filter(run=run).order_by("id")
        ],
        "blobs": sorted(
            (rb.blob.digest, rb.media_type, rb.role, rb.retention)
            for rb in RunBlob.objects.filter(run=run).select_related("blob")
        ),
        "masked": [
            (m.place, names.get(m.event_id), m.event_ref, m.blob_digest, m.recorded_as, m.path, m.rule, m.preview)
            for m in MaskedSecret.objects.filter(run=run).order_by("id")
        ],
    }


def _without(value: Any, run_id: str) -> Any:
    return json.loads(json.dumps(value, default=str).replace(run_id, "<run>"))


def _story_003(tmp_path: Path) -> Path:
    story = next(s for s in stories.demo_bundles() if s.story.startswith("003"))
    return bundles.write_folder(tmp_path / "story", story.manifest, story.events, story.blobs)


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda tmp: _synth(tmp, 2500), id="generated-2500-events"),
        pytest.param(_story_003, id="demo-story-003-findings"),
        pytest.param(lambda tmp: _bundle_with_secrets(tmp)[0], id="masked-secrets"),
    ],
)
def test_in_slices_the_import_stores_exactly_what_one_transaction_stores(tmp_path, settings, small_slices, make):
    folder = make(tmp_path)
    answers = {}
    for name, sliced in (("sliced", True), ("one-transaction", False)):
        settings.N17Q_IMPORT_SLICES = sliced
        run_id = f"{name}-run"
        _rename(folder, run_id)
        answers[run_id] = run_import_from_path(folder).to_json()
    assert _without(_stored("sliced-run"), "sliced-run") == _without(
        _stored("one-transaction-run"), "one-transaction-run"
    )
    assert _without(answers["sliced-run"], "sliced-run") == _without(
        answers["one-transaction-run"], "one-transaction-run"
    )
    assert RunImport.objects.count() == 0
    assert Run.objects.get(run_id="sliced-run").event_count > 0


def test_an_import_inside_a_callers_transaction_stays_one_transaction(tmp_path, monkeypatch):
    """A file of several runs is imported all or none in one outer transaction (runs.import_formats): no slices."""
    seen = []
    real = import_slices.claim

    def claim(run_id, **kwargs):
        seen.append(run_id)
        return real(run_id, **kwargs)

    monkeypatch.setattr(import_slices, "claim", claim)
    with transaction.atomic():
        run_import_from_path(bundles.EXAMPLE)
    assert seen == [] and Run.objects.filter(run_id="run-example-docs").exists()
    run_import_from_path(_synth(tmp_path, 1000))
    assert seen == ["bench-run-1000"] and Run.objects.filter(run_id="bench-run-1000").exists()
    assert RunImport.objects.count() == 0


# ---------------------------------------------------------------- writers and readers during a long import


def _token(user) -> str:
    key = HarnessToken.new_key()
    HarnessToken.objects.create(
        name="h", user=user, key_digest=HarnessToken.digest_key(key), prefix=key[:9], scopes=["captures:create"]
    )
    return key


def _capture() -> dict:
    return json.loads((bundles.EXAMPLE.parent / "example-capture.json").read_text())


def test_a_capture_a_sign_in_and_a_review_action_succeed_during_a_long_import_and_readers_see_it_whole_or_not_at_all(
    role_user, reviewed_connections, tmp_path, monkeypatch, small_slices
):
    """The import is held at two points: midway, until the three writers have started (they then run while it goes
    on writing), and once every row is written, until they have finished. With the import in one transaction they
    could not finish before it goes on (the lock is held from its first batch to its commit): they fail at the busy
    timeout (N17Q_IMPORT_SLICES=0 shows it). A reader polls all along, and once more thoroughly while everything is
    written and nothing published."""
    from fixtures_review.scenarios import scenario_import
    from fixtures_review.services import capture_stage, recording_approve
    from n17q_demo import seed_scenarios as seeds

    assert connection.settings_dict["NAME"] != ":memory:" and "mode=memory" not in str(connection.settings_dict["NAME"])
    for package in seeds.seed_packages():
        scenario_import(package, source="demo")
    capturer, reviewer = role_user("reviewer", "rita"), role_user("reviewer", "ravi")
    role_user("viewer", "vera")
    key = _token(role_user("operator", "harness"))
    recording = capture_stage(raw=json.dumps(_capture()).encode(), user=capturer).recording
    admin = role_user("admin", "ada")
    n = 6000
    folder = _synth(tmp_path, n)
    run_id = f"bench-run-{n}"
    manifest_blobs = len(json.loads((folder / "manifest.json").read_text())["blobs"])
    # Sessions are rows too: made before the import starts, so the readers only read. One client per thread.
    reader_client, viewer_client, admin_client = Client(), Client(), Client()
    reader_client.force_login(role_user("viewer", "rex"))
    viewer_client.force_login(role_user("viewer", "val"))
    admin_client.force_login(admin)

    midway, writers_started = threading.Event(), threading.Event()
    ready_to_publish, publish = threading.Event(), threading.Event()
    submitted = [0]
    real_submit = bulk.BackgroundInserts.submit

    def submit(self, appender, rows):
        if appender.table == Event._meta.db_table:
            submitted[0] += 1
            if submitted[0] == n // importer.EVENT_BATCH // 3:
                midway.set()
                writers_started.wait(DEADLINE_S)
        return real_submit(self, appender, rows)

    real_verify = importer._verify_edges

    def verify_edges(*args):
        # Every row is written by now (in slices: committed), and the run not yet published.
        ready_to_publish.set()
        publish.wait(DEADLINE_S)
        return real_verify(*args)

    monkeypatch.setattr(bulk.BackgroundInserts, "submit", submit)
    monkeypatch.setattr(importer, "_verify_edges", verify_edges)

    observed: list[str] = []
    problems: list[str] = []
    importing_done = threading.Event()

    def read() -> None:
        """The run as a reader sees it, through the ORM and the API: absent, or complete."""
        while True:
            last = importing_done.is_set()
            run = Run.objects.filter(run_id=run_id).first()
            api = reader_client.get(reverse("api-run", args=[run_id]))
            if run is None:
                observed.append("absent")
            else:
                counts = (
                    Event.objects.filter(run=run).count(),
                    RunBlob.objects.filter(run=run).count(),
                    Finding.objects.filter(run=run).count(),
                )
                if counts != (n, manifest_blobs, run.finding_count) or run.event_count != n:
                    problems.append(f"partial run: {counts}, event_count {run.event_count}")
                observed.append("complete")
            if api.status_code == 200 and api.json()["event_count"] != n:
                problems.append(f"API answered a partial run: {api.json()['event_count']} events")
            elif api.status_code not in (200, 404):
                problems.append(f"API answered {api.status_code}")
            if last:
                return

    results: dict[str, Any] = {}
    reader = _in_thread(read, results, "reader")
    importing = _in_thread(lambda: run_import_from_path(folder), results, "import")
    try:
        assert midway.wait(DEADLINE_S), results.get("import")

        def capture():
            return Client(raise_request_exception=False).post(
                reverse("api-captures"),
                data=json.dumps(_capture()),
                content_type="application/json",
                HTTP_AUTHORIZATION=f"Token {key}",
            )

        def sign_in():
            return Client(raise_request_exception=False).post(
                reverse("login"), {"username": "vera", "password": PASSWORD}
            )

        def approve():
            fresh = type(recording).objects.get(pk=recording.pk)
            return recording_approve(recording=fresh, user=reviewer, revision=fresh.revision)

        writers = [_in_thread(fn, results, fn.__name__) for fn in (capture, sign_in, approve)]
        writers_started.set()
        assert ready_to_publish.wait(DEADLINE_S), results.get("import")
        for thread in writers:
            thread.join(DEADLINE_S)
        # The writers are done while the import has not committed its run: each got in between its slices.
        captured, signed_in, approved = results["capture"], results["sign_in"], results["approve"]
        assert not isinstance(captured, BaseException) and captured.status_code == 201, captured
        assert not isinstance(signed_in, BaseException) and signed_in.status_code == 302, signed_in
        assert not isinstance(approved, BaseException) and approved.fixture_version is not None, approved
        # Everything is written now and nothing published: the rows are there, and nothing shows them.
        record = RunImport.objects.get(run_id=run_id)
        assert Event.objects.filter(run_id=record.run_key).count() == n
        assert not Run.objects.filter(run_id=run_id).exists()
        assert viewer_client.get(reverse("api-run", args=[run_id])).status_code == 404
        assert viewer_client.get(reverse("api-run-findings", args=[run_id])).status_code == 404
        assert viewer_client.get(reverse("runs:run-detail", args=[run_id])).status_code == 404
        assert run_id not in viewer_client.get(reverse("runs:run-list")).content.decode()
        assert run_id not in json.dumps(viewer_client.get(reverse("api-runs")).json())
        last_event = Event.objects.filter(run_id=record.run_key).order_by("-seq").first()
        assert last_event is not None
        listed = admin_client.get(reverse("admin:runs_event_changelist"), {"q": last_event.event_id})
        assert listed.status_code == 200 and listed.context["cl"].result_count == 0
        assert admin_client.get(reverse("admin:runs_event_change", args=[last_event.pk])).status_code != 200
        assert admin_client.get(reverse("admin:runs_finding_changelist")).context["cl"].result_count == 0
    finally:
        writers_started.set()
        publish.set()
        importing.join(DEADLINE_S)
        importing_done.set()
        reader.join(DEADLINE_S)

    assert isinstance(results["import"], importer.ImportResult), results["import"]
    assert not isinstance(results["reader"], BaseException), results["reader"]
    assert problems == []
    assert "absent" in observed and observed[-1] == "complete"
    assert observed == sorted(observed)  # absent, then complete: never back
    run = Run.objects.get(run_id=run_id)
    assert run.event_count == n == Event.objects.filter(run=run).count()
    assert RunImport.objects.count() == 0


# ---------------------------------------------------------------- refusals leave nothing


def _fail_in_the_writer(monkeypatch) -> None:
    """The fifth batch the writer executes fails (after four were committed)."""
    real = bulk.Appender.execute
    calls = [0]

    def execute(raw, statements):
        calls[0] += 1
        if calls[0] == 5:
            raise RuntimeError("injected: the disk is full")
        return real(raw, statements)

    monkeypatch.setattr(bulk.Appender, "execute", staticmethod(execute))


def _fail_in_the_parser(monkeypatch) -> None:
    """The parser fails at event 1,500, once batches were committed (waited for: the writer is another thread)."""
    real = LineageGraph.add
    seen = [0]

    def add(self, event, **kwargs):
        seen[0] += 1
        if seen[0] == 1500:
            record = RunImport.objects.get()
            _wait(lambda: Event.objects.filter(run_id=record.run_key).exists(), "a committed batch")
            raise RuntimeError("injected: the parser died")
        return real(self, event, **kwargs)

    monkeypatch.setattr(LineageGraph, "add", add)


def _fail_while_publishing(monkeypatch) -> None:
    real = importer.audit_record

    def audit(**kwargs):
        if kwargs.get("action") == "run.import":
            raise RuntimeError("injected: publishing failed")
        return real(**kwargs)

    monkeypatch.setattr(importer, "audit_record", audit)


def _bad_last_line(folder: Path) -> None:
    with open(folder / "events.jsonl", "ab") as out:
        out.write(b'{"seq": 99999999, "id": "e-broken", "kind": "no.such.kind"}\n')


def _blob_mismatch(folder: Path) -> None:
    blob = next((folder / "blobs" / "sha256").iterdir())
    blob.write_bytes(blob.read_bytes() + b" ")


@pytest.mark.parametrize(
    ("spoil", "fail", "error"),
    [
        pytest.param(_bad_last_line, None, BundleError, id="bad-last-line"),
        pytest.param(_blob_mismatch, None, BundleError, id="blob-digest-mismatch"),
        pytest.param(None, _fail_in_the_writer, RuntimeError, id="writer-fails-mid-import"),
        pytest.param(None, _fail_in_the_parser, RuntimeError, id="parser-fails-mid-import"),
        pytest.param(None, _fail_while_publishing, RuntimeError, id="publishing-fails"),
    ],
)
def test_a_refused_import_leaves_no_row_in_any_table_and_no_blob_file(
    tmp_path, monkeypatch, small_slices, _blob_store, spoil, fail, error
):
    run_import_from_path(bundles.EXAMPLE)  # the tables are not empty: removing rows must spare everyone else's
    before, files_before = rows_everywhere(), stored_files(_blob_store)
    folder = _synth(tmp_path, 3000)
    if spoil is not None:
        spoil(folder)
    if fail is not None:
        fail(monkeypatch)
    with pytest.raises(error):
        run_import_from_path(folder)
    after = rows_everywhere()
    changed = {table: after[table] - before[table] for table in after if after[table] != before[table]}
    # Only the audit log's record of the refusal (a BundleError is audited; an unexpected error is logged).
    assert changed in ({}, {"runs_auditentry": 1}), changed
    assert stored_files(_blob_store) == files_before
    # And the run can be imported once the bundle is sound.
    monkeypatch.undo()
    run_import_from_path(_synth(tmp_path / "again", 3000))
    assert Run.objects.get(run_id="bench-run-3000").event_count == 3000


def _changed_after_its_check(monkeypatch, folder: Path) -> None:
    """The last line rewritten (a secret in it) once the check ahead has read the whole file, before the importer."""
    real_enter = secret_scan.EventsAhead.__enter__
    lines = (folder / "events.jsonl").read_bytes().splitlines(keepends=True)

    def enter_then_rewrite(self):
        ahead = real_enter(self)
        with ahead._ready:
            while not ahead._finished:
                ahead._ready.wait()
        last = json.loads(lines[-1])
        last["reason"] = "with ghp_" + "Zq8RkT3vWm1Lp0Xs7Yd4Nb6Hc2Jf9Ga5Ue8K"
        (folder / "events.jsonl").write_bytes(b"".join(lines[:-1]) + json.dumps(last).encode() + b"\n")
        return ahead

    monkeypatch.setattr(secret_scan.EventsAhead, "__enter__", enter_then_rewrite)


@pytest.mark.parametrize("spoil", ["bad-last-line", "changed-after-its-check"])
def test_in_slices_a_refusal_by_the_check_in_a_child_process_leaves_no_row_and_no_blob_file(
    tmp_path, monkeypatch, small_slices, _blob_store, spoil
):
    """The check ahead in its child process (a large file's) refuses after slices were committed: they go."""
    monkeypatch.setattr(secret_scan, "CHECK_IN_CHILD_BYTES", 0)
    run_import_from_path(bundles.EXAMPLE)
    before, files_before = rows_everywhere(), stored_files(_blob_store)
    folder = _synth(tmp_path, 3000)
    if spoil == "bad-last-line":
        _bad_last_line(folder)
    else:
        _changed_after_its_check(monkeypatch, folder)
    with pytest.raises(BundleError):
        run_import_from_path(folder)
    after = rows_everywhere()
    changed = {table: after[table] - before[table] for table in after if after[table] != before[table]}
    assert changed == {"runs_auditentry": 1}, changed
    assert stored_files(_blob_store) == files_before


# ---------------------------------------------------------------- crashed imports


CHILD = """
import sys, time
import django
django.setup()
from n17q_engine.lineage import LineageGraph
from runs import import_slices, importer
importer.EVENT_BATCH = 100
import_slices.SLICES_FROM_LINES = 0
real = LineageGraph.add
seen = [0]
def add(self, event, **kwargs):
    seen[0] += 1
    if seen[0] == 1500:
        print("paused", flush=True)
        time.sleep(3600)
    return real(self, event, **kwargs)
LineageGraph.add = add
importer.run_import_from_path(sys.argv[1])
"""


def _crashed_import(folder: Path, blob_store: Path) -> RunImport:
    """A real import in a process of its own against the test database, killed (SIGKILL) once batches were
    committed; returns its record, left behind."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "n17q_site.settings",
        "DATABASE_URL": f"sqlite:///{connection.settings_dict['NAME']}",
        # The child's blob store is this test's (settings: N17Q_DATA_DIR / "blobs").
        "N17Q_DATA_DIR": str(blob_store.parent),
        "PYTHONPATH": str(REPO),
    }
    env.pop("N17Q_TEST_DATABASE_NAME", None)
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, str(folder)], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        line = child.stdout.readline()
        assert line.strip() == b"paused", (line, child.stderr.read() if child.poll() is not None else "")
        _wait(lambda: RunImport.objects.exists(), "the child's record")
        record = RunImport.objects.get()
        _wait(lambda: Event.objects.filter(run_id=record.run_key).exists(), "the child's first committed batch")
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(DEADLINE_S)  # reaped: a zombie would still answer as a live process
    return RunImport.objects.get()


def test_a_crashed_imports_rows_and_blob_files_are_removed_by_the_sweep(tmp_path, _blob_store):
    run_import_from_path(bundles.EXAMPLE)
    before, files_before = rows_everywhere(), stored_files(_blob_store)
    record = _crashed_import(_synth(tmp_path, 3000), _blob_store)
    # Left behind: rows under the reserved key, the blob files, the record. Shown nowhere.
    assert Event.objects.filter(run_id=record.run_key).exists()
    assert stored_files(_blob_store) != files_before and record.blob_files
    assert not Run.objects.filter(run_id="bench-run-3000").exists()

    assert import_slices.sweep_abandoned_imports() == ["bench-run-3000"]
    assert rows_everywhere() == before
    assert stored_files(_blob_store) == files_before
    assert import_slices.sweep_abandoned_imports() == []


def test_the_next_import_of_a_crashed_run_removes_its_rows_and_imports_it(tmp_path, _blob_store):
    folder = _synth(tmp_path, 3000)
    record = _crashed_import(folder, _blob_store)
    result = run_import_from_path(folder)
    assert result.events == 3000 == Event.objects.filter(run=result.run).count()
    assert not Event.objects.filter(run_id=record.run_key).exists() and record.run_key != result.run.pk
    assert RunImport.objects.count() == 0
    for name in record.blob_files:  # the crashed import's files, written again by this one
        assert (_blob_store / name).is_file()


def test_an_import_whose_heartbeat_went_stale_is_taken_over_and_refused_when_it_wakes(
    tmp_path, monkeypatch, small_slices, _blob_store
):
    """A live import that stopped beating (a suspended process, say) is presumed crashed: the sweep removes its rows,
    and the import, once it goes on, writes nothing more and is refused with one line."""
    run_import_from_path(bundles.EXAMPLE)
    before, files_before = rows_everywhere(), stored_files(_blob_store)
    paused, resume = threading.Event(), threading.Event()
    real = LineageGraph.add
    seen = [0]

    def add(self, event, **kwargs):
        seen[0] += 1
        if seen[0] == 1500:
            paused.set()
            resume.wait(DEADLINE_S)
        return real(self, event, **kwargs)

    monkeypatch.setattr(LineageGraph, "add", add)
    results: dict[str, Any] = {}
    importing = _in_thread(lambda: run_import_from_path(_synth(tmp_path, 3000)), results, "import")
    try:
        assert paused.wait(DEADLINE_S), results.get("import")
        record = RunImport.objects.get()
        _wait(lambda: Event.objects.filter(run_id=record.run_key).exists(), "a committed batch")
        assert import_slices.sweep_abandoned_imports() == []  # beating, and its process (this one) alive
        RunImport.objects.filter(pk=record.pk).update(heartbeat_at=record.heartbeat_at.replace(year=2000))
        assert import_slices.sweep_abandoned_imports() == ["bench-run-3000"]
    finally:
        resume.set()
        importing.join(DEADLINE_S)
    refusal = results["import"]
    assert isinstance(refusal, BundleError) and "taken for crashed" in str(refusal), refusal
    assert "\n" not in str(refusal)
    after = rows_everywhere()
    assert {t: after[t] - before[t] for t in after if after[t] != before[t]} == {"runs_auditentry": 1}
    assert stored_files(_blob_store) == files_before


# ---------------------------------------------------------------- two imports of one run id


def _two_imports_of_one_run(tmp_path: Path, monkeypatch, *, first_fails: bool) -> dict[str, Any]:
    """Two imports of one bundle at once: the first is held before it publishes until the second is seen waiting for
    its record, then publishes (or fails, `first_fails`). Their results, by "first" and "second"."""
    folder = _synth(tmp_path, 2000)
    second_waits, go_on = threading.Event(), threading.Event()

    def sleep(seconds: float) -> None:
        if seconds == import_slices.WAIT_POLL_S:
            second_waits.set()
        time.sleep(seconds)

    monkeypatch.setattr(import_slices, "time", types.SimpleNamespace(monotonic=time.monotonic, sleep=sleep))
    real_publishing = import_slices.ImportSlices.publishing
    calls = [0]

    def publishing(self):
        calls[0] += 1
        if calls[0] == 1:
            go_on.wait(DEADLINE_S)
            if first_fails:
                raise RuntimeError("injected: the first import fails")
        return real_publishing(self)

    monkeypatch.setattr(import_slices.ImportSlices, "publishing", publishing)
    results: dict[str, Any] = {}
    first = _in_thread(lambda: run_import_from_path(folder), results, "first")
    _wait(lambda: RunImport.objects.exists(), "the first import's record")
    second = _in_thread(lambda: run_import_from_path(folder), results, "second")
    try:
        assert second_waits.wait(DEADLINE_S)
    finally:
        go_on.set()
        first.join(DEADLINE_S)
        second.join(DEADLINE_S)
    return results


def test_two_imports_of_one_run_at_once_exactly_one_wins_and_the_other_is_told_already_imported(
    tmp_path, monkeypatch, small_slices
):
    """The second waits while the first writes (it would wait on PostgreSQL's unique index the same way), then is
    told plainly. The first is held until the second is seen waiting for it."""
    results = _two_imports_of_one_run(tmp_path, monkeypatch, first_fails=False)
    assert isinstance(results["first"], importer.ImportResult), results["first"]
    assert isinstance(results["second"], BundleError), results["second"]
    assert "already imported" in str(results["second"])
    assert Run.objects.filter(run_id="bench-run-2000").count() == 1
    assert Event.objects.count() == 2000 and RunImport.objects.count() == 0


def test_an_import_waiting_for_a_refused_one_imports_the_run(tmp_path, monkeypatch, small_slices):
    results = _two_imports_of_one_run(tmp_path, monkeypatch, first_fails=True)
    assert isinstance(results["first"], RuntimeError), results["first"]
    assert isinstance(results["second"], importer.ImportResult), results["second"]
    assert Event.objects.count() == 2000 == Run.objects.get(run_id="bench-run-2000").event_count


def test_reserved_keys_are_never_given_to_another_insert(settings, tmp_path):
    with connection.cursor() as cursor:
        # A table that never had a row has no sequence yet (the test database's are left over from earlier tests).
        cursor.execute("DELETE FROM sqlite_sequence WHERE name = %s", [Event._meta.db_table])
        events = bulk._sqlite_reserve(cursor, Event._meta.db_table, 50)
        runs = bulk._sqlite_reserve(cursor, Run._meta.db_table, 3)
    assert events == list(range(1, 51)) and len(runs) == 3 and runs == sorted(runs)
    result = run_import_from_path(bundles.EXAMPLE)  # in slices: its keys are reserved the same way
    assert result.run.pk > max(runs)
    assert min(Event.objects.values_list("pk", flat=True)) == 51
    Run.objects.filter(pk=result.run.pk).update(title="x")  # (an ORM write in between changes nothing)
    with connection.cursor() as cursor:
        assert bulk._sqlite_reserve(cursor, Run._meta.db_table, 1) == [result.run.pk + 1]
        # A block reserved by an import in slices still writing: an import in one transaction counts on past it.
        pending = bulk._sqlite_reserve(cursor, Event._meta.db_table, 1000)
    settings.N17Q_IMPORT_SLICES = False
    other = run_import_from_path(_synth(tmp_path, 1000))
    assert min(Event.objects.filter(run=other.run).values_list("pk", flat=True)) > max(pending)


def test_the_writer_leaves_the_lock_free_long_enough_at_least_once_in_every_interval(monkeypatch):
    clock = [100.0]
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        clock[0] += seconds

    monkeypatch.setattr(import_slices, "time", types.SimpleNamespace(monotonic=lambda: clock[0], sleep=sleep))
    share = import_slices.LockShare()
    held = 0.05
    free_at: list[float] = []  # when the lock was taken again after LOCK_FREE_S or more free
    last_release = None
    for _ in range(100):  # slices back to back: 50 ms held, 1 ms free
        share.before()
        if last_release is not None and clock[0] - last_release >= import_slices.LOCK_FREE_S - 1e-9:
            free_at.append(clock[0])
        clock[0] += held
        share.after()
        last_release = clock[0]
        clock[0] += 0.001
    gaps = [b - a for a, b in itertools.pairwise(free_at)]
    assert sleeps and gaps and max(gaps) <= import_slices.LOCK_HELD_MAX_S + import_slices.LOCK_FREE_S + held
    # A parser slow enough to leave the lock free by itself is never made to wait.
    sleeps.clear()
    share = import_slices.LockShare()
    for _ in range(20):
        share.before()
        clock[0] += held
        share.after()
        clock[0] += import_slices.LOCK_FREE_S + 0.01
    assert sleeps == []


def test_a_refused_import_keeps_the_blob_files_a_published_run_or_a_recording_holds(_blob_store):
    from django.core.files.base import ContentFile
    from django.core.files.storage import storages

    store = storages["blobs"]
    held, alone = "sha256:" + "a" * 64, "sha256:" + "b" * 64
    for digest in (held, alone):
        store.save(blob_storage_name(digest), ContentFile(b"x"))
    Blob.objects.create(digest=held, size=1)
    import_slices.remove_blob_files_nobody_holds([blob_storage_name(held), blob_storage_name(alone)])
    assert store.exists(blob_storage_name(held)) and not store.exists(blob_storage_name(alone))


def test_the_sweep_runs_from_beat_and_answers_what_it_removed():
    from runs.tasks import ABANDONED_IMPORTS_TASK, abandoned_imports_sweep_task

    entry = django_settings.CELERY_BEAT_SCHEDULE["abandoned-imports-sweep"]
    assert entry["task"] == ABANDONED_IMPORTS_TASK == abandoned_imports_sweep_task.name
    assert abandoned_imports_sweep_task.run() == {"removed": []}
