"""The Django admin for replays' registered agents (issue 18): an admin registers an agent program here.

Adding one goes through `replays.agents.agent_register` (the digest pinned, the environment built); a
registration is never edited (delete it and register again), so the change page is read-only.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from django import forms
from django.contrib import admin
from django.http import HttpRequest

from .agents import AgentRefused, agent_register, agent_status
from .models import RegisteredAgent


class RegisterAgentForm(forms.ModelForm):
    user: Any = None
    registered: RegisteredAgent | None = None
    command_line = forms.CharField(
        label="Entry command",
        max_length=1000,
        help_text="e.g. python agent.py (the agent's environment's python), a path inside the folder, or an "
        "absolute path",
    )
    replace = forms.BooleanField(
        label="New version",
        required=False,
        help_text="the name is registered already: make this its next version (agent:NAME then runs the newest; "
        "older versions stay, for the replays that ran them)",
    )

    class Meta:
        model = RegisteredAgent
        fields = ["name", "folder", "requirements"]
        help_texts = {
            "folder": "the agent's folder on the worker's disk (absolute path); the digest of its files is pinned now",
            "requirements": "package specifiers, one a line (optional): its own read-only environment is built "
            "from the package registry; empty: the worker's own environment",
        }

    def clean(self) -> dict[str, Any]:
        """Registers the agent once every field is valid (the digest pinned, the environment built); a refusal is
        the form's one-line error and stores nothing."""
        data = super().clean() or {}
        if self.errors:
            return data
        try:
            command = shlex.split(data.get("command_line") or "")
        except ValueError as exc:
            raise forms.ValidationError(f"Entry command: {exc}") from None
        try:
            self.registered = agent_register(
                data["name"],
                data["folder"],
                command,
                requirements=data.get("requirements") or "",
                user=self.user,
                replace=bool(data.get("replace")),
            )
        except AgentRefused as exc:
            raise forms.ValidationError(f"Not registered: {exc}") from None
        return data

    def _post_clean(self) -> None:  # the model's own validation would refuse the missing digest: the service sets it
        pass


@admin.register(RegisteredAgent)
class RegisteredAgentAdmin(admin.ModelAdmin):
    list_display = [
        "decider",
        "version",
        "folder",
        "command_shown",
        "digest_shown",
        "environment_shown",
        "status",
        "registered_by",
        "registered_at",
    ]
    search_fields = ["name", "folder"]
    ordering = ["name", "-version"]
    readonly_fields = [
        "name",
        "version",
        "folder",
        "command",
        "digest",
        "requirements",
        "requirements_digest",
        "environment",
        "installed",
        "registered_by",
        "registered_at",
        "status",
    ]

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return self.readonly_fields if obj is not None else []

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if obj is None:
            return ["name", "folder", "command_line", "requirements", "replace"]
        return self.readonly_fields

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False if obj is not None and request.method == "POST" else super().has_change_permission(request, obj)

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False, **kwargs: Any) -> Any:
        if obj is not None:
            return super().get_form(request, obj, change=change, **kwargs)
        kwargs["form"] = RegisterAgentForm
        form_class = super().get_form(request, obj, change=change, **kwargs)
        return type("RegisterAgentFormFor", (form_class,), {"user": request.user})

    def save_form(self, request: HttpRequest, form: Any, change: bool) -> Any:
        return getattr(form, "registered", None) or super().save_form(request, form, change)

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        pass  # registered by the form (agent_register); a registration is never edited

    def save_related(self, request: HttpRequest, form: Any, formsets: Any, change: bool) -> None:
        pass

    @admin.display(description="decider")
    def decider(self, obj: RegisteredAgent) -> str:
        return obj.decider

    @admin.display(description="command")
    def command_shown(self, obj: RegisteredAgent) -> str:
        return shlex.join(obj.command) if isinstance(obj.command, list) else json.dumps(obj.command)

    @admin.display(description="digest")
    def digest_shown(self, obj: RegisteredAgent) -> str:
        return obj.digest[:19] + "…"

    @admin.display(description="environment")
    def environment_shown(self, obj: RegisteredAgent) -> str:
        return f"own ({len(obj.installed)} packages)" if obj.environment else "the worker's"

    @admin.display(description="can run")
    def status(self, obj: RegisteredAgent) -> str:
        return agent_status(obj) or "yes: folder unchanged since registration"
