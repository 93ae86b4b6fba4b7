"""Replays: what an operator launched against a recorded run, and the workers that run them.

The tables keep the names they had when these models lived in `runs` (runs_replay, runs_workerheartbeat):
the move changed where the code is, not the data (replays/migrations/0001_initial.py).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from console.gated_fields import GatedCharField, GatedJSONField, GatedTextField
from runs.models import Mode, Run


class Replay(models.Model):
    """One launch of a replay: what was asked, and (once run) the child run it produced.

    Operational state, not history: `state` moves queued -> running -> finished | refused | failed | interrupted
    (a running replay whose worker died goes back to queued, or to interrupted after too many lost workers;
    see `replays/services.py`). The run it produced is imported like any other and is append-only.

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
    vary = GatedJSONField(default=dict)
    decider = GatedCharField(max_length=50, default="recorded")
    # The checkpoint the replay starts from: "start" (the run's start) or the id of one of the source run's
    # `checkpoint` events (issue 18: the history before it is re-run as recorded); see docs/decisions.md.
    checkpoint = GatedCharField(max_length=200, default="start")
    scenario_version = models.ForeignKey(
        "fixtures_review.ScenarioVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="replays"
    )
    environment = GatedJSONField(default=dict)
    state = models.CharField(max_length=20, choices=State.choices, default=State.QUEUED)
    run = models.OneToOneField(Run, null=True, blank=True, on_delete=models.PROTECT, related_name="replay_of")
    isolation = GatedCharField(max_length=20, blank=True, default="")
    package_digest = models.CharField(max_length=71, blank=True, default="")
    missing = GatedJSONField(default=list)
    violations = GatedJSONField(default=list)
    error = GatedTextField(blank=True, default="")
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
    progress_checkpoint = GatedCharField(max_length=200, blank=True, default="")
    # An agent decider's registration version, as launched (issue 36): the worker runs that version, and the replay's
    # page says which ran, after `register_agent --replace` made a newer one. Null: not an agent decider.
    agent_version = models.PositiveIntegerField(null=True, blank=True)
    # An agent decider's live model connection (issues 18, 33): the approved model connection chosen at launch, as it
    # was then: {"connection", "base_url", "credential_name", "max_calls"}; empty: model fixtures. The credential's
    # NAME only: the worker resolves its value from its own environment, nothing stores it.
    model_connection = GatedJSONField(default=dict, blank=True)
    # What the relay did (issue 33): the calls it sent to the endpoint, and those the per-replay cap refused.
    model_calls = models.PositiveIntegerField(default=0)
    model_calls_refused = models.PositiveIntegerField(default=0)
    # Its end state judged against the scenario's declaration (seed 003; n17q_engine.scenario_evaluation), computed
    # once from the imported run's events when the replay ends. Empty: it ended before the judgement existed, or
    # produced no run.
    evaluation = GatedJSONField(default=dict, blank=True)

    class Meta:
        db_table = "runs_replay"
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

    @property
    def model_relay_record(self) -> dict[str, object] | None:
        """What the live relay did for this replay (issue 33), or None when it had no model connection: the calls
        sent, the calls the per-replay cap refused, the cap, and whether the cap stopped it."""
        if not self.model_connection:
            return None
        return {
            "connection": self.model_connection.get("connection"),
            "calls": self.model_calls,
            "refused_by_cap": self.model_calls_refused,
            "cap": self.model_connection.get("max_calls"),
            "stopped_by_cap": self.model_calls_refused > 0,
        }


class WorkerHeartbeat(models.Model):
    """The last sign of life of one Celery worker (one row per worker name), written every few seconds by the
    worker itself (replays/heartbeat.py) and read by the health endpoint. Operational state, not history."""

    hostname = models.CharField(max_length=200, unique=True)
    pid = models.IntegerField()
    started_at = models.DateTimeField()
    last_seen_at = models.DateTimeField()
    stopped_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "runs_workerheartbeat"

    def __str__(self) -> str:
        return self.hostname


class RegisteredAgent(models.Model):
    """An agent program an admin registered as a replay decider (`agent:<name>`, issue 18; docs/agents.md).

    The folder is on the worker's disk; `digest` pins its files at registration (`folder_digest`): a folder that
    changed since is offered disabled and refused at launch. An agent shipped as a wheel is copied into the data
    folder (`folder` holds only the wheel; `digest` is the wheel's sha256) and installed into its own environment.
    `environment` is the agent's own Python environment, built read-only from `requirements` (or the wheel) in the
    data folder and pinned by `environment_digest` (empty: the worker's own environment). A registration is not
    edited: `register_agent NAME ... --replace` makes a new version (issue 36); the old one stays, so a replay keeps
    the version it ran (`Replay.agent_version`), and the decider `agent:<name>` means the newest version.
    """

    name = GatedCharField(max_length=40)  # the decider is `agent:<name>` (Replay.decider: 50 chars)
    version = models.PositiveIntegerField(default=1)  # 1, then one more for each `--replace`
    folder = GatedCharField(max_length=1000)
    command = GatedJSONField()  # argv: ["python", "agent.py"], an absolute path, or a path inside the folder
    digest = models.CharField(max_length=71)
    requirements = GatedTextField(blank=True, default="")
    requirements_digest = models.CharField(max_length=71, blank=True, default="")
    environment = GatedCharField(max_length=1000, blank=True, default="")
    installed = GatedJSONField(default=list)  # `name==version` of each distribution, read from its METADATA
    # An agent shipped as a wheel: its file name (a copy of it is `folder`'s only file; `digest` is its sha256).
    wheel = GatedCharField(max_length=300, blank=True, default="")
    environment_digest = models.CharField(max_length=71, blank=True, default="")  # the built environment, pinned
    registered_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    registered_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name", "-version"]
        constraints = [models.UniqueConstraint(fields=["name", "version"], name="registered_agent_name_version")]

    def __str__(self) -> str:
        return f"agent:{self.name} v{self.version}"

    @property
    def decider(self) -> str:
        return f"agent:{self.name}"
