"""The Django admin for reviewed connections (the record policy) and, read-only, the request observations of
refused or failed captures. Every change goes through `fixtures_review.connections` (audited); approval is an
action, never a field an editor sets."""

from __future__ import annotations

from typing import Any

from django import forms
from django.contrib import admin, messages

from console.append_only import ReadOnlyAdmin

from . import connections
from .models import Connection, RequestObservation
from .record_policy import CAPABILITIES, RESULT_CLASSES


class _NamesField(forms.Field):
    """A JSON list of names edited as comma-separated text."""

    widget = forms.TextInput

    def prepare_value(self, value: Any) -> Any:
        if isinstance(value, list):
            return ", ".join(value)
        return value

    def to_python(self, value: Any) -> list[str]:
        if isinstance(value, list):
            return [str(v).strip() for v in value if str(v).strip()]
        return [part.strip() for part in str(value or "").split(",") if part.strip()]


class ConnectionForm(forms.ModelForm):
    source_classes = _NamesField(required=False, help_text="comma-separated, e.g. public-docs, status-api")
    capabilities = _NamesField(required=False, help_text=f"comma-separated: {', '.join(CAPABILITIES)}")
    account_scopes = _NamesField(required=False, help_text="comma-separated; each one account, never a pattern")
    capture_result_classes = _NamesField(required=False, help_text=f"comma-separated: {', '.join(RESULT_CLASSES)}")
    # Left out, a connection is a recording one, as every connection was before model endpoints (issue 33).
    kind = forms.ChoiceField(choices=Connection.Kind.choices, required=False, initial=Connection.Kind.RECORDING)

    class Meta:
        model = Connection
        fields = [
            "name",
            "description",
            "kind",
            "reaches",
            *connections.POLICY_FIELDS[1:],
            *connections.ENDPOINT_FIELDS,
        ]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for name, allowed in (("capabilities", CAPABILITIES), ("capture_result_classes", RESULT_CLASSES)):
            unknown = sorted(set(data.get(name) or []) - set(allowed))
            if unknown:
                self.add_error(name, f"{unknown[0]!r} is not one of {', '.join(allowed)}")
        default = data.get("default_result_class")
        if default and default not in (data.get("capture_result_classes") or []):
            self.add_error("default_result_class", "must be one of the result classes the capture policy keeps")
        data["kind"] = data.get("kind") or Connection.Kind.RECORDING
        if data["kind"] == Connection.Kind.MODEL:
            # A model endpoint is checked as the relay will check it (issue 33): a credential reference outside the
            # model-credential namespace is refused here, before anyone could approve it.
            probe = Connection(**{name: data.get(name) for name in connections.ENDPOINT_FIELDS}, kind=data["kind"])
            for gap in connections.endpoint_gaps(probe):
                self.add_error(None, gap)
        return data


@admin.register(Connection)
class ConnectionAdmin(admin.ModelAdmin):
    form = ConnectionForm
    list_display = ["name", "kind", "state", "reaches", "capabilities", "account_scopes", "approved_by", "approved_at"]
    list_filter = ["kind", "state", "reaches"]
    search_fields = ["name"]
    readonly_fields = ["state", "proposed_by", "proposed_at", "approved_by", "approved_at", "retired_by", "retired_at"]
    actions = ["approve", "retire"]

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False  # recordings name it; retire it instead

    def save_model(self, request: Any, obj: Connection, form: Any, change: bool) -> None:
        was = Connection.objects.filter(pk=obj.pk).values_list("state", flat=True).first() if change else None
        state = connections.connection_change(connection=obj, user=request.user, created=not change)
        if was == Connection.State.APPROVED and state == Connection.State.PROPOSED:
            self.message_user(
                request, f"{obj.name}: its name, reach or policy changed, so it is proposed again until approved."
            )

    @admin.action(description="Approve the selected connections (record mode may use them)")
    def approve(self, request: Any, queryset: Any) -> None:
        for connection in queryset:
            try:
                connections.connection_approve(connection=connection, user=request.user)
            except connections.ConnectionRefused as exc:
                self.message_user(request, str(exc), level=messages.ERROR)
            else:
                self.message_user(request, f"Approved {connection.name}.")

    @admin.action(description="Retire the selected connections (record mode may no longer use them)")
    def retire(self, request: Any, queryset: Any) -> None:
        for connection in queryset:
            try:
                connections.connection_retire(connection=connection, user=request.user)
            except connections.ConnectionRefused as exc:
                self.message_user(request, str(exc), level=messages.ERROR)
            else:
                self.message_user(request, f"Retired {connection.name}.")


@admin.register(RequestObservation)
class RequestObservationAdmin(ReadOnlyAdmin):
    list_display = ["public_id", "at", "kind", "connection", "tool", "door", "reason"]
    list_filter = ["kind", "door"]
    search_fields = ["public_id", "connection", "tool"]
