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
import os
import secrets
import socket
import tempfile
import time
from collections.abc import Mapping
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction
from django.db.models import F, Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from accounts.audit import audit_record
from fixtures_review.connections import ConnectionRefused, model_connection_resolve
from fixtures_review.scenarios import (
    FixtureBodies,
    ScenarioRefused,
    scenario_bodies,
    scenario_for_run,
    scenario_package,
    scenario_resolve,
)
from n17q_engine.agent.entry import run_agent_replay
from n17q_engine.agent.spec import AgentError
from n17q_engine.bundle import BundleError
from n17q_engine.deciders import DECIDERS
from n17q_engine.identifiers import replay_run_id_problem
from n17q_engine.package import VARY_KEYS, PackageError, build_replay, vary_value_problem
from n17q_engine.replay import ReplayError, ReplayOutput
from n17q_engine.sandbox import IsolationUnavailable, Limits, SandboxError, run_sandboxed
from n17q_engine.scenario_evaluation import EVALUATED_KINDS, evaluate
from runs.bundle_export import BundleExportError, run_bundle
from runs.event_facts import age_text
from runs.importer import run_import_from_path
from runs.models import Event, Finding, Run
from runs.selectors import LINEAGE_FINDINGS_IN_ANSWER

from .models import Replay

log = logging.getLogger(__name__)

# The worker's task (replays/tasks.py). Its name predates the replays app and is kept: queued messages and
# running workers know it by this name.
REPLAY_TASK = "runs.replay_run"

MODES = ("reconstruction", "rerun", "counterfactual")
ENTRY = "n17q_engine.replay:sandbox_main"


class ReplayRefused(ValueError):
    """A replay that cannot be launched as asked; one line saying why, in words for any door (web, CLI). `field`
    names the input the refusal is about (`scenario`, `vary`, `mode`, `checkpoint`), so that a door can point at
    its own control for it (the CLI's flag, the form's field)."""

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.field = field


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
        problem = vary_value_problem(key, value)
        if problem:
            raise ReplayRefused(f"--{problem}")
        vary[key] = value
    return vary


def launch_shape_check(run: Run, *, mode: str, vary: dict[str, str]) -> None:
    """Refuse, in one line, a launch whose mode and variation cannot go together, whatever the scenario: the
    launch itself (`replay_create`) and the summary a door shows before it (`replays.confirm.launch_preview`)."""
    if mode not in MODES:
        raise ReplayRefused(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
    too_long = replay_run_id_problem(run.run_id, mode)  # refused now, not after the sandbox ran
    if too_long is not None:
        raise ReplayRefused(too_long)
    if mode == "counterfactual" and len(vary) != 1:
        raise ReplayRefused(f"a counterfactual changes exactly one declared variable; {len(vary)} given")
    if mode != "counterfactual" and vary:
        raise ReplayRefused(f"a {mode} changes nothing; a varied value belongs to a counterfactual", field="vary")
    if "decider" in vary and vary["decider"] not in DECIDERS and not vary["decider"].startswith("agent:"):
        raise ReplayRefused(f"unknown decider {vary['decider']!r} (known: {', '.join(sorted(DECIDERS))})")


def replay_create(
    run: Run,
    *,
    mode: str,
    vary: dict[str, str] | None = None,
    scenario: str | None = None,
    checkpoint: str = "start",
    user: Any = None,
    model_connection: str | None = None,
) -> Replay:
    vary = dict(vary or {})
    launch_shape_check(run, mode=mode, vary=vary)
    connection = model_connection_chosen(mode, vary, model_connection)
    try:
        version = scenario_resolve(scenario) if scenario else scenario_for_run(run)
    except ScenarioRefused as exc:
        raise ReplayRefused(str(exc)) from None
    if version is None and mode != "reconstruction":
        named = f"{run.scenario_name}@{run.scenario_version}" if run.scenario_name else None
        raise ReplayRefused(
            f"run {run.run_id} names scenario {named}, which is not held"
            if named
            else f"run {run.run_id} names no scenario and none was recorded from it; name a scenario version "
            "(NAME@VERSION) to replay it against",
            field="scenario",
        )
    from .launch import VaryRefused, launch_summary, scenario_loaded, vary_check

    try:
        vary_check(scenario_loaded(version) if mode != "reconstruction" else None, vary)
    except VaryRefused as exc:
        raise ReplayRefused(str(exc)) from None
    # A branch from a recorded checkpoint (issue 18): the checkpoint must be one of the run's `checkpoint` events
    # (or "start"); a human choice must name one of its human inputs after it (`launch.source_check`).
    try:
        environment = launch_summary(
            run, mode=mode, vary=vary, version=version, checkpoint=checkpoint, model_connection=connection
        )
    except VaryRefused as exc:
        field = "checkpoint" if str(exc).startswith(("checkpoint", "a reconstruction")) else None
        raise ReplayRefused(str(exc), field=field) from None
    with transaction.atomic():
        replay = Replay.objects.create(
            source_run=run,
            mode=mode,
            vary=vary,
            decider=vary.get("decider", "recorded"),
            agent_version=(environment.get("agent") or {}).get("version"),
            checkpoint=checkpoint,
            scenario_version=version,
            environment=environment,
            model_connection=connection or {},
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
                "checkpoint": checkpoint,
            },
        )
    return replay


