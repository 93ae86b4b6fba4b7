"""Launching and running replays (DESIGN §6): what a worker does, and what `replay --inline` runs.

`replay_create` checks what was asked (mode, the one declared variation, a scenario to replay in) and
records a `Replay`; nothing runs in the web process. `replay_execute(replay_id)` is the worker's task body:
it builds the portable replay package from the database (the source run's events and blobs, the pinned
scenario version), runs the engine in the sandbox (`n17q_engine.sandbox`), and imports the log it wrote as
a child run. It is idempotent: a replay that already finished (or was refused) is returned as it is.

The environment of a replay's run is decided here and by the engine (`fixture`, or `sandbox` for a
reconstruction), never by anything in the package's data; the isolation level is the launcher's.
"""

from __future__ import annotations

import logging
import tempfile
from datetime import UTC
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.files.storage import storages
from django.db import transaction
from django.utils import timezone

from fixtures_review.scenarios import ScenarioRefused, scenario_for_run, scenario_package, scenario_resolve
from n17q_engine import canonical
from n17q_engine.deciders import DECIDERS
from n17q_engine.package import VARY_KEYS, PackageError, build_replay
from n17q_engine.replay import ReplayError, ReplayOutput
from n17q_engine.sandbox import IsolationUnavailable, Limits, SandboxError, run_sandboxed

from .audit import audit_record
from .importer import run_import_from_path
from .models import Event, Finding, Replay, Run, RunBlob, blob_storage_name

log = logging.getLogger(__name__)

MODES = ("reconstruction", "rerun", "counterfactual")
ENTRY = "n17q_engine.replay:sandbox_main"


class ReplayRefused(ValueError):
    """A replay that cannot be launched as asked; one line saying why."""


def parse_vary(items: list[str]) -> dict[str, str]:
    vary: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key or not value:
            raise ReplayRefused(f"--vary {item!r}: write KEY=VALUE, e.g. decider=careful")
        if key.split(".", 1)[0] not in VARY_KEYS:
            raise ReplayRefused(f"--vary {key}: not a declared variable (one of {', '.join(VARY_KEYS)})")
        if key in vary:
            raise ReplayRefused(f"--vary {key} given twice")
        vary[key] = value
    return vary


