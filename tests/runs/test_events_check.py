"""events.jsonl checked ahead of the importer (runs.secret_scan.EventsAhead, n17q_secrets.events_check): the same
verdicts and the same stored run whether the check runs in a thread (a small file) or in a child process (a large
one), and nothing stored when the check stops, refuses late, or read other bytes than the importer."""

from __future__ import annotations

import hashlib
import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
from django.db import transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from n17q_engine.bundle import BundleError
from runs import importer as importer_module
from runs import secret_scan
from runs.importer import run_import_from_path
from runs.models import Blob, Edge, Event, Finding, MaskedSecret, Run, RunObject
from tests import bundles
from tests.hypothesis_budget import examples

pytestmark = pytest.mark.django_db

MANIFEST, EVENTS, BLOBS = bundles.example_parts()
GITHUB_TOKEN = "ghp_" + "Zq8RkT3vWm1Lp0Xs7Yd4Nb6Hc2Jf9Ga5Ue8K"  # made up here: the shape the reference rule finds


@pytest.fixture
def in_child(monkeypatch):
    """Every events.jsonl, however small, checked in a child process."""
    monkeypatch.setattr(secret_scan, "CHECK_IN_CHILD_BYTES", 0)


def _nothing_stored(blob_store: Path) -> bool:
    tables = (Run, Event, Edge, RunObject, Finding, MaskedSecret, Blob)
    written = [p for p in blob_store.rglob("*") if p.is_file()] if blob_store.exists() else []
    return not any(model.objects.exists() for model in tables) and not written


def _with_secret_events(tmp_path: Path) -> Path:
    events = bundles.clone(EVENTS)
    call = next(e for e in events if e["kind"] == "tool.call")
    call["request"]["note"] = f"token {GITHUB_TOKEN} from the harness"
    return bundles.write_folder(tmp_path / "bundle", MANIFEST, events, BLOBS)


def _stored(run: Run) -> dict[str, Any]:
    return {
        "events": list(Event.objects.filter(run=run).order_by("seq").values_list("seq", "kind", "body")),
        "edges": sorted(Edge.objects.filter(run=run).values_list("field", "target_ref")),
        "findings": sorted(Finding.objects.filter(run=run).values_list("code", "from_ref", "to_ref")),
        "masked": sorted(MaskedSecret.objects.filter(run=run).values_list("event_ref", "path", "rule")),
    }


def test_a_child_process_check_stores_the_run_a_thread_check_stores(tmp_path, monkeypatch):
    folder = _with_secret_events(tmp_path)
    with transaction.atomic():
        in_thread = _stored(run_import_from_path(folder).run)
        transaction.set_rollback(True)
    monkeypatch.setattr(secret_scan, "CHECK_IN_CHILD_BYTES", 0)
    result = run_import_from_path(folder)
    assert _stored(result.run) == in_thread
    assert [m["event"] for m in result.masked_secrets] == [e["id"] for e in EVENTS if e["kind"] == "tool.call"][:1]
    stored = json.dumps([body for _, _, body in in_thread["events"]])
    assert GITHUB_TOKEN[4:] not in stored and "[masked:" in stored


def test_a_child_process_check_refuses_a_bad_last_line_with_the_reader_s_own_message(tmp_path, _blob_store, in_child):
    events = bundles.clone(EVENTS)
    events[-1]["kind"] = "no.such.kind"
    folder = bundles.write_folder(tmp_path / "bundle", MANIFEST, events, BLOBS)
    with pytest.raises(BundleError) as refused:
        run_import_from_path(folder)
    assert str(refused.value) == f"events.jsonl line {len(events)}, field kind: unknown kind 'no.such.kind'"
    assert _nothing_stored(_blob_store)


def test_a_child_process_check_that_is_killed_refuses_the_import(tmp_path, _blob_store, in_child, monkeypatch):
    real_enter = secret_scan.EventsAhead.__enter__

    def enter_and_kill(self):
        ahead = real_enter(self)
        os.kill(ahead._child.pid, signal.SIGKILL)
        return ahead

    monkeypatch.setattr(secret_scan.EventsAhead, "__enter__", enter_and_kill)
    with pytest.raises(BundleError) as refused:
        run_import_from_path(bundles.EXAMPLE)
    assert "the check of events.jsonl stopped before its end (exit status -9" in str(refused.value)
    assert _nothing_stored(_blob_store)