def _source(run: Run) -> tuple[dict[str, Any], bytes, dict[str, bytes], dict[str, dict[str, Any]]]:
    """The source run as a bundle for the package (`runs.bundle_export`, the same reading an export makes), and
    {digest: expiry} for the blobs whose bytes the retention sweep removed: the package carries their digests and
    says they expired, so the engine can stop precisely where a replay needs them (and a reconstruction can disclose
    them) instead of the worker failing on a file."""
    try:
        bundle = run_bundle(run)
        # Without what reviewers appended after the run (issue 38): the replay reconstructs what the run knew.
        events = b"".join(bundle.event_lines(annotations=False))
        blobs: dict[str, bytes] = {}
        for digest, handle in bundle.blobs():
            with handle:
                blobs[digest] = handle.read()
    except BundleExportError as exc:
        raise ReplayRefused(str(exc)) from None
    # The package says what expired in replay.json (`expired_blobs`); its source manifest lists the blobs as they
    # were imported.
    listed = {d: {k: v for k, v in meta.items() if k != "expired"} for d, meta in bundle.manifest["blobs"].items()}
    manifest = {**bundle.manifest, "blobs": listed}
    return manifest, events, blobs, {d: e.as_json() for d, e in bundle.expired.items()}


# --- launching -------------------------------------------------------------------------------------------------


def model_connection_chosen(mode: str, vary: dict[str, str], name: str | None) -> dict[str, Any] | None:
    """A live model connection (issues 18, 33) belongs to a counterfactual whose decider is a registered agent, and
    is one an admin registered and another person approved (`model_connection_resolve`): the launch names it, nothing
    typed becomes a URL or a variable name. Kept as it was at launch, with the per-replay call cap."""
    if not name:
        return None
    if not isinstance(name, str):  # never a URL and a variable name given as they are: a registered name only
        raise ReplayRefused("a live model connection is chosen by the name of an approved one", field="model")
    if mode != "counterfactual" or not str(vary.get("decider", "")).startswith("agent:"):
        raise ReplayRefused("a live model connection is for a counterfactual whose decider is an agent", field="model")
    try:
        endpoint = model_connection_resolve(name)
    except ConnectionRefused as exc:
        raise ReplayRefused(str(exc), field="model") from None
    return {
        "connection": name,
        "base_url": endpoint.base_url,
        "credential_name": endpoint.credential,
        "max_calls": settings.N17Q_MODEL_RELAY_MAX_CALLS,
    }


def replay_launch(
    run: Run,
    *,
    mode: str,
    vary: dict[str, str] | None = None,
    scenario: str | None = None,
    checkpoint: str = "start",
    user: Any = None,
    model_connection: str | None = None,
) -> Replay:
    """Create a replay and enqueue its task once the row is committed (a worker must be able to read it)."""
    with transaction.atomic():
        replay = replay_create(
            run,
            mode=mode,
            vary=vary,
            scenario=scenario,
            checkpoint=checkpoint,
            user=user,
            model_connection=model_connection,
        )
        transaction.on_commit(lambda: replay_enqueue(replay.pk))
    return replay


