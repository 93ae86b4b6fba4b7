"""The run graph as stored: runs, their append-only events, typed edges, objects and findings.

A run is imported once and never edited (DESIGN §3: corrections are new events). The models refuse
updates and deletes of history themselves; on PostgreSQL a trigger installed by a migration refuses
them again at the database, so a raw SQL statement cannot slip past the ORM's guard either.
"""

from __future__ import annotations

import hashlib
import secrets
from typing import Any

from django.conf import settings
from django.db import models


class HistoryIsAppendOnly(Exception):
    """An attempt to update or delete an event, edge, object or finding of an imported run."""


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs: Any) -> int:
        raise HistoryIsAppendOnly(f"{self.model.__name__} rows are append-only; record a correction as a new event")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise HistoryIsAppendOnly(f"{self.model.__name__} rows are append-only; history is never deleted")


class AppendOnlyModel(models.Model):
    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise HistoryIsAppendOnly(f"{type(self).__name__} {self.pk} is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise HistoryIsAppendOnly(f"{type(self).__name__} {self.pk} is append-only")


class Environment(models.TextChoices):
    LIVE = "live"
    FIXTURE = "fixture"
    SANDBOX = "sandbox"
    EFFECT_CAPABLE = "effect-capable"


class Mode(models.TextChoices):
    RECORDED = "recorded"
    RECONSTRUCTION = "reconstruction"
    RERUN = "rerun"
    COUNTERFACTUAL = "counterfactual"
    REGRESSION = "regression"


class Run(models.Model):
    """One imported run. Its identity and environment are fixed at import; only its summary is derived."""

    run_id = models.CharField(max_length=200, unique=True)
    task_id = models.CharField(max_length=200)
    task_revision = models.CharField(max_length=200)
    environment = models.CharField(max_length=20, choices=Environment.choices)
    mode = models.CharField(max_length=20, choices=Mode.choices)
    scenario_name = models.CharField(max_length=200, blank=True, default="")
    scenario_version = models.IntegerField(null=True, blank=True)
    model_name = models.CharField(max_length=200)
    model_version = models.CharField(max_length=200)
    policy_revision = models.CharField(max_length=200)
    created_at = models.DateTimeField()
    parent_run_ref = models.CharField(max_length=200, blank=True, default="")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    isolation = models.CharField(max_length=20, blank=True, default="")
    manifest_run = models.JSONField()
    bundle_digest = models.CharField(max_length=71)
    imported_at = models.DateTimeField(auto_now_add=True)
    imported_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    # Summary written once at the end of the import transaction.
    event_count = models.IntegerField(default=0)
    # Events per kind, so that pane totals cost no scan of a large run.
    kind_counts = models.JSONField(default=dict)
    finding_count = models.IntegerField(default=0)
    error_count = models.IntegerField(default=0)
    final_state = models.CharField(max_length=30, blank=True, default="")
    first_logical_at = models.DateTimeField(null=True)
    last_logical_at = models.DateTimeField(null=True)

    class Meta:
        ordering = ["-imported_at", "-id"]
        permissions = [
            ("import_run", "Can import run bundles"),
            ("launch_replay", "Can launch replays"),
        ]
        indexes = [
            models.Index(fields=["environment", "mode"]),
            models.Index(fields=["scenario_name", "scenario_version"]),
            models.Index(fields=["final_state"]),
        ]

    def __str__(self) -> str:
        return self.run_id

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise HistoryIsAppendOnly(f"run {self.run_id} is history and cannot be deleted")


class Blob(models.Model):
    """A content-addressed blob in the blob store. Shared between runs that hold the same bytes."""

    digest = models.CharField(max_length=71, unique=True)
    size = models.BigIntegerField()
    stored_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.digest

    @property
    def storage_name(self) -> str:
        return blob_storage_name(self.digest)


def blob_storage_name(digest: str) -> str:
    return "sha256/" + digest.removeprefix("sha256:")


class RunBlob(AppendOnlyModel):
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="blobs")
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="+")
    media_type = models.CharField(max_length=200)
    role = models.CharField(max_length=200)
    retention = models.CharField(max_length=100)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "blob"], name="runblob_unique")]

    def __str__(self) -> str:
        return f"{self.blob_id} in run {self.run_id}"


