"""Captures, review decisions, fixture and scenario versions (DESIGN §7).

Staged recordings (what intake kept of a capture), their append-only review events, immutable
content-addressed fixture versions, and immutable scenario versions. A version is a digest-verified scenario package
(`n17q_engine.package`, `n17q.scenario-package/1`), stored whole: its manifest and every file's bytes.
Replays are pinned to one version; a new version is a new row, never an edit.
"""

from __future__ import annotations

import secrets
from typing import Any

from django.conf import settings
from django.db import models

from console.append_only import AppendOnlyModel
from console.gated_fields import GatedCharField, GatedJSONField, GatedTextField
from n17q_engine import canonical


class ScenarioVersion(AppendOnlyModel):
    name = models.CharField(max_length=100)
    version = models.PositiveIntegerField()
    digest = models.CharField(max_length=71, unique=True)  # the package manifest's digest
    manifest = GatedJSONField()
    # file name -> the file's text (package files are canonical UTF-8 JSON)
    files = GatedJSONField()
    source = GatedCharField(max_length=20, default="import")  # import | demo | promotion
    imported_at = models.DateTimeField(auto_now_add=True)
    # PROTECT, not SET_NULL: who did it is part of append-only history; deactivate a person's account instead.
    imported_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    # A minted version names the version it was built from (promotion, copy similar, a regression scenario).
    based_on = models.ForeignKey("self", null=True, blank=True, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["name", "-version"]
        constraints = [models.UniqueConstraint(fields=["name", "version"], name="scenario_version_unique")]

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def scenario_json(self) -> dict:
        import json

        return json.loads(self.files["scenario.json"])

    @property
    def fixture_items(self) -> list[dict]:
        import json

        return json.loads(self.files["fixtures.json"])


def _public_id() -> str:
    return "sr-" + secrets.token_hex(6)


class StagedRecording(models.Model):
    """A captured (or copied) tool response waiting for review: never a fixture, never used by a replay.

    Only redacted, scanned and masked content is ever written here (fixtures_review.intake). The row is the
    recording's working state: reviewers' redactions and syntheses change its content (each one a
    `ReviewEvent`, which is the history) and bump `revision`, so an approval names the revision it read.
    """

    class State(models.TextChoices):
        STAGED = "staged"
        REJECTED = "rejected"
        PROMOTED = "promoted"

    class Origin(models.TextChoices):
        CAPTURE = "capture"
        COPY_SIMILAR = "copy-similar"
        COPY_RECORDED = "copy-recorded"  # the answer a run recorded for the request, through the same intake
        RUN_RESULT = "run-result"  # a tool result of an imported run ("the trace is the recording"), same intake
        # A fixture a contract migration changed in a way that carries meaning: a person decides (contract_migration)
        CONTRACT_MIGRATION = "contract-migration"

    public_id = models.CharField(max_length=20, unique=True, default=_public_id)
    origin = models.CharField(max_length=20, choices=Origin.choices, default=Origin.CAPTURE)
    scenario_name = models.CharField(max_length=100)
    tool = models.CharField(max_length=200)
    contract_revision = models.PositiveIntegerField()
    connection = GatedCharField(max_length=200)
    captured_at = models.DateTimeField()
    source_revision = GatedCharField(max_length=200, blank=True, default="")
    effect_class = GatedCharField(max_length=20)
    world_revision = models.PositiveIntegerField()
    request = GatedJSONField()  # {method, url, headers, body, args}, redacted and masked
    response = GatedJSONField()  # {status, headers, body}, redacted and masked
    proposed_transition = GatedJSONField(null=True, blank=True)
    outcome = GatedCharField(max_length=20)  # the fixture outcome the response stands for
    encodings = GatedJSONField(default=dict)  # {"response.body": "gzip+base64"}: how a body arrived
    # The request digest under the scenario's contract when it could be normalized, else of the args as sent.
    request_digest = models.CharField(max_length=71)
    normalized_request = GatedJSONField(null=True, blank=True)
    key_note = GatedTextField(blank=True, default="")  # why there is no normalized request, if there is none
    original_digest = models.CharField(max_length=71)  # of the capture as it arrived, before anything was removed
    redactions = GatedJSONField(default=list)  # at intake: [{path, rule}]
    findings = GatedJSONField(default=list)  # at intake: [{id, rule, path, preview}]
    body_blobs = models.JSONField(default=dict)  # {"request.body": digest, "response.body": digest} in the blob store
    synthetic = models.BooleanField(default=False)
    fidelity_note = GatedTextField(blank=True, default="")
    # A mutation answered ambiguously (unknown, timeout, error) may have changed the world: it is promoted only with a
    # declared world transition or this, a reviewer's explicit "no change" and why (issue 34; the `no_change` event
    # says who; fixture_checks.mutation_gaps).
    no_change_reason = GatedTextField(blank=True, default="")
    # Retention and sensitivity (docs/retention.md): the class named at capture (or N17Q_CAPTURE_RETENTION_CLASS);
    # its period counts from `captured_at`. When the sweep removes a body's bytes the inline copy here goes too and
    # `expired_bodies` keeps {"response.body": deletion record id} so the page can say what went and why.
    retention_class = GatedCharField(max_length=100, blank=True, default="")
    expired_bodies = GatedJSONField(default=dict, blank=True)
    # When the recording's own hold on its bodies runs out (its class's period from `captured_at`, fixed when the
    # bodies were held); None: kept indefinitely, or no body of it is held any more. The sweep ends the hold then,
    # with a deletion record of its own, even while a run or another recording keeps the same bytes.
    hold_expires_at = models.DateTimeField(null=True, blank=True, db_index=True)
    copied_from = GatedJSONField(null=True, blank=True)  # copy similar: {run, event, fixture, scenario}
    # A recording staged from a run's tool result: the run and the result event it came from (its provenance).
    # Unique together when set, so staging the same result twice finds the first instead of a second copy.
    source_run = models.CharField(max_length=200, blank=True, default="")
    source_event = models.CharField(max_length=200, blank=True, default="")
    # A recording staged by a contract migration: the fixture it came from, the operations, why it needs review,
    # and what of the fixture a capture cannot carry (world condition, absences, fault stage, provenance).
    migration = GatedJSONField(null=True, blank=True)
    # What the record policy resolved the capture to (its connection's reviewed source class, account scope and
    # result class); blank for recordings that did not come through a connection (copy similar, copy recorded).
    source_class = GatedCharField(max_length=200, blank=True, default="")
    account_scope = GatedCharField(max_length=200, blank=True, default="")
    result_class = GatedCharField(max_length=40, blank=True, default="")
    captured_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    token = models.ForeignKey(
        "accounts.HarnessToken", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # Who may never approve it: the capturer and the token's owner, kept even if the token is deleted.
    excluded_approvers = GatedJSONField(default=list)
    state = models.CharField(max_length=20, choices=State.choices, default=State.STAGED)
    revision = models.PositiveIntegerField(default=1)
    staged_at = models.DateTimeField(auto_now_add=True)
    decided_at = models.DateTimeField(null=True, blank=True)
    fixture_version = models.ForeignKey(
        "FixtureVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="recordings"
    )
    scenario_version = models.ForeignKey(
        ScenarioVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="promoted_recordings"
    )

    class Meta:
        ordering = ["-staged_at", "-id"]
        permissions = [
            ("review_capture", "Can review staged recordings and approve fixture versions"),
            ("capture_recording", "Can stage captured recordings"),
        ]
        indexes = [models.Index(fields=["state", "staged_at"]), models.Index(fields=["scenario_name", "tool"])]
        constraints = [
            models.UniqueConstraint(
                fields=["source_run", "source_event"],
                condition=~models.Q(source_event=""),
                name="staged_recording_one_per_run_result",
            )
        ]

    def __str__(self) -> str:
        return self.public_id


class ReviewEvent(AppendOnlyModel):
    """One thing done to a staged recording, by whom and when. Never edited; never holds a removed value."""

    class Action(models.TextChoices):
        STAGED = "staged"
        REDACT = "redact"
        SYNTHESIZE = "synthesize"
        REJECT = "reject"
        APPROVE = "approve"
        REFUSED = "refused"  # an approval (or other action) the rules refused, with the reason
        NO_CHANGE = "no_change"  # a reviewer declared that an ambiguous mutation answer changed nothing, and why

    recording = models.ForeignKey(StagedRecording, on_delete=models.PROTECT, related_name="events")
    action = models.CharField(max_length=20, choices=Action.choices)
    # PROTECT, not SET_NULL: who did it is part of append-only history; deactivate a person's account instead.
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    at = models.DateTimeField(auto_now_add=True)
    path = GatedCharField(max_length=500, blank=True, default="")
    reason = GatedTextField(blank=True, default="")
    fidelity_note = GatedTextField(blank=True, default="")
    detail = GatedJSONField(default=dict)
    revision = models.PositiveIntegerField()  # the recording's revision after the event

    class Meta:
        ordering = ["at", "id"]

    def __str__(self) -> str:
        return f"{self.action} {self.recording_id} by {self.actor_id}"


class FixtureVersion(AppendOnlyModel):
    """An immutable, content-addressed fixture: its id is derived from its digest, its JSON never changes."""

    fixture_id = models.CharField(max_length=40, unique=True)
    digest = models.CharField(max_length=71, unique=True)
    scenario_name = models.CharField(max_length=100)
    tool = models.CharField(max_length=200)
    contract_revision = models.PositiveIntegerField()
    request_digest = models.CharField(max_length=71)
    fixture = GatedJSONField()
    created_at = models.DateTimeField(auto_now_add=True)
    # PROTECT, not SET_NULL: who did it is part of append-only history; deactivate a person's account instead.
    approved_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return self.fixture_id


class FixtureBodyHold(models.Model):
    """A fixture's hold on the bytes of its response body, stored by digest at promotion (seed 001; docs/retention.md).

    Promotion stores the reviewed body through the storage gate in the blob store and the fixture holds only its
    digest (`response.body_digest`); this row is the hold on those bytes: the class of the recording it was promoted
    from, counted from that recording's `captured_at`, and the deletion record that ended it. Per holder, as a run's
    `RunBlobHold`: the sweep ends it when it runs out (`fixtures_review.retention.fixture_holds_end`), even while
    another holder keeps the same bytes, or with the bytes' removal (`removed_by` set once, never cleared). A
    fixture whose body was promoted again later (the same content from another recording) gets a hold of that
    promotion's own; earlier holds stay as they ended. A contract migration's fixture whose body it rewrote holds the
    new bytes under its source's hold (class and expiry, `fixture_version` null): a migration never extends a clock.
    """

    blob = models.ForeignKey("runs.Blob", on_delete=models.PROTECT, related_name="fixture_holds")
    fixture_version = models.ForeignKey(
        FixtureVersion, null=True, blank=True, on_delete=models.PROTECT, related_name="body_holds"
    )
    recording = models.ForeignKey(
        StagedRecording, null=True, blank=True, on_delete=models.PROTECT, related_name="fixture_body_holds"
    )
    fixture_id = models.CharField(max_length=40)  # the fixture that holds the body (its id in fixtures.json)
    retention_class = GatedCharField(max_length=100, blank=True, default="")
    recorded_at = models.DateTimeField()  # the source recording's `captured_at`: where the class's period counts from
    expires_at = models.DateTimeField(null=True, blank=True, db_index=True)  # null: kept indefinitely
    removed_by = models.ForeignKey(
        "runs.BlobDeletion", null=True, blank=True, on_delete=models.PROTECT, related_name="ended_fixture_holds"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]

    def __str__(self) -> str:
        return f"fixture {self.fixture_id} holds {self.blob_id}"


class ContractRevision(AppendOnlyModel):
    """A tool contract revision declared to the console, with the migrations it declares from earlier revisions
    (`migrations_from`, docs/contract-migration.md). Immutable: a revision's meaning never changes under its number.
    A scenario version still pins its own copy of each contract; these are what a migration may move it to."""

    tool = models.CharField(max_length=200)
    revision = models.PositiveIntegerField()
    digest = models.CharField(max_length=71, unique=True)  # of the contract's canonical dict
    contract = GatedJSONField()  # `Contract.to_dict()`: checked on the way in, read back the same way
    declared_at = models.DateTimeField(auto_now_add=True)
    # PROTECT, not SET_NULL: who did it is part of append-only history; deactivate a person's account instead.
    declared_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")

    class Meta:
        ordering = ["tool", "revision"]
        constraints = [models.UniqueConstraint(fields=["tool", "revision"], name="contract_revision_unique")]

    def __str__(self) -> str:
        return f"{self.tool}@{self.revision}"


class Connection(models.Model):
    """A reviewed connection record mode may capture through (seed 000, "Record mode needed its own fail-closed
    edges"): what it reaches, the source classes and account scopes it records, the capabilities it may exercise,
    and its capture policy (the result classes it may keep). Intake stages a capture only from an approved one.

    Proposed, then approved by a reviewer other than the proposer, then retired; a change to what an approved
    connection is (its name, what it reaches, its policy, a model endpoint's reach: `IDENTITY_FIELDS`) sends it back
    to proposed through `fixtures_review.connections.connection_change`. Each step is an audit entry.

    The approval covers that identity, not the row: `approved_identity` keeps the digest of what the reviewer
    approved, and the record policy (and the relay) admit it only while the row still has it (`identity_digest`). So
    a door that writes the row some other way (a queryset update, a shell, a door added later) cannot keep a changed
    connection approved; `save` refuses it outright, and admission refuses it even when `save` was skipped.

    A connection of kind `model` (issue 33) is a model endpoint the live relay may reach instead: the same lifecycle,
    naming a scheme, host, port and path prefix and the ONE credential reference the relay may send there (a name in
    the model-credential namespace, `replays.relay.CREDENTIAL_PREFIX`; the value is on the worker only). Record mode
    never captures through a model connection, and the relay never reaches a recording one.
    """

    class Kind(models.TextChoices):
        RECORDING = "recording", "a recording connection (record mode captures through it)"
        MODEL = "model", "a model endpoint (the live relay reaches it)"

    class Scheme(models.TextChoices):
        HTTPS = "https"
        HTTP = "http"

    # What a reviewer approves: the name captures (and recording files, by host) use to say where they came
    # from, whether it reaches the live world, and the policy; for a model endpoint, where the relay may go and the
    # credential it may send there.
    IDENTITY_FIELDS = (
        "name",
        "kind",
        "reaches",
        "source_classes",
        "capabilities",
        "account_scopes",
        "capture_result_classes",
        "default_result_class",
        "endpoint_scheme",
        "endpoint_host",
        "endpoint_port",
        "endpoint_path_prefix",
        "credential_name",
    )

    class State(models.TextChoices):
        PROPOSED = "proposed"
        APPROVED = "approved"
        RETIRED = "retired"

    class Reaches(models.TextChoices):
        LIVE = "live", "the live world"
        SANDBOX = "sandbox", "a sandbox (a provider's test account, a simulated service)"

    name = GatedCharField(max_length=200, unique=True, help_text="as captures name it in their `connection` field")
    description = GatedTextField(blank=True, default="")
    reaches = models.CharField(
        max_length=20,
        choices=Reaches.choices,
        default=Reaches.LIVE,
        help_text="a mutation recorded through a live connection is always refused",
    )
    # Lists of names (JSON arrays of strings), edited in the admin as comma-separated text.
    source_classes = GatedJSONField(default=list, blank=True, help_text="the source classes it records")
    capabilities = GatedJSONField(default=list, blank=True, help_text="effect classes it may record: read, mutation")
    account_scopes = GatedJSONField(default=list, blank=True, help_text="the accounts it records under")
    capture_result_classes = GatedJSONField(
        default=list, blank=True, help_text="the capture policy: result classes it may keep"
    )
    default_result_class = GatedCharField(
        max_length=40, blank=True, default="", help_text="the class of a result whose capture names none"
    )
    kind = models.CharField(max_length=20, choices=Kind.choices, default=Kind.RECORDING)
    # A model endpoint's reach (kind `model`; empty for a recording connection): the relay requests only
    # <scheme>://<host>:<port><path prefix>/chat/completions, with the credential named here and no other.
    endpoint_scheme = models.CharField(max_length=5, choices=Scheme.choices, blank=True, default="")
    endpoint_host = GatedCharField(max_length=253, blank=True, default="", help_text="a host name or IP address")
    endpoint_port = models.PositiveIntegerField(null=True, blank=True)
    endpoint_path_prefix = GatedCharField(max_length=300, blank=True, default="", help_text="e.g. /v1")
    credential_name = GatedCharField(
        max_length=100,
        blank=True,
        default="",
        help_text="the NAME of the worker's environment variable under N17Q_MODEL_CREDENTIAL_ (never the credential)",
    )
    state = models.CharField(max_length=20, choices=State.choices, default=State.PROPOSED)
    proposed_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    proposed_at = models.DateTimeField(auto_now_add=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    # The digest of IDENTITY_FIELDS as approved (`identity_digest`); blank until approved.
    approved_identity = models.CharField(max_length=71, blank=True, default="", editable=False)
    retired_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT, related_name="+"
    )
    retired_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def save(self, *args: Any, **kwargs: Any) -> None:
        # The last guard for a door that skips the lifecycle service: an approved row may not take a new identity
        # and stay approved (connection_change sends it back to proposed first, so it never trips this).
        if self.pk is not None and self.state == self.State.APPROVED:
            stored = Connection.objects.filter(pk=self.pk).first()
            if stored is not None and stored.identity_digest() != self.identity_digest():
                raise ConnectionIdentityChanged(
                    f"connection {stored.name} is approved: a change to its name, reach or policy goes through "
                    "fixtures_review.connections.connection_change, which sends it back to proposed"
                )
        super().save(*args, **kwargs)

    def identity_digest(self) -> str:
        return canonical.digest_json({field: getattr(self, field) for field in self.IDENTITY_FIELDS})


class ConnectionIdentityChanged(ValueError):
    """An approved connection saved with a new identity while still approved; one sentence."""


def _observation_id() -> str:
    return "ro-" + secrets.token_hex(6)


class RequestObservation(AppendOnlyModel):
    """What is kept of a capture that produced no recording: a refusal of the record policy, or a capture that
    failed after a live read. Only the safe request observation (tool, method, the digest of the redacted
    arguments), never a body, a URL or a header: no unreviewed content is stored (seed 000)."""

    class Kind(models.TextChoices):
        REFUSED = "refused"  # the record policy refused the capture
        CAPTURE_FAILED = "capture-failed"  # the read happened, its response could not be kept

    public_id = models.CharField(max_length=20, unique=True, default=_observation_id)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    reason = GatedTextField()
    door = GatedCharField(max_length=20)  # capture | har | vcr | run-result
    scenario_name = models.CharField(max_length=100)
    tool = GatedCharField(max_length=200)
    connection = GatedCharField(max_length=200)
    effect_class = GatedCharField(max_length=20)
    method = GatedCharField(max_length=20, blank=True, default="")
    request_digest = models.CharField(max_length=71, blank=True, default="")
    at = models.DateTimeField(auto_now_add=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.PROTECT, related_name="+")
    token_prefix = GatedCharField(max_length=40, blank=True, default="")

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["-at", "-id"], name="request_observation_recent")]

    def __str__(self) -> str:
        return self.public_id