def replay_enqueue(replay_id: int) -> bool:
    """Send the task. A broker that cannot be reached loses nothing: the replay stays queued and the
    recovery pass (`replays_recover`) sends it again."""
    Replay.objects.filter(pk=replay_id, state=Replay.State.QUEUED).update(enqueued_at=timezone.now())
    try:
        # By name, so that this module and the task module (which calls back into it) do not import each other.
        current_app.send_task(REPLAY_TASK, args=(replay_id,), queue=settings.N17Q_REPLAY_QUEUE, retry=False)
    except Exception as exc:  # kombu's connection errors have no common base worth naming here
        log.warning("replay %s: the broker could not be reached (%s); it stays queued for recovery", replay_id, exc)
        return False
    return True


# --- claiming -------------------------------------------------------------------------------------------------------


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _holder_gone(claimed_by: str) -> bool:
    """True when the process holding a claim ran on this host and is no longer alive (or is a zombie).

    Claims held on other hosts are judged by their lease alone."""
    host, _, pid = claimed_by.rpartition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    if int(pid) == os.getpid():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def _lease_until() -> Any:
    return timezone.now() + timedelta(seconds=settings.N17Q_REPLAY_LEASE_S)


def replay_claim(replay_id: int) -> str | None:
    """Claim a replay for this process; the claim token, or None when it is not ours to run.

    A conditional UPDATE (`WHERE state = queued`, or `WHERE state = running AND claim_token = <the dead
    holder's>`) that must change exactly one row: two workers given the same replay (a redelivered message,
    a recovery pass racing a slow worker) cannot both run it.
    """
    row = (
        Replay.objects.filter(pk=replay_id)
        .values("state", "claim_token", "claimed_by", "lease_expires_at", "attempts", "progress_checkpoint")
        .first()
    )
    if row is None:
        log.warning("replay %s does not exist; nothing to run", replay_id)
        return None
    now = timezone.now()
    if row["state"] == Replay.State.QUEUED:
        condition = Q(state=Replay.State.QUEUED)
    elif row["state"] == Replay.State.RUNNING and (
        row["lease_expires_at"] is None or row["lease_expires_at"] < now or _holder_gone(row["claimed_by"])
    ):
        condition = Q(state=Replay.State.RUNNING, claim_token=row["claim_token"])
    else:
        return None  # ended, or held by a live worker
    if row["attempts"] >= settings.N17Q_REPLAY_MAX_ATTEMPTS:
        _interrupt(replay_id, condition, row)
        return None
    token = secrets.token_hex(16)
    claimed = (
        Replay.objects.filter(condition, pk=replay_id).update(
            state=Replay.State.RUNNING,
            claim_token=token,
            claimed_by=worker_identity(),
            lease_expires_at=_lease_until(),
            attempts=F("attempts") + 1,
            started_at=Coalesce(F("started_at"), Value(now)),
            progress_events=0,
        )
        == 1
    )
    return token if claimed else None


def _interrupt(replay_id: int, condition: Q, row: Mapping[str, Any]) -> bool:
    where = row["progress_checkpoint"] or "its first checkpoint"
    return (
        Replay.objects.filter(condition, pk=replay_id).update(
            state=Replay.State.INTERRUPTED,
            claim_token="",
            lease_expires_at=None,
            finished_at=timezone.now(),
            error=(
                f"interrupted at {where}: its worker was lost {row['attempts']} time(s) "
                f"(N17Q_REPLAY_MAX_ATTEMPTS={settings.N17Q_REPLAY_MAX_ATTEMPTS}); launch it again to retry"
            ),
        )
        == 1
    )