def replay_create(
    run: Run, *, mode: str, vary: dict[str, str] | None = None, scenario: str | None = None, user: Any = None
) -> Replay:
    vary = dict(vary or {})
    if mode not in MODES:
        raise ReplayRefused(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    if mode == "counterfactual" and len(vary) != 1:
        raise ReplayRefused(f"a counterfactual changes exactly one declared variable; {len(vary)} given")
    if mode != "counterfactual" and vary:
        raise ReplayRefused(f"a {mode} changes nothing; --vary belongs to a counterfactual")
    if "decider" in vary and vary["decider"] not in DECIDERS:
        raise ReplayRefused(f"unknown decider {vary['decider']!r} (known: {', '.join(sorted(DECIDERS))})")
    try:
        version = scenario_resolve(scenario) if scenario else scenario_for_run(run)
    except ScenarioRefused as exc:
        raise ReplayRefused(str(exc)) from None
    if version is None and mode != "reconstruction":
        named = f"{run.scenario_name}@{run.scenario_version}" if run.scenario_name else None
        raise ReplayRefused(
            f"run {run.run_id} names scenario {named}, which is not held"
            if named
            else f"run {run.run_id} names no scenario and none was recorded from it; pass --scenario NAME@VERSION"
        )
    with transaction.atomic():
        replay = Replay.objects.create(
            source_run=run,
            mode=mode,
            vary=vary,
            decider=vary.get("decider", "recorded"),
            scenario_version=version,
            created_by=user if getattr(user, "is_authenticated", False) else None,
        )
        audit_record(
            actor=user,
            action="replay.create",
            target=f"replay {replay.pk} of {run.run_id}",
            detail={
                "replay": replay.pk,
                "run": run.run_id,
                "mode": mode,
                "vary": vary,
                "scenario": version and version.ref,
            },
        )
    return replay


def _source(run: Run) -> tuple[dict[str, Any], bytes, dict[str, bytes]]:
    lines = [
        canonical.canonical_json(body) + b"\n"
        for body in Event.objects.filter(run=run).order_by("seq").values_list("body", flat=True).iterator(2000)
    ]
    store = storages["blobs"]
    blobs: dict[str, bytes] = {}
    meta: dict[str, Any] = {}
    for rb in RunBlob.objects.filter(run=run).select_related("blob"):
        digest = rb.blob.digest
        with store.open(blob_storage_name(digest), "rb") as fh:
            blobs[digest] = fh.read()
        meta[digest] = {"media_type": rb.media_type, "size": rb.blob.size, "role": rb.role, "retention": rb.retention}
    return {"format": "n17q.run-bundle/1", "run": run.manifest_run, "blobs": meta}, b"".join(lines), blobs


def replay_execute(replay_id: int) -> Replay:
    """Run one replay to its end (the Celery task's body). Idempotent; see the module docstring."""
    with transaction.atomic():
        replay = (
            Replay.objects.select_for_update(of=("self",))
            .select_related("source_run", "scenario_version")
            .get(pk=replay_id)
        )
        if replay.state in (Replay.State.FINISHED, Replay.State.REFUSED):
            return replay
        replay.state, replay.started_at = Replay.State.RUNNING, timezone.now()
        replay.save(update_fields=["state", "started_at"])
    try:
        package = _package(replay)
        replay.package_digest = package.digest
        result = run_sandboxed(
            ENTRY,
            package.to_wire(),
            allow_degraded=settings.N17Q_ALLOW_DEGRADED_ISOLATION,
            limits=Limits(memory_bytes=settings.N17Q_REPLAY_MEMORY_MB << 20),
            timeout_s=settings.N17Q_REPLAY_TIMEOUT_S,
        )
    except IsolationUnavailable as exc:
        return _end(replay, Replay.State.REFUSED, f"{exc} (set N17Q_ALLOW_DEGRADED_ISOLATION=1 to allow degraded runs)")
    except (PackageError, ScenarioRefused, ReplayError) as exc:
        return _end(replay, Replay.State.REFUSED, str(exc))
    except SandboxError as exc:
        return _end(replay, Replay.State.FAILED, str(exc))
    replay.isolation, replay.wall_s, replay.violations = result.isolation, result.wall_s, result.violations
    if not result.ok:
        errors = [e.get("message", "") for e in result.events if e.get("event") == "sandbox.error"]
        why = (
            "timed out"
            if result.timed_out
            else f"stopped on {len(result.violations)} sandbox violation(s)"
            if result.violations
            else f"exited {result.returncode}: {'; '.join(errors) or result.stderr[-500:]}"
        )
        return _end(replay, Replay.State.FAILED, f"the sandbox {why}")
    try:
        output = ReplayOutput.from_wire(result.output)
        with tempfile.TemporaryDirectory(prefix="n17q-replay-") as tmp:
            imported = run_import_from_path(output.write_bundle(Path(tmp) / "bundle"))
    except Exception as exc:  # the replay's log must import like any run; if not, say why and keep the record
        log.exception("replay %s: its log could not be imported", replay.pk)
        return _end(replay, Replay.State.FAILED, f"the replay's log could not be imported: {exc}")
    missing = list(
        Event.objects.filter(run=imported.run, kind__in=("fixture.missing", "fixture.ambiguous"))
        .order_by("seq")
        .values_list("body", flat=True)
    )
    replay.run = imported.run
    replay.missing = [{k: v for k, v in m.items() if k not in ("seq", "at", "attempt")} for m in missing]
    return _end(replay, Replay.State.FINISHED, "")


def _package(replay: Replay) -> Any:
    manifest, events, blobs = _source(replay.source_run)
    scenario = scenario_package(replay.scenario_version) if replay.scenario_version else None
    return build_replay(
        replay_id=f"replay-{replay.pk}",
        run_id=replay.run_id_for,
        mode=replay.mode,
        vary=replay.vary,
        decider=replay.decider if replay.mode != "counterfactual" else "recorded",
        launched_at=replay.created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        scenario=scenario,
        source_manifest=manifest,
        source_events=events,
        source_blobs=blobs,
    )


def _end(replay: Replay, state: str, error: str) -> Replay:
    replay.state, replay.error, replay.finished_at = state, error, timezone.now()
    replay.save()
    return replay


def replay_json(replay: Replay) -> dict[str, Any]:
    """The `replay --json` shape (DESIGN §8)."""
    run = replay.run
    findings = (
        [
            {"code": f.code, "severity": f.severity, "from": f.from_ref, "to": f.to_ref, "message": f.message}
            for f in Finding.objects.filter(run=run).order_by("id")
        ]
        if run
        else []
    )
    return {
        "replay": replay.pk,
        "run": run.run_id if run else None,
        "mode": replay.mode,
        "state": run.final_state if run else replay.state,
        "isolation": replay.isolation or None,
        "missing": replay.missing,
        "findings": findings,
        "replay_state": replay.state,
        "scenario": replay.scenario_version.ref if replay.scenario_version else None,
        "vary": replay.vary,
        "error": replay.error or None,
        "wall_s": replay.wall_s,
    }
