"""Model fields that run the storage gate (issue 32, n17q_secrets.gate) on every value they write.

Each door masked what it stored (the importer its events, intake its captures), and each door added later found a
column the earlier ones never wrote: a trace's root span name, a run's title from a converter. These fields make
the column itself the gate: `get_prep_value` passes a value the gate produced (`GatedText`, `GatedJSON`) through as
it is and runs the gate on any other value, so a secret reaching a gated column through a door nobody scanned is
masked at the write (fail closed), never stored.

They deconstruct as the Django field they extend: the gate is behaviour, not schema, so no migration is needed and
none rebuilds a table (on SQLite any AlterField rebuilds the table, and the history tables' append-only triggers
with it). Migrations' historical models are therefore ungated; a data migration that writes input-derived text
runs the gate itself.

Every text, char, JSON and binary column of the product's models is either one of these or named in `UNGATED` with the
reason it cannot hold input-derived text (an id the identifier grammar validated and the import refuses when a
secret is found in it, a digest, a choice); the system check `storage_gate.E001` (console.apps) fails on any other.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.apps import apps
from django.core import checks
from django.db import models

from n17q_secrets import gate

PRODUCT_APPS = ("console", "accounts", "runs", "fixtures_review", "replays", "otlp_receiver", "n17q_site")


def _masked_text(field: models.Field[Any, Any], value: Any) -> Any:
    if value is None or isinstance(value, gate.GatedText) or hasattr(value, "resolve_expression"):
        return value
    text = value if isinstance(value, str) else str(value)
    findings: list[dict[str, str]] = []
    masked = gate.gate_text(text, where=f"{field.model._meta.label}.{field.name}", findings=findings)
    if not findings:
        return text
    if field.max_length is not None and len(masked) > field.max_length:
        # `[masked:<rule>]` can be longer than the value it replaced: cut to the column, never past it with the value.
        return masked[: field.max_length]
    return str(masked)


class _GatedCharField(models.CharField):
    def get_prep_value(self, value: Any) -> Any:
        return super().get_prep_value(_masked_text(self, value))

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.CharField", args, kwargs


class _GatedTextField(models.TextField):
    def get_prep_value(self, value: Any) -> Any:
        return super().get_prep_value(_masked_text(self, value))

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.TextField", args, kwargs


class _GatedJSONField(models.JSONField):
    def get_prep_value(self, value: Any) -> Any:
        if isinstance(value, gate.GatedJSON):
            return super().get_prep_value(value.value)
        if value is None or hasattr(value, "resolve_expression"):
            return super().get_prep_value(value)
        findings: list[dict[str, str]] = []
        gated = gate.gate_json(value, where=f"{self.model._meta.label}.{self.name}", findings=findings)
        return super().get_prep_value(gated.value if findings else value)

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.JSONField", args, kwargs


class GatedBinaryField(models.BinaryField):
    """Bytes kept in a row (a receiver's buffered request): `media_type` says how the gate reads them
    (n17q_secrets.gate.mask_bytes; "+zlib" for a zlib-compressed body, opened, masked and compressed again)."""

    def __init__(self, *args: Any, media_type: str = "application/octet-stream", **kwargs: Any) -> None:
        self.media_type = media_type
        super().__init__(*args, **kwargs)

    def get_prep_value(self, value: Any) -> Any:
        if value is None or isinstance(value, gate.GatedBytes) or hasattr(value, "resolve_expression"):
            return super().get_prep_value(value)
        findings: list[dict[str, str]] = []
        where = f"{self.model._meta.label}.{self.name}"
        return super().get_prep_value(
            gate.gate_bytes(bytes(value), media_type=self.media_type, where=where, findings=findings)
        )

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.BinaryField", args, kwargs


if TYPE_CHECKING:
    # To the type checker a gated field is the Django field it extends, so django-stubs types the model attribute
    # as it did (a nullable JSONField's `Any | None`, a CharField's `str`); the gate is behaviour, not a type.
    GatedCharField = models.CharField
    GatedTextField = models.TextField
    GatedJSONField = models.JSONField
else:
    GatedCharField = _GatedCharField
    GatedTextField = _GatedTextField
    GatedJSONField = _GatedJSONField

GATED_FIELDS = (GatedCharField, GatedTextField, GatedJSONField, GatedBinaryField)

_ID = "an id of the identifier grammar (n17q_engine.identifiers); the import refuses one holding a secret"
_REF = "a reference (an id named by an event); the import refuses one holding a secret (runs.secret_scan)"
_DIGEST = "a digest (sha256:<hex> or hmac:<hex>) the product computes"
_CHOICE = "one of the field's choices"
_SCENARIO = "a scenario name, of the scenario grammar (lowercase letters, digits, '-')"
_VOCABULARY = "a word of the product's vocabulary the code writes, never input"
_OWN_TOKEN = "a random value the product mints for its own bookkeeping"

# ONE allowlist: (model label, field name) -> why the column cannot hold input-derived text.
UNGATED: dict[tuple[str, str], str] = {
    ("accounts.HarnessToken", "key_digest"): _DIGEST + " (the token's SHA-256: accounts.models)",
    ("accounts.HarnessToken", "prefix"): "the public prefix of a token the console minted, shown to tell tokens apart",
    ("accounts.HarnessToken", "scopes"): "scope names validated against accounts.roles' vocabulary",
    ("accounts.AuditEntry", "via"): _VOCABULARY + " (web, api, cli)",
    ("accounts.AuditEntry", "action"): _VOCABULARY + " (the audited action's name)",
    ("runs.Run", "run_id"): _ID,
    ("runs.Run", "task_id"): _ID,
    ("runs.Run", "environment"): _CHOICE,
    ("runs.Run", "mode"): _CHOICE,
    ("runs.Run", "scenario_name"): _SCENARIO,
    ("runs.Run", "parent_run_ref"): _REF,
    ("runs.Run", "bundle_digest"): _DIGEST,
    ("runs.RunSummary", "kind"): _CHOICE,
    ("runs.RunSummary", "outcome"): _CHOICE,
    ("runs.RunSummary", "scenario"): _SCENARIO,
    ("runs.RunSummary", "codes"): "lineage codes of the checker (n17q_engine.lineage), one per line",
    ("runs.RunImport", "run_id"): _ID,
    ("runs.RunImport", "holder"): "the importing process's host and pid (runs.import_slices)",
    ("runs.RunImport", "token"): _OWN_TOKEN + " (an import's lease)",
    ("runs.RunImport", "blob_files"): "blob store names, each made of a digest (console.blob_store.blob_storage_name)",
    ("runs.Blob", "digest"): _DIGEST,
    ("runs.Blob", "sensitivity"): _VOCABULARY + " (runs.retention's sensitivity classes)",
    ("runs.Event", "event_id"): _ID,
    ("runs.Event", "kind"): "an event kind of the vocabulary (n17q_engine.vocabulary); the reader refuses others",
    ("runs.Event", "attempt_ref"): _REF,
    ("runs.Event", "workspace_ref"): _REF,
    ("runs.RunObject", "kind"): _CHOICE,
    ("runs.RunObject", "ref"): _ID,
    ("runs.Edge", "field"): "the path of a reference field of the vocabulary (n17q_engine.vocabulary.references)",
    ("runs.Edge", "target_ref"): _REF,
    ("runs.Finding", "code"): _VOCABULARY + " (a lineage code, n17q_engine.lineage.codes)",
    ("runs.Finding", "severity"): _VOCABULARY + " (error, warning)",
    ("runs.Finding", "from_ref"): _REF,
    ("runs.Finding", "to_ref"): _REF,
    ("runs.Finding", "message"): "composed by the lineage checker from its own words and the run's ids and references,"
    " each scanned by the import (a secret in one refuses the import)",
    ("runs.MaskedSecret", "place"): _CHOICE,
    ("runs.MaskedSecret", "event_ref"): _REF,
    ("runs.MaskedSecret", "blob_digest"): _DIGEST,
    ("runs.MaskedSecret", "recorded_as"): _DIGEST,
    ("runs.MaskedSecret", "rule"): "a rule id of the scanner's rule sets (n17q_secrets.scanning.rules)",
    ("runs.BlobDeletion", "digest"): _DIGEST,
    ("runs.BlobDeletion", "sensitivity"): _VOCABULARY + " (runs.retention's sensitivity classes)",
    ("fixtures_review.ScenarioVersion", "name"): _SCENARIO,
    ("fixtures_review.ScenarioVersion", "digest"): _DIGEST,
    ("fixtures_review.StagedRecording", "public_id"): _OWN_TOKEN + " (a recording's public id)",
    ("fixtures_review.StagedRecording", "origin"): _CHOICE,
    ("fixtures_review.StagedRecording", "scenario_name"): _SCENARIO,
    ("fixtures_review.StagedRecording", "tool"): _ID,
    ("fixtures_review.StagedRecording", "request_digest"): _DIGEST,
    ("fixtures_review.StagedRecording", "original_digest"): _DIGEST,
    ("fixtures_review.StagedRecording", "body_blobs"): "the digests of a recording's bodies, by place",
    ("fixtures_review.StagedRecording", "source_run"): _ID,
    ("fixtures_review.StagedRecording", "source_event"): _ID,
    ("fixtures_review.StagedRecording", "state"): _CHOICE,
    ("fixtures_review.ReviewEvent", "action"): _CHOICE,
    ("fixtures_review.FixtureVersion", "fixture_id"): _OWN_TOKEN + " (a fixture's id)",
    ("fixtures_review.FixtureVersion", "digest"): _DIGEST,
    ("fixtures_review.FixtureVersion", "scenario_name"): _SCENARIO,
    ("fixtures_review.FixtureVersion", "tool"): _ID,
    ("fixtures_review.FixtureVersion", "request_digest"): _DIGEST,
    ("fixtures_review.FixtureBodyHold", "fixture_id"): _OWN_TOKEN + " (a fixture's id)",
    ("fixtures_review.ContractRevision", "tool"): _ID,
    ("fixtures_review.ContractRevision", "digest"): _DIGEST,
    ("fixtures_review.Connection", "reaches"): _CHOICE,
    ("fixtures_review.Connection", "state"): _CHOICE,
    ("fixtures_review.Connection", "kind"): _CHOICE,
    ("fixtures_review.Connection", "endpoint_scheme"): _CHOICE,
    ("fixtures_review.Connection", "approved_identity"): _DIGEST + " (of what a reviewer approved)",
    ("fixtures_review.RequestObservation", "public_id"): _OWN_TOKEN + " (an observation's public id)",
    ("fixtures_review.RequestObservation", "kind"): _CHOICE,
    ("fixtures_review.RequestObservation", "scenario_name"): _SCENARIO,
    ("fixtures_review.RequestObservation", "request_digest"): _DIGEST,
    ("replays.Replay", "mode"): _CHOICE,
    ("replays.Replay", "state"): _CHOICE,
    ("replays.Replay", "package_digest"): _DIGEST,
    ("replays.Replay", "claim_token"): _OWN_TOKEN + " (a worker's claim)",
    ("replays.Replay", "claimed_by"): "the claiming worker's host and pid",
    ("replays.Replay", "progress_logical"): "a logical time the worker formats (n17q_engine.replay)",
    ("replays.WorkerHeartbeat", "hostname"): "the worker's own host name",
    ("replays.RegisteredAgent", "digest"): _DIGEST,
    ("replays.RegisteredAgent", "requirements_digest"): _DIGEST,
    ("replays.RegisteredAgent", "environment_digest"): _DIGEST,
    ("otlp_receiver.ReceivedTrace", "trace_id"): "32 hex digits (otlp_receiver.wire refuses any other trace id)",
    ("otlp_receiver.ReceivedTrace", "state"): _CHOICE,
}

_TEXT_FIELDS = (models.CharField, models.TextField, models.JSONField, models.BinaryField)


def ungated_columns() -> list[str]:
    """`label.field` of every text, char or JSON column of a product model neither gated nor in UNGATED."""
    out = []
    for model in apps.get_models():
        if model._meta.app_label not in PRODUCT_APPS:
            continue
        for field in model._meta.concrete_fields:
            if not isinstance(field, _TEXT_FIELDS) or isinstance(field, GATED_FIELDS):
                continue
            if (model._meta.label, field.name) not in UNGATED:
                out.append(f"{model._meta.label}.{field.name}")
    return out


def check_gated_columns(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = [
        checks.Error(
            f"{column} is a text, char, JSON or binary column that the storage gate does not cover",
            hint="Make it a console.gated_fields field (GatedCharField, GatedTextField, GatedJSONField), or name it "
            "in console.gated_fields.UNGATED with the reason it cannot hold input-derived text.",
            id="storage_gate.E001",
        )
        for column in ungated_columns()
    ]
    stale = [f"{label}.{name}" for label, name in UNGATED if not _exists(label, name)]
    errors += [
        checks.Error(f"console.gated_fields.UNGATED names {column}, which no model has", id="storage_gate.E002")
        for column in stale
    ]
    return errors


def _exists(label: str, name: str) -> bool:
    try:
        model = apps.get_model(label)
    except LookupError:
        return False
    return any(f.name == name for f in model._meta.concrete_fields)