def replays_recover() -> dict[str, list[int]]:
    """The recovery pass (each worker at start and every N17Q_REPLAY_RECOVERY_S): nothing lost, nothing stuck.

    - running, but its lease expired or its process on this host is gone: back to queued and enqueued again
      (the engine is deterministic and the import all-or-nothing, so running it again from its first
      checkpoint gives the same run); after N17Q_REPLAY_MAX_ATTEMPTS claims, interrupted at its last
      checkpoint instead;
    - queued, but enqueued longer than N17Q_REPLAY_REQUEUE_S ago and never claimed (a message lost with a
      broker that restarted empty, a broker that could not be reached at launch): enqueued again. A duplicate
      message costs nothing: the claim lets one through.
    """
    now = timezone.now()
    requeued: list[int] = []
    interrupted: list[int] = []
    resent: list[int] = []
    running = Replay.objects.filter(state=Replay.State.RUNNING).values(
        "pk", "claim_token", "claimed_by", "lease_expires_at", "attempts", "progress_checkpoint"
    )
    for row in running:
        if not (row["lease_expires_at"] is None or row["lease_expires_at"] < now or _holder_gone(row["claimed_by"])):
            continue
        condition = Q(state=Replay.State.RUNNING, claim_token=row["claim_token"])
        if row["attempts"] >= settings.N17Q_REPLAY_MAX_ATTEMPTS:
            if _interrupt(row["pk"], condition, row):
                interrupted.append(row["pk"])
            continue
        back = Replay.objects.filter(condition, pk=row["pk"]).update(
            state=Replay.State.QUEUED, claim_token="", claimed_by="", lease_expires_at=None, progress_events=0
        )
        if back == 1:
            requeued.append(row["pk"])
    stale = now - timedelta(seconds=settings.N17Q_REPLAY_REQUEUE_S)
    forgotten = Replay.objects.filter(state=Replay.State.QUEUED).filter(
        Q(enqueued_at__lt=stale) | Q(enqueued_at__isnull=True, created_at__lt=stale)
    )
    resent = [pk for pk in forgotten.values_list("pk", flat=True) if pk not in requeued]
    for pk in requeued + resent:
        replay_enqueue(pk)
    if requeued or interrupted or resent:
        log.info("replay recovery: requeued %s, interrupted %s, sent again %s", requeued, interrupted, resent)
    return {"requeued": requeued, "interrupted": interrupted, "resent": resent}


class _Progress:
    """The sandbox's replay.progress lines, written to the replay row (and the lease renewed) at most every
    PROGRESS_WRITE_S, in the calling thread (the one holding the database connection)."""

    PROGRESS_WRITE_S = 0.2

    def __init__(self, replay_id: int, token: str) -> None:
        self.replay_id, self.token = replay_id, token
        self.last_write = 0.0
        self.lost = False
        self.pending: dict[str, Any] | None = None  # the latest line not yet written

    def renew(self, *, extra_s: float = 0, **fields: Any) -> None:
        updated = Replay.objects.filter(pk=self.replay_id, state=Replay.State.RUNNING, claim_token=self.token).update(
            lease_expires_at=_lease_until() + timedelta(seconds=extra_s), **fields
        )
        self.last_write = time.monotonic()
        self.lost = self.lost or updated != 1

    def __call__(self, event: dict[str, Any]) -> None:
        if event.get("event") != "replay.progress":
            return
        self.pending = event
        if time.monotonic() - self.last_write >= self.PROGRESS_WRITE_S or event.get("events", 0) <= 2:
            self.flush()

    def flush(self) -> None:
        """Write the latest line (the sandbox ended: the import may take a while, show where it got)."""
        event, self.pending = self.pending, None
        if event is None:
            return
        try:
            self.renew(
                progress_events=int(event.get("events") or 0),
                progress_logical=str(event.get("logical") or "")[:40],
                progress_checkpoint=str(event.get("checkpoint") or "")[:200],
            )
        except Exception:  # progress is for people watching; the replay goes on without it
            log.exception("replay %s: progress could not be recorded", self.replay_id)


# --- running ----------------------------------------------------------------------------------------------------


def replay_execute(replay_id: int) -> Replay:
    """Run one replay to its end (the Celery task's body). Idempotent; see the module docstring.

    Whoever does not hold the claim returns the replay as it is: a finished replay is never run again, and a
    replay another live worker holds is left to it.
    """
    token = replay_claim(replay_id)
    replay = Replay.objects.select_related("source_run", "scenario_version").get(pk=replay_id)
    if token is None:
        return replay
    try:
        return _execute_claimed(replay, token)
    except Exception as exc:  # never leave a claimed replay running: say what went wrong and end it
        log.exception("replay %s failed", replay_id)
        return _end(replay, token, Replay.State.FAILED, f"{type(exc).__name__}: {exc}")


