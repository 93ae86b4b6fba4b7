"""The Django admin for admins: harness tokens (revoked here, audited) and the audit log (read-only)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import transaction
from django.utils import timezone

from console.append_only import ReadOnlyAdmin

from .audit import audit_record
from .models import AuditEntry, HarnessToken


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