@pytest.mark.parametrize("host", ["thread", "child"])
def test_a_file_changed_after_its_check_is_refused_and_nothing_is_stored(tmp_path, _blob_store, monkeypatch, host):
    """The importer reads events.jsonl a second time: bytes it did not have checked (a secret written into the file
    after the scan passed it) must never be stored."""
    if host == "child":
        monkeypatch.setattr(secret_scan, "CHECK_IN_CHILD_BYTES", 0)
    folder = bundles.write_folder(tmp_path / "bundle", MANIFEST, bundles.clone(EVENTS), BLOBS)
    path = folder / "events.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    real_enter = secret_scan.EventsAhead.__enter__

    def enter_then_rewrite(self):
        ahead = real_enter(self)
        with ahead._ready:  # the whole file checked first, then its last line rewritten before the importer reads it
            while not ahead._finished:
                ahead._ready.wait()
        event = json.loads(lines[-1])
        event["reason"] = f"with {GITHUB_TOKEN}"
        path.write_bytes(b"".join(lines[:-1]) + json.dumps(event).encode() + b"\n")
        return ahead

    monkeypatch.setattr(secret_scan.EventsAhead, "__enter__", enter_then_rewrite)
    with pytest.raises(BundleError) as refused:
        run_import_from_path(folder)
    assert str(refused.value) == "events.jsonl: changed while it was being imported; import it again"
    assert _nothing_stored(_blob_store)


def _outcome(folder: Path) -> tuple[str, Any]:
    with transaction.atomic():
        try:
            result = run_import_from_path(folder)
        except BundleError as exc:
            outcome: tuple[str, Any] = ("refused", str(exc))
        else:
            outcome = ("imported", _stored(result.run))
        transaction.set_rollback(True)
    return outcome


_LINES = st.lists(
    st.sampled_from(
        [
            b"not json\n",
            b"{}\n",
            b'{"seq": 1}\n',
            b"\n",
            b'{"seq": 99, "id": "late", "kind": "run.state", "at": {"logical": "2026-01-01T00:00:00Z", '
            b'"wall": "2026-01-01T00:00:00Z"}, "attempt": null, "state": "running", "reason": "x"}\n',
            (
                '{"seq": 100, "id": "tok", "kind": "run.state", "at": {"logical": "2026-01-01T00:00:00Z", '
                f'"wall": "2026-01-01T00:00:00Z"}}, "attempt": null, "state": "running", "reason": "{GITHUB_TOKEN}"}}\n'
            ).encode(),
            b'{"seq": 101, "id": "x\\u0000", "kind": "run.state"}\n',
            b"\xff\xfe\n",
        ]
    ),
    max_size=3,
)


@pytest.mark.database_incidental
@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keep=st.integers(0, len(EVENTS)), extra=_LINES, last_newline=st.booleans())
def test_a_thread_check_and_a_child_process_check_give_the_same_verdict(tmp_path_factory, keep, extra, last_newline):
    data = b"".join(json.dumps(e).encode() + b"\n" for e in EVENTS[:keep]) + b"".join(extra)
    if not last_newline:
        data = data[:-1]
    folder = bundles.write_folder(tmp_path_factory.mktemp("bundle"), MANIFEST, [], BLOBS)
    (folder / "events.jsonl").write_bytes(data)
    in_thread = _outcome(folder)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(secret_scan, "CHECK_IN_CHILD_BYTES", 0)
        in_child = _outcome(folder)
    assert in_child == in_thread


# --- one checking process for the runs of one file ----------------------------------------------------------------


class _Started(list):
    """The checking processes an import started (their Popen objects)."""


@pytest.fixture
def check_processes(monkeypatch, in_child) -> _Started:
    started = _Started()
    real_check = secret_scan.EventsCheckProcess.check

    def check(self, path):
        child = real_check(self, path)
        if not any(child is s for s in started):
            started.append(child)
        return child

    monkeypatch.setattr(secret_scan.EventsCheckProcess, "check", check)
    return started


