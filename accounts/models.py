"""Who may act and what they did: harness tokens and the audit log.

The tables keep the names they had when these models lived in `runs` (runs_harnesstoken, runs_auditentry):
the move changed where the code is, not the data (accounts/migrations/0001_initial.py).
"""

from __future__ import annotations

import hashlib
import secrets

from django.conf import settings
from django.db import models

from console.append_only import AppendOnlyModel
from console.gated_fields import GatedCharField, GatedJSONField


class HarnessToken(models.Model):
    """A scoped API token for a harness. Only its SHA-256 is stored; the key is shown once."""

    class Scope(models.TextChoices):
        IMPORT_RUNS = "runs:import"
        CAPTURE = "captures:create"
        # Issue 36: a harness (a CI job) launches replays and reads what they did, the missing fixtures' requests
        # included; launching answers the launch summary, a reading, so it needs both (docs: README "API").
        LAUNCH_REPLAYS = "replays:launch"
        READ_REPLAYS = "replays:read"
        # Issue 38: append scores, labels, comments and corrections to a run (runs/annotations.py).
        ANNOTATE_RUNS = "runs:annotate"

    name = GatedCharField(max_length=200)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="harness_tokens")
    key_digest = models.CharField(max_length=64, unique=True)
    prefix = models.CharField(max_length=12)
    scopes = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    revoked_at = models.DateTimeField(null=True, blank=True)
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "runs_harnesstoken"

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @staticmethod
    def digest_key(key: str) -> str:
        return hashlib.sha256(key.encode("utf-8")).hexdigest()

    @staticmethod
    def new_key() -> str:
        return "n17q_" + secrets.token_urlsafe(32)


class AuditEntry(AppendOnlyModel):
    """One thing a person, a harness or the console did that someone may later have to account for.

    Written by `accounts.audit.audit_record` only. Append-only like history (the model refuses, and on
    PostgreSQL a trigger refuses again). The actor is kept as text as well as by id: an entry must still
    say who acted after the account is renamed or removed, so there is no foreign key to cascade or null.
    """

    at = models.DateTimeField(db_index=True)
    actor = GatedCharField(max_length=150, blank=True, default="")  # username; "" for nobody signed in
    actor_user_id = models.BigIntegerField(null=True, blank=True)
    # How the action arrived: "web" (a session), "token <prefix>" (a harness), "cli <os user>", "worker", "system".
    via = models.CharField(max_length=60)
    action = models.CharField(max_length=60, db_index=True)
    target = GatedCharField(max_length=300, blank=True, default="")
    detail = GatedJSONField(default=dict, blank=True)
    ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-at", "-id"]
        db_table = "runs_auditentry"
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["actor", "at"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor or '-'} {self.action} {self.target}"