class Event(AppendOnlyModel):
    # No index of its own on run: (run, seq) and (run, event_id) lead with it. Every index costs the
    # importer a B-tree insert per event, so only those the pages query are kept.
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="events", db_index=False)
    seq = models.BigIntegerField()
    event_id = models.CharField(max_length=200)
    kind = models.CharField(max_length=40)
    attempt_ref = models.CharField(max_length=200, blank=True, default="")
    workspace_ref = models.CharField(max_length=200, blank=True, default="")
    logical_at = models.DateTimeField()
    wall_at = models.DateTimeField()
    # The event exactly as the bundle held it (all fields, extensions included).
    body = models.JSONField()

    class Meta:
        # No default ordering: ordering by the run would join runs_run and make SQLite walk a whole
        # run's (run, seq) index to satisfy it. Every read that needs an order says so.
        constraints = [
            models.UniqueConstraint(fields=["run", "seq"], name="event_run_seq_unique"),
            models.UniqueConstraint(fields=["run", "event_id"], name="event_run_id_unique"),
        ]
        indexes = [models.Index(fields=["run", "kind", "seq"])]

    def __str__(self) -> str:
        return f"{self.event_id} ({self.kind})"


class RunObject(AppendOnlyModel):
    """An attempt, workspace or artifact: the three kinds of object with an id of their own."""

    class Kind(models.TextChoices):
        ATTEMPT = "attempt"
        WORKSPACE = "workspace"
        ARTIFACT = "artifact"

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="run_objects")
    kind = models.CharField(max_length=20, choices=Kind.choices)
    ref = models.CharField(max_length=200)
    introduced_by = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="+")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "ref"], name="runobject_run_ref_unique")]
        indexes = [models.Index(fields=["run", "kind"])]

    def __str__(self) -> str:
        return f"{self.kind} {self.ref}"


class Edge(AppendOnlyModel):
    """A reference from one event to an event or object of the same run, at a named field.

    `target_event` is the event the reference resolves to: the target itself, or for an object id the
    event that introduced the object. Both are null for a dangling reference (LIN011), which is kept:
    investigating those is the console's job.
    """

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="edges", db_index=False)
    source = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="edges_out")
    field = models.CharField(max_length=300)
    target_ref = models.CharField(max_length=200)
    target_event = models.ForeignKey(Event, null=True, on_delete=models.PROTECT, related_name="edges_in")
    # Read through the edge, never searched by: no index (see Event.run).
    target_object = models.ForeignKey(
        RunObject, null=True, on_delete=models.PROTECT, related_name="edges_in", db_index=False
    )

    # Queried from either end (edges_out, edges_in); not by target_ref, so that has no index (see Event.run).

    def __str__(self) -> str:
        return f"{self.source_id}.{self.field} -> {self.target_ref}"

    @property
    def is_dangling(self) -> bool:
        return self.target_event_id is None


class Finding(AppendOnlyModel):
    """A lineage finding recorded when the run was imported (the checker can be re-run at any time)."""

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="findings")
    code = models.CharField(max_length=10)
    severity = models.CharField(max_length=10)
    from_ref = models.CharField(max_length=200)
    to_ref = models.CharField(max_length=200)
    from_event = models.ForeignKey(Event, null=True, on_delete=models.PROTECT, related_name="+")
    to_event = models.ForeignKey(Event, null=True, on_delete=models.PROTECT, related_name="+")
    message = models.TextField()

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["run", "code"])]

    def __str__(self) -> str:
        return f"{self.code} {self.from_ref} -> {self.to_ref}"


class HarnessToken(models.Model):
    """A scoped API token for a harness. Only its SHA-256 is stored; the key is shown once."""

    class Scope(models.TextChoices):
        IMPORT_RUNS = "runs:import"
        CAPTURE = "captures:create"

    name = models.CharField(max_length=200)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="harness_tokens")
    key_digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def digest_key(key: str) -> str:
        return hashlib.sha256(key.encode("utf-8")).hexdigest()

    @staticmethod
    def new_key() -> str:
        return "n17q_" + secrets.token_urlsafe(32)