def test_the_runs_of_one_file_are_checked_by_one_process_which_ends_with_the_import(
    tmp_path, _blob_store, check_processes
):
    from tests.runs.test_convert_worker import _traces

    answer = run_import_from_path_json(_traces(tmp_path, 4))
    assert len(answer["runs"]) == 4
    assert len(check_processes) == 1  # the rules compiled once for the file, not once per run
    assert check_processes[0].poll() is not None  # and it was reaped


def test_a_checking_process_killed_during_a_later_run_refuses_the_whole_file(
    tmp_path, _blob_store, check_processes, monkeypatch
):
    from tests.runs.test_convert_worker import _traces

    checks: list[Path] = []
    real_check = secret_scan.EventsCheckProcess.check

    def check_then_kill_on_the_second(self, path):
        checks.append(path)
        if len(checks) == 2:
            # Stopped before it is told the path, killed once told: it can never answer, however busy the machine.
            os.kill(self._child.pid, signal.SIGSTOP)
        child = real_check(self, path)
        if len(checks) == 2:
            os.kill(child.pid, signal.SIGKILL)
        return child

    monkeypatch.setattr(secret_scan.EventsCheckProcess, "check", check_then_kill_on_the_second)
    with pytest.raises(BundleError) as refused:
        run_import_from_path_json(_traces(tmp_path, 3))
    assert str(refused.value).startswith("run 2 (otlp-")
    assert "the check of events.jsonl stopped before its end (exit status -9" in str(refused.value)
    assert _nothing_stored(_blob_store)
    assert all(p.poll() is not None for p in check_processes)


def test_a_run_left_before_its_check_ended_does_not_leave_its_answers_to_the_next(tmp_path, in_child):
    """A shared process whose check was left midway is discarded: the next check starts a fresh one and reads only
    its own answers."""
    first = bundles.write_folder(tmp_path / "first", MANIFEST, bundles.clone(EVENTS), BLOBS)
    second = _with_secret_events(tmp_path)
    with secret_scan.EventsCheckProcess() as process:
        with secret_scan.EventsAhead(first / "events.jsonl", process) as ahead:
            ahead.finish(lines=len(EVENTS), sha256=hashlib.sha256((first / "events.jsonl").read_bytes()).hexdigest())
        left = ahead._child
        assert left is not None and left.poll() is None  # a check that ended keeps the process for the next run
        os.kill(left.pid, signal.SIGSTOP)  # told the next path, it cannot answer: that run is left before its end
        with secret_scan.EventsAhead(first / "events.jsonl", process) as ahead:
            assert ahead._child is left
        assert left.poll() is not None  # killed and reaped
        with secret_scan.EventsAhead(second / "events.jsonl", process) as ahead:
            assert ahead._child is not left
            lines = (second / "events.jsonl").read_bytes()
            flagged = [n for n in range(1, lines.count(b"\n") + 1) if ahead.values_for(n)]
            ahead.finish(lines=lines.count(b"\n"), sha256=hashlib.sha256(lines).hexdigest())
    call_line = next(i for i, e in enumerate(EVENTS, start=1) if e["kind"] == "tool.call")
    assert flagged == [call_line]


def run_import_from_path_json(path: Path) -> dict[str, Any]:
    from runs.import_formats import runs_import_from_path

    return runs_import_from_path(path).to_json()


def test_the_checking_process_starts_first_and_goes_with_a_refused_import(_blob_store, in_child, monkeypatch):
    """A bundle whose events.jsonl is checked in a process starts that process before it hashes its blobs (it starts
    up meanwhile); an import refused before the check (the run is imported already) kills and reaps it, never leaving
    it or waiting for it."""
    started: list = []
    real_start = secret_scan.EventsCheckProcess.start

    def start(self):
        out = real_start(self)
        if not any(self._child is s for s in started):
            started.append(self._child)
        return out

    real_verify = importer_module.bundle.verify_blobs

    def verify(root, manifest):
        assert started and started[-1].poll() is None  # already running when the blobs are hashed
        return real_verify(root, manifest)

    monkeypatch.setattr(secret_scan.EventsCheckProcess, "start", start)
    monkeypatch.setattr(importer_module.bundle, "verify_blobs", verify)
    run_import_from_path(bundles.EXAMPLE)
    with pytest.raises(BundleError, match="already imported"):
        run_import_from_path(bundles.EXAMPLE)
    assert len(started) == 2
    assert all(child.poll() is not None for child in started)
