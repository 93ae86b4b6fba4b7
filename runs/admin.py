"""The Django admin for admins: runs and their history are read-only here too; tokens can be revoked."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import transaction
from django.utils import timezone

from .audit import audit_record
from .models import AuditEntry, Event, Finding, HarnessToken, Run


class ReadOnlyAdmin(admin.ModelAdmin):
    """History is append-only: the admin may look, never add, change or delete."""

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["run_id", "task_id", "mode", "environment", "event_count", "finding_count", "imported_at"]
    list_filter = ["mode", "environment", "final_state"]
    search_fields = ["run_id", "task_id"]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["event_id", "kind", "seq", "run"]
    list_filter = ["kind"]
    search_fields = ["event_id"]
    list_select_related = ["run"]
    show_full_result_count = False  # counting every event of every run would be the slow part


@admin.register(Finding)
class FindingAdmin(ReadOnlyAdmin):
    list_display = ["code", "severity", "from_ref", "to_ref", "run"]
    list_filter = ["code", "severity"]
    list_select_related = ["run"]


@admin.register(HarnessToken)
class HarnessTokenAdmin(admin.ModelAdmin):
    """Tokens are issued with `manage.py issue_token` (the key is shown once); here they are revoked."""

    list_display = ["name", "user", "prefix", "scopes", "created_at", "last_used_at", "revoked_at"]
    # Everything read-only, revoked_at too: a token is revoked by the action (audited), never un-revoked.
    readonly_fields = [
        "name",
        "user",
        "prefix",
        "scopes",
        "key_digest",
        "created_at",
        "created_by",
        "last_used_at",
        "revoked_at",
    ]
    actions = ["revoke"]

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: Any, queryset: Any) -> None:
        with transaction.atomic():
            tokens = list(
                queryset.select_related("user").select_for_update(of=("self",)).filter(revoked_at__isnull=True)
            )
            now = timezone.now()
            for token in tokens:
                token.revoked_at = now
                token.save(update_fields=["revoked_at"])
                audit_record(
                    actor=request.user,
                    action="token.revoke",
                    target=str(token),
                    detail={"token": token.pk, "owner": token.user.get_username(), "prefix": token.prefix},
                    request=request,
                )
        self.message_user(request, f"Revoked {len(tokens)} token(s).")


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """The audit log, for admins: read-only like every other record of what happened."""

    list_display = ["at", "actor", "via", "action", "target", "ip"]
    list_filter = ["action", "via"]
    search_fields = ["actor", "target", "action"]
    date_hierarchy = "at"
    show_full_result_count = False  # counting the whole log on every page would be the slow part
    readonly_fields = ["at", "actor", "actor_user_id", "via", "action", "target", "detail", "ip"]