def _execute_claimed(replay: Replay, token: str) -> Replay:
    progress = _Progress(replay.pk, token)
    try:
        package = _package(replay)
        replay.package_digest = package.digest
        progress.renew(package_digest=package.digest)
        if replay.mode == "counterfactual" and replay.decider.startswith("agent:"):
            result = _run_agent(replay, package, progress)
        else:
            result = run_sandboxed(
                ENTRY,
                package.to_wire(),
                allow_degraded=settings.N17Q_ALLOW_DEGRADED_ISOLATION,
                limits=Limits(memory_bytes=settings.N17Q_REPLAY_MEMORY_MB << 20),
                timeout_s=settings.N17Q_REPLAY_TIMEOUT_S,
                on_event=progress,
            )
    except IsolationUnavailable as exc:
        if replay.decider.startswith("agent:"):
            return _end(replay, token, Replay.State.REFUSED, f"{exc} (an agent replay never runs degraded)")
        return _end(
            replay, token, Replay.State.REFUSED, f"{exc} (set N17Q_ALLOW_DEGRADED_ISOLATION=1 to allow degraded runs)"
        )
    except (PackageError, ScenarioRefused, ReplayError, AgentError) as exc:
        return _end(replay, token, Replay.State.REFUSED, str(exc))
    except SandboxError as exc:
        return _end(replay, token, Replay.State.FAILED, str(exc))
    replay.isolation, replay.wall_s, replay.violations = result.isolation, result.wall_s, result.violations
    # An agent replay stopped for the agent's violations still ends normally: the engine stopped the run, wrote its
    # record (`stopped`, the `sandbox.violation` events) and exited 0. That record is the replay's result; only a
    # sandbox that did not finish (a timeout, a non-zero exit, no output) leaves none.
    recorded = result.returncode == 0 and not result.timed_out and bool(result.output)
    if not result.ok and not recorded:
        errors = [e.get("message", "") for e in result.events if e.get("event") == "sandbox.error"]
        why = (
            "timed out"
            if result.timed_out
            else f"stopped on {len(result.violations)} sandbox violation(s)"
            if result.violations
            else f"exited {result.returncode}: {'; '.join(errors) or result.stderr[-500:]}"
        )
        return _end(replay, token, Replay.State.FAILED, f"the sandbox {why}")
    progress.flush()
    # The import is one transaction and renews nothing while it runs: the lease is lengthened by the time a slow
    # import of a log this size could take (2 s a megabyte, about ten times slower than the import budget).
    progress.renew(extra_s=2 * len(result.output) / 1e6)
    if progress.lost:  # another worker took it over (our lease ran out): its run is the one that counts
        log.warning("replay %s: the claim was lost while the sandbox ran; leaving it to its holder", replay.pk)
        return Replay.objects.get(pk=replay.pk)
    try:
        run = _ingest(replay, result.output)
    except Exception as exc:  # the replay's log must import like any run; if not, say why and keep the record
        log.exception("replay %s: its log could not be imported", replay.pk)
        return _end(replay, token, Replay.State.FAILED, f"the replay's log could not be imported: {exc}")
    missing = list(
        Event.objects.filter(run=run, kind__in=("fixture.missing", "fixture.ambiguous"))
        .order_by("seq")
        .values_list("body", flat=True)
    )
    replay.run = run
    replay.missing = [{k: v for k, v in m.items() if k not in ("seq", "at", "attempt")} for m in missing]
    replay.progress_events = run.event_count
    replay.progress_logical = run.last_logical_at.strftime("%Y-%m-%dT%H:%M:%SZ") if run.last_logical_at else ""
    # The last checkpoint as the imported run holds it (the sandbox's progress lines are throttled, and a short
    # replay may end before one is written): a finished replay never says "no checkpoint" beside a run with some.
    last_checkpoint = (
        Event.objects.filter(run=run, kind="checkpoint").order_by("-seq").values_list("event_id", flat=True).first()
    )
    replay.progress_checkpoint = last_checkpoint or ""
    replay.evaluation = replay_evaluation_of(run)
    note = f"the run stopped on {len(result.violations)} sandbox violation(s)" if result.violations else ""
    return _end(replay, token, Replay.State.FINISHED, note)