class Replay(models.Model):
    """One launch of a replay: what was asked, and (once run) the child run it produced.

    Operational state, not history: `state` moves queued -> running -> finished | refused | failed | interrupted
    (a running replay whose worker died goes back to queued, or to interrupted after too many lost workers;
    see `runs/replays.py`). The run it produced is imported like any other and is append-only.

    `environment` is the pre-launch summary (model, policy revision, workspaces, fixture completeness, clock,
    isolation) computed once, at creation, from the source run and the pinned scenario version; nothing the
    replay does can write it.
    """

    class State(models.TextChoices):
        QUEUED = "queued"
        RUNNING = "running"
        FINISHED = "finished"
        REFUSED = "refused"
        FAILED = "failed"
        INTERRUPTED = "interrupted"

    ENDED = (State.FINISHED, State.REFUSED, State.FAILED, State.INTERRUPTED)

    source_run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="replays")
    mode = models.CharField(max_length=20, choices=Mode.choices)
    vary = models.JSONField(default=dict)
    decider = models.CharField(max_length=50, default="recorded")
    # The checkpoint the replay starts from: "start" (the run's initial checkpoint) is the one the engine
    # branches at today; see docs/decisions.md.
    checkpoint = models.CharField(max_length=200, default="start")
    scenario_version = models.ForeignKey(
        "fixtures_review.ScenarioVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="replays"
    )
    environment = models.JSONField(default=dict)
    state = models.CharField(max_length=20, choices=State.choices, default=State.QUEUED)
    run = models.OneToOneField(Run, null=True, blank=True, on_delete=models.PROTECT, related_name="replay_of")
    isolation = models.CharField(max_length=20, blank=True, default="")
    package_digest = models.CharField(max_length=71, blank=True, default="")
    missing = models.JSONField(default=list)
    violations = models.JSONField(default=list)
    error = models.TextField(blank=True, default="")
    wall_s = models.FloatField(null=True, blank=True)  # measured by the launcher, outside the event log
    created_at = models.DateTimeField(auto_now_add=True)
    enqueued_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    # The claim: one worker at a time holds a replay, for a lease it renews while the sandbox runs.
    claim_token = models.CharField(max_length=32, blank=True, default="")
    claimed_by = models.CharField(max_length=300, blank=True, default="")  # host:pid of the process running it
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)  # claims so far (1 unless a worker died)
    # Progress while it runs (the sandbox's replay.progress lines), shown live on the replay page.
    progress_events = models.PositiveIntegerField(default=0)
    progress_logical = models.CharField(max_length=40, blank=True, default="")
    progress_checkpoint = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["state", "lease_expires_at"])]

    def __str__(self) -> str:
        return f"replay {self.pk} of {self.source_run.run_id} ({self.mode})"

    @property
    def run_id_for(self) -> str:
        """The id the replay's run gets: the source's id, the mode and this replay's number."""
        return f"{self.source_run.run_id}~{self.mode}-{self.pk}"

    @property
    def ended(self) -> bool:
        return self.state in self.ENDED


class AuditEntry(AppendOnlyModel):
    """One thing a person, a harness or the console did that someone may later have to account for.

    Written by `runs.audit.audit_record` only. Append-only like history (the model refuses, and on
    PostgreSQL a trigger refuses again). The actor is kept as text as well as by id: an entry must still
    say who acted after the account is renamed or removed, so there is no foreign key to cascade or null.
    """

    at = models.DateTimeField(db_index=True)
    actor = models.CharField(max_length=150, blank=True, default="")  # username; "" for nobody signed in
    actor_user_id = models.BigIntegerField(null=True, blank=True)
    # How the action arrived: "web" (a session), "token <prefix>" (a harness), "cli <os user>", "worker", "system".
    via = models.CharField(max_length=60)
    action = models.CharField(max_length=60, db_index=True)
    target = models.CharField(max_length=300, blank=True, default="")
    detail = models.JSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["actor", "at"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor or '-'} {self.action} {self.target}"


class WorkerHeartbeat(models.Model):
    """The last sign of life of one Celery worker (one row per worker name), written every few seconds by the
    worker itself (runs/heartbeat.py) and read by the health endpoint. Operational state, not history."""

    hostname = models.CharField(max_length=200, unique=True)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.hostname
