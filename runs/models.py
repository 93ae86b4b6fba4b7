"""The run graph as stored: runs, their append-only events, typed edges, objects and findings.

A run is imported once and never edited (DESIGN §3: corrections are new events). The models refuse
updates and deletes of history themselves; on PostgreSQL a trigger installed by a migration refuses
them again at the database, so a raw SQL statement cannot slip past the ORM's guard either
(console/append_only.py). Replays live in `replays`, tokens and the audit log in `accounts`.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import models

from console import blob_store
from console.append_only import AppendOnlyModel, HistoryIsAppendOnly
from console.gated_fields import GatedCharField, GatedJSONField, GatedTextField


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
    # The manifest's `run.title`, stripped (DESIGN §10): the run's name wherever it is shown; "" names it by its id.
    title = GatedCharField(max_length=300, blank=True, default="")
    task_id = models.CharField(max_length=200)
    task_revision = GatedCharField(max_length=200)
    environment = models.CharField(max_length=20, choices=Environment.choices)
    mode = models.CharField(max_length=20, choices=Mode.choices)
    scenario_name = models.CharField(max_length=200, blank=True, default="")
    scenario_version = models.IntegerField(null=True, blank=True)
    model_name = GatedCharField(max_length=200)
    model_version = GatedCharField(max_length=200)
    policy_revision = GatedCharField(max_length=200)
    created_at = models.DateTimeField()
    parent_run_ref = models.CharField(max_length=200, blank=True, default="")
    parent = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="children")
    isolation = GatedCharField(max_length=20, blank=True, default="")
    manifest_run = GatedJSONField()
    bundle_digest = models.CharField(max_length=71)
    imported_at = models.DateTimeField(auto_now_add=True)
    imported_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    # The replay (its pk) whose worker imported this run as the replay's child run; null for every other import.
    made_by_replay = models.IntegerField(null=True, blank=True)
    # Summary written once at the end of the import transaction.
    event_count = models.IntegerField(default=0)
    # Events per kind, so that pane totals cost no scan of a large run.
    kind_counts = GatedJSONField(default=dict)
    finding_count = models.IntegerField(default=0)
    # The lineage checks that had nothing to judge (DESIGN §10): [{"code", "reason"[, "events"]}], written at import.
    unevaluated = GatedJSONField(default=list)
    # Secrets the scan found in the bundle and masked before storing it (MaskedSecret rows).
    masked_secret_count = models.IntegerField(default=0)
    error_count = models.IntegerField(default=0)
    final_state = GatedCharField(max_length=30, blank=True, default="")
    first_logical_at = models.DateTimeField(null=True)
    last_logical_at = models.DateTimeField(null=True)
    # What the run list searches besides ids and the title, collected while the import streams the events (no
    # second pass, no query per listed run): the tools of its `tool.call` events and the destinations of its
    # `effect.intent` events, distinct, sorted, one per line, at most SEARCH_VALUES_MAX of each.
    tools = GatedTextField(blank=True, default="")
    destinations = GatedTextField(blank=True, default="")
    # The run's facts (issue 34, n17q_engine/facts.py: effects, validations, workspaces, approvals, outcome), computed
    # once as the import streams the events and read by every page; null for a run stored before they existed, whose
    # facts are computed on first read and saved (runs/facts.py).
    facts = GatedJSONField(null=True, blank=True, default=None)

    class Meta:
        ordering = ["-imported_at", "-id"]
        permissions = [
            ("import_run", "Can import run bundles"),
            ("launch_replay", "Can launch replays"),
            # Issue 38: scores, labels, comments and corrections, appended as events (runs/annotations.py).
            ("annotate_run", "Can annotate runs and correct recorded facts"),
        ]
        indexes = [
            models.Index(fields=["environment", "mode"]),
            models.Index(fields=["scenario_name", "scenario_version"]),
            models.Index(fields=["final_state"]),
            # The run list's order (runs.selectors.run_list).
            models.Index(fields=["-created_at", "-imported_at", "-id"], name="run_list_order"),
        ]

    def __str__(self) -> str:
        return self.run_id

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise HistoryIsAppendOnly(f"run {self.run_id} is history and cannot be deleted")

    @property
    def fresh_comparison(self) -> bool:
        """Whether an agent's model answered live in this run (issue 33's relay: the manifest's model names
        `source: live:<host:port>`): a fresh comparison run, not reproducible (issue 34)."""
        model = (self.manifest_run or {}).get("model") if isinstance(self.manifest_run, dict) else None
        return isinstance(model, dict) and str(model.get("source") or "").startswith("live:")


class RunImport(models.Model):
    """An import writing its run in slices, not yet published (runs/import_slices.py; SQLite only).

    The rows it has written so far name `run_key`, the primary key reserved for its run, whose Run row is written
    last: until then no page, answer or count shows any of them. The record is how a second import of the same run
    id knows to wait for this one, and how a crashed import's rows are found and removed (its heartbeat goes stale,
    or its process is gone). Not history: the record is deleted when the run is published or its rows removed.
    """

    run_id = models.CharField(max_length=200, unique=True)
    run_key = models.BigIntegerField(unique=True)
    # "hostname:pid" of the importing process, and a token only that import knows: each of its write transactions
    # checks the token first, so an import whose record was taken over (presumed crashed) writes nothing more.
    holder = models.CharField(max_length=300)
    token = models.CharField(max_length=64)
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    # The blob files the import writes to the store (their storage names), recorded before it writes them: removed
    # with its rows, unless a Blob row names them by then (another run or a recording holds the same bytes).
    blob_files = models.JSONField(default=list)

    def __str__(self) -> str:
        return f"import of {self.run_id} by {self.holder}"


# Distinct values kept per searched field of a run (Run.tools, Run.destinations), each cut to SEARCH_VALUE_CHARS: a run
# with more than that is found by its first ones, and the import's memory and the row stay bounded.
SEARCH_VALUES_MAX = 200
SEARCH_VALUE_CHARS = 200


class Blob(models.Model):
    """A content-addressed blob in the blob store. Shared between runs that hold the same bytes.

    Retention (runs/retention.py, docs/retention.md) is per holder (`RunBlobHold`, a recording's class): these
    columns are the holds' sum for the sweep, the live hold that keeps the bytes longest; `expires_at` null means
    kept indefinitely. Once the sweep removed the bytes, `bytes_removed_at` says when and a `BlobDeletion` says who,
    what and why; the row (and its digest) stays, because history names it. A later holder recording the same bytes
    brings them back as a new hold of its own (`bytes_removed_at` null again, its own class and clock); the holds the
    removal ended stay ended.
    """

    digest = models.CharField(max_length=71, unique=True)
    size = models.BigIntegerField()
    stored_at = models.DateTimeField(auto_now_add=True)
    retention_class = GatedCharField(max_length=100, blank=True, default="")
    sensitivity = models.CharField(max_length=20, blank=True, default="")
    expires_at = models.DateTimeField(null=True, blank=True)
    bytes_removed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        # The sweep's question: which blobs still hold bytes past their expiry.
        indexes = [
            models.Index(
                fields=["expires_at"], condition=models.Q(bytes_removed_at__isnull=True), name="blob_due_for_expiry"
            )
        ]

    def __str__(self) -> str:
        return self.digest

    @property
    def storage_name(self) -> str:
        return blob_storage_name(self.digest)


blob_storage_name = blob_store.blob_storage_name  # where the one blob-store writer (console.blob_store) keeps a digest


class RunBlob(AppendOnlyModel):
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="blobs")
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="+")
    media_type = GatedCharField(max_length=200)
    role = GatedCharField(max_length=200)
    retention = GatedCharField(max_length=100)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["run", "blob"], name="runblob_unique")]

    def __str__(self) -> str:
        return f"{self.blob_id} in run {self.run_id}"

    @property
    def bytes_removed(self) -> bool:
        """Whether the retention sweep removed this run's bytes: this run's hold, not the blob's (a later run storing
        the same bytes again does not bring them back for this one)."""
        try:
            return self.hold.removed_by_id is not None
        except RunBlobHold.DoesNotExist:  # a row written before holds were per holder and not migrated
            return self.blob.bytes_removed_at is not None


class RunBlobHold(models.Model):
    """A run's hold on the bytes of one of its blobs (docs/retention.md): the class it is kept under, when that runs
    out, and the deletion record that ended it.

    Per holder: a deletion record stays true for every run whose hold it ended, whatever later runs store; bytes
    recorded again are a new hold with its own class and clock. A run a replay made holds what it read from the run
    it replays under that run's hold (class, expiry, removal): a read never extends a clock. Written once at import;
    `removed_by` is set once, by the sweep's removal (runs.retention.blob_expire), and never cleared.
    """

    run_blob = models.OneToOneField(RunBlob, on_delete=models.PROTECT, related_name="hold")
    # The run_blob's blob, again: the sweep ends a blob's live holds in one UPDATE without a join.
    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="run_holds")
    retention_class = GatedCharField(max_length=100)
    expires_at = models.DateTimeField(null=True, blank=True)  # null: kept indefinitely (or the class is undeclared)
    removed_by = models.ForeignKey(
        "BlobDeletion", null=True, blank=True, on_delete=models.PROTECT, related_name="ended_holds"
    )

    class Meta:
        # The sweep's second question: which live holds ran out while a longer hold keeps their bytes.
        indexes = [
            models.Index(
                fields=["expires_at"], condition=models.Q(removed_by__isnull=True), name="runblobhold_due_to_end"
            )
        ]

    def __str__(self) -> str:
        return f"hold of {self.run_blob}"


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
    body = GatedJSONField()

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

    # The references are checked set-wise once per import instead of by foreign-key constraints row by row
    # (runs/importer.py `_verify_edges`; docs/decisions.md "Edges without row-wise foreign keys"): at 100,000
    # events the constraints' per-row checks were a third of a PostgreSQL import. The ORM relations stay.
    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="edges", db_index=False, db_constraint=False)
    source = models.ForeignKey(Event, on_delete=models.PROTECT, related_name="edges_out", db_constraint=False)
    field = models.CharField(max_length=300)
    target_ref = models.CharField(max_length=200)
    target_event = models.ForeignKey(
        Event, null=True, on_delete=models.PROTECT, related_name="edges_in", db_constraint=False
    )
    # Read through the edge, never searched by: no index (see Event.run).
    target_object = models.ForeignKey(
        RunObject, null=True, on_delete=models.PROTECT, related_name="edges_in", db_index=False, db_constraint=False
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


class MaskedSecret(AppendOnlyModel):
    """A secret the scan found in a run bundle on import and masked before anything was stored (runs.secret_scan):
    where it was, which rule found it, a masked preview; never the value."""

    class Place(models.TextChoices):
        MANIFEST = "manifest", "the manifest's run"
        EVENT = "event", "an event"
        BLOB = "blob", "a blob"
        # Masked before the run was made: the OTLP receiver masks each request on arrival (otlp_receiver).
        RECEIVED = "received", "the spans as received"

    run = models.ForeignKey(Run, on_delete=models.PROTECT, related_name="masked_secrets")
    place = models.CharField(max_length=10, choices=Place.choices)
    event = models.ForeignKey(Event, null=True, on_delete=models.PROTECT, related_name="+")
    event_ref = models.CharField(max_length=200, blank=True)
    blob_digest = models.CharField(max_length=71, blank=True)  # the digest the masked bytes are stored under
    # HMAC (server key) of the digest the harness recorded for the blob: identity without an oracle.
    recorded_as = models.CharField(max_length=69, blank=True)
    path = GatedCharField(max_length=500)
    rule = models.CharField(max_length=100)
    preview = GatedCharField(max_length=100)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["run", "id"])]

    def __str__(self) -> str:
        return f"{self.rule} at {self.path}"


class BlobDeletion(AppendOnlyModel):
    """The record the retention sweep leaves when it removes a blob's bytes: which digest, under which class and
    sensitivity, when it was due and when it went, who removed it, why, and what held it. Append-only: the only
    trace that the bytes ever existed past their digest.

    Per holder (issue 33): when some holds of a blob run out while a longer hold keeps its bytes, the sweep ends
    those holds with a record of their own (`bytes_removed` false, `holders` the holders it ended): for them the
    bytes are gone, and stay gone, exactly as if the store had dropped them."""

    blob = models.ForeignKey(Blob, on_delete=models.PROTECT, related_name="deletions")
    digest = models.CharField(max_length=71)
    size = models.BigIntegerField()
    retention_class = GatedCharField(max_length=100)
    sensitivity = models.CharField(max_length=20, blank=True, default="")
    expired_at = models.DateTimeField()  # when the class's period ran out
    removed_at = models.DateTimeField()
    removed_by = GatedCharField(max_length=200)  # "retention sweep (worker)", "retention sweep (cli …)"
    reason = GatedTextField()
    # What held the bytes when they went, as the pages name them: ["run run-001", "recording sr-…"] (bounded).
    holders = GatedJSONField(default=list)
    # False: only `holders`' holds ended here, the bytes stay in the store for the holds still live.
    bytes_removed = models.BooleanField(default=True)

    class Meta:
        ordering = ["id"]
        indexes = [models.Index(fields=["digest"])]

    def __str__(self) -> str:
        return f"{self.digest} removed {self.removed_at:%Y-%m-%d}"


class RunSummary(models.Model):
    """What the cross-run search reads of a run (issue 38 §3; runs/summary.py, docs/facts.md "Search over runs"):
    one row per run, written with the run at import (a run stored before it gets it from migration 0022 or
    `manage.py run_summaries`), so the run list's filters and the span search read no events.

    `tools`, `model_names` and `codes` hold their values one per line with a newline before and after each, so a filter
    matches a whole value (`contains "\\ncode\\n"`). `text` is what the text search reads, lower-cased: the run's id,
    title and task, its tools, destinations, models, finding codes and finding messages, at most TEXT_CHARS.
    Token counts and `cost` are null when not known (never 0): a cost filter never matches such a run."""

    class Kind(models.TextChoices):
        RECORDED = "recorded"
        REPLAY = "replay"
        IMPORTED = "imported"  # converted from an OpenTelemetry trace or an Inspect log

    class Outcome(models.TextChoices):
        CLEAN = "clean", "no findings"
        WARNINGS = "warnings", "warnings only"
        ERRORS = "errors", "errors"

    run = models.OneToOneField(Run, primary_key=True, on_delete=models.PROTECT, related_name="summary")
    created_at = models.DateTimeField()  # the run's, again: the search's order without a join
    started_at = models.DateTimeField(null=True, blank=True)  # the first event's wall time
    kind = models.CharField(max_length=10, choices=Kind.choices)
    outcome = models.CharField(max_length=10, choices=Outcome.choices)
    final_state = GatedCharField(max_length=30, blank=True, default="")
    scenario = models.CharField(max_length=200, blank=True, default="")
    tools = GatedTextField(blank=True, default="")
    model_names = GatedTextField(blank=True, default="")
    codes = models.CharField(max_length=400, blank=True, default="")
    model_calls = models.IntegerField(default=0)
    tokens = models.BigIntegerField(null=True, blank=True)
    tokens_in = models.BigIntegerField(null=True, blank=True)
    tokens_out = models.BigIntegerField(null=True, blank=True)
    cost = models.DecimalField(max_digits=20, decimal_places=6, null=True, blank=True)
    currency = GatedCharField(max_length=10, blank=True, default="")
    # Tokens per model ({model: {calls, charges, tokens, tokens_in, tokens_out}}): what `cost` was priced from.
    usage = GatedJSONField(default=dict)
    text = GatedTextField(blank=True, default="")

    class Meta:
        indexes = [
            models.Index(fields=["-created_at", "-run"], name="runsummary_order"),
            models.Index(fields=["kind", "-created_at"], name="runsummary_kind"),
            models.Index(fields=["outcome", "-created_at"], name="runsummary_outcome"),
            models.Index(fields=["final_state", "-created_at"], name="runsummary_state"),
            models.Index(fields=["-started_at"], name="runsummary_started"),
            models.Index(fields=["tokens"], name="runsummary_tokens"),
            models.Index(fields=["cost"], name="runsummary_cost"),
        ]

    def __str__(self) -> str:
        return f"summary of run {self.run_id}"

    @property
    def model_list(self) -> list[str]:
        return [m for m in self.model_names.split("\n") if m]

    @property
    def tool_list(self) -> list[str]:
        return [t for t in self.tools.split("\n") if t]

    @property
    def code_list(self) -> list[str]:
        return [c for c in self.codes.split("\n") if c]