def _run_agent(replay: Replay, package: Any, progress: Any) -> Any:
    """A registered agent as the decider (issue 18): its registration must still hold (its folder's digest), and it
    runs inside the kernel boundary only (`run_agent_replay` never runs degraded)."""
    from .agents import AgentRefused, agent_check, agent_spec

    try:
        agent = agent_check(replay.decider, replay.agent_version)  # the version it was launched with
    except AgentRefused as exc:
        raise AgentError(str(exc)) from None
    relay, connection = _relay_for(replay), ""
    if relay is not None:
        connection = relay.endpoint.netloc
    try:
        return run_agent_replay(
            package,
            agent_spec(agent),
            relay=relay,
            live_connection=connection,
            limits=Limits(
                cpu_s=settings.N17Q_REPLAY_TIMEOUT_S,
                memory_bytes=max(settings.N17Q_REPLAY_MEMORY_MB, 4096) << 20,
                open_files=256,
                processes=256,
            ),
            timeout_s=settings.N17Q_REPLAY_TIMEOUT_S,
            on_event=progress,
        )
    finally:
        if relay is not None:  # the replay's record says what the relay did, however the run ended: its durable count
            replay.model_calls, replay.model_calls_refused = Replay.objects.filter(pk=replay.pk).values_list(
                "model_calls", "model_calls_refused"
            )[0]


def _relay_for(replay: Replay) -> Any:
    """The live relay of a replay launched with a model connection (the worker alone resolves and holds the
    credential), or None. The connection must still be approved and name the endpoint and credential it named at
    launch: one retired since, or changed (and approved again) to reach elsewhere, is refused, never followed."""
    chosen = replay.model_connection
    if not chosen:
        return None
    from .relay import ModelRelay
    from .relay_count import ReplayCallCount

    try:
        endpoint = model_connection_resolve(str(chosen.get("connection") or ""))
    except ConnectionRefused as exc:
        raise AgentError(f"the live model connection: {exc}") from None
    if (endpoint.base_url, endpoint.credential) != (chosen.get("base_url"), chosen.get("credential_name")):
        raise AgentError(
            f"model connection {chosen['connection']} changed since this replay was launched: it now reaches "
            f"{endpoint.base_url}; launch again to use it"
        )
    # Counted in the replay's row, not this worker's memory: the cap holds across claims and concurrent workers.
    return ModelRelay(
        endpoint,
        max_calls=int(chosen.get("max_calls") or settings.N17Q_MODEL_RELAY_MAX_CALLS),
        count=ReplayCallCount(replay.pk),
    )


def _ingest(replay: Replay, output: bytes) -> Run:
    """Import the sandbox's log as the replay's child run, once.

    The run id is the replay's own (`run_id_for`), in a namespace no other import may use, and an import is
    all-or-nothing: a run already held under that id that this replay's worker made is this replay's complete log
    (written by an earlier delivery that died before it could record the end) and is taken as it is, never imported
    twice. A run under that id that this replay did not make is never adopted: the replay fails.
    """
    existing = _own_child(replay)
    if existing is not None:
        return existing
    parsed = ReplayOutput.from_wire(output)
    with tempfile.TemporaryDirectory(prefix="n17q-replay-") as tmp:
        try:
            return run_import_from_path(parsed.write_bundle(Path(tmp) / "bundle"), made_by_replay=replay.pk).run
        except BundleError:
            existing = _own_child(replay)
            if existing is not None:  # a concurrent delivery imported it first
                return existing
            raise


def _own_child(replay: Replay) -> Run | None:
    existing = Run.objects.filter(run_id=replay.run_id_for).first()
    if existing is not None and existing.made_by_replay != replay.pk:
        raise ReplayRefused(
            f"a run named {replay.run_id_for} exists that this replay did not make; it is not adopted as the "
            "replay's result"
        )
    return existing


def _package(replay: Replay) -> Any:
    manifest, events, blobs, expired = _source(replay.source_run)
    scenario = scenario_package(replay.scenario_version) if replay.scenario_version else None
    # The bodies its fixtures hold by digest, as the console holds them now (seed 001): those kept travel beside the
    # package, those the sweep removed are listed with their deletion records, and a lookup reaching one stops the
    # replay as incomplete_test_world. Never a stand-in, never a live call.
    bodies = scenario_bodies(replay.scenario_version) if replay.scenario_version else FixtureBodies()
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
        checkpoint=replay.checkpoint,
        expired_blobs=expired,
        fixture_bodies=bodies.bodies,
        expired_fixture_bodies=bodies.expired,
    )


def _end(replay: Replay, token: str, state: str, error: str) -> Replay:
    """Record the end, if this process still holds the claim (conditional on its token)."""
    fields = {
        "state": state,
        "error": error,
        "finished_at": timezone.now(),
        "claim_token": "",
        "lease_expires_at": None,
        "run": replay.run,
        "missing": replay.missing,
        "isolation": replay.isolation,
        "wall_s": replay.wall_s,
        "violations": replay.violations,
        "package_digest": replay.package_digest,
        "evaluation": replay.evaluation,
        "progress_events": replay.progress_events,
        "progress_logical": replay.progress_logical,
        "progress_checkpoint": replay.progress_checkpoint,
        # Not model_calls / model_calls_refused: the relay counts them in this row as each call is made
        # (replays.relay_count); a worker's copy written back here could undo another claim's calls.
    }
    held = Replay.objects.filter(pk=replay.pk, state=Replay.State.RUNNING, claim_token=token)
    if held.update(**fields) != 1:
        log.warning("replay %s: the claim was lost before its end could be recorded", replay.pk)
    return Replay.objects.select_related("source_run", "scenario_version", "run").get(pk=replay.pk)


def replay_evaluation_of(run: Run) -> dict[str, Any]:
    """The run's end state judged against the scenario its scope note declares (seed 003), from the events the
    evaluator reads (their (run, kind, seq) index), streamed: a run of any size is read once, in seq order."""
    events = (
        Event.objects.filter(run=run, kind__in=EVALUATED_KINDS)
        .order_by("seq")
        .values_list("body", flat=True)
        .iterator(chunk_size=2000)
    )
    return evaluate(events)


def replay_times(replay: Replay) -> dict[str, Any]:
    """Logical and execution time, apart (seed 001 "Time had to be controlled": "The report always showed logical and
    execution time separately"). Logical: the scenario time the replay's run spans, first event to last, from the
    run's own columns (no query: the run is selected with the replay). Execution: the wall time the launcher measured
    around the sandbox, and when the replay was queued, started and ended. Neither is derived from the other: a run
    that held a ten-minute wait shows ten minutes of logical time beside a fraction of a second of wall time."""
    run = replay.run
    logical = None
    if run is not None and run.first_logical_at is not None and run.last_logical_at is not None:
        elapsed = (run.last_logical_at - run.first_logical_at).total_seconds()
        logical = {
            "start": run.first_logical_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "end": run.last_logical_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "elapsed_s": elapsed,
            "elapsed": age_text(elapsed),
        }

    def moment(value: Any) -> str | None:
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ") if value is not None else None

    execution = {
        "sandbox_s": replay.wall_s,
        "sandbox": age_text(replay.wall_s) if replay.wall_s is not None else None,
        "queued_at": moment(replay.created_at),
        "started_at": moment(replay.started_at),
        "finished_at": moment(replay.finished_at),
    }
    return {"logical": logical, "execution": execution}


def replay_json(replay: Replay) -> dict[str, Any]:
    """The `replay --json` shape (DESIGN §8)."""
    run = replay.run
    # Bounded like the lineage answer (issue 20): the first LINEAGE_FINDINGS_IN_ANSWER stored findings, and counts;
    # the rest are paged by GET /api/v1/runs/{id}/findings/.
    findings = (
        [
            {"code": f.code, "severity": f.severity, "from": f.from_ref, "to": f.to_ref, "message": f.message}
            for f in Finding.objects.filter(run=run).order_by("id")[:LINEAGE_FINDINGS_IN_ANSWER]
        ]
        if run
        else []
    )
    count = run.finding_count if run else 0
    return {
        "replay": replay.pk,
        "run": run.run_id if run else None,
        "mode": replay.mode,
        "state": run.final_state if run else replay.state,
        "isolation": replay.isolation or None,
        "missing": replay.missing,
        "findings": findings,
        "finding_count": count,
        "findings_truncated": count > len(findings),
        "replay_state": replay.state,
        "scenario": replay.scenario_version.ref if replay.scenario_version else None,
        "vary": replay.vary,
        "error": replay.error or None,
        "wall_s": replay.wall_s,
        # Additive (seeds 003, 000): the end state judged against the scenario, and the lineage checks the run
        # could not judge (its declared scope among the reasons). null: no judgement was made for this replay.
        "evaluation": replay.evaluation or None,
        "unevaluated": run.unevaluated if run else [],
        "time": replay_times(replay),
    }
