"""The OpenAPI schema's shared parts: every operation describes the errors it can answer with.

drf-spectacular describes what a view declares; the answers every API view can give without declaring them
(401 without credentials, 403 without the role or the token's scope, 404 for an unknown id in the path, 400
for a refused body, 429 when a token is throttled, 503 when SQLite is busy behind an import) are added here,
once, for every operation, the ones other apps add later included. All of them have the one error shape
`{"error": "<one line>"}` (`exception_handler` below). The schema test (tests/test_openapi.py) holds the API to
exactly this.
"""

from __future__ import annotations

from typing import Any

from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler
from rest_framework.views import set_rollback

from .busy import busy_api_response, is_database_busy


class ErrorOutput(serializers.Serializer):
    error = serializers.CharField(help_text="one line saying what was refused and why")

    class Meta:
        ref_name = "Error"


ERRORS = {
    "400": "The request was refused: the error names the field and why.",
    "401": "No credentials, or a token that is unknown or revoked.",
    "403": "The user's role or the token's scopes do not allow this request.",
    "404": "Nothing with that id.",
    "429": "Too many requests with this token (or refused tokens from this address); see Retry-After.",
    "503": "The embedded database (SQLite) is busy with another write, an import most likely; nothing was stored. "
    "See Retry-After.",
}


def declared_token_scopes(view: Any) -> tuple[str, ...] | None:
    """The scopes a harness token needs for `view`'s operation (for its request's method), all of them; None when the
    view declares none. A permission declares scopes by its `token_scopes` (accounts.auth.scoped: console sits below
    accounts, so it reads the attribute, not the class)."""
    declared = [p.token_scopes for p in view.get_permissions() if isinstance(getattr(p, "token_scopes", None), tuple)]
    if not declared:
        return None
    return tuple(sorted({scope for scopes in declared for scope in scopes}))


class AutoSchema(SpectacularAutoSchema):
    def get_operation(self, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
        operation = super().get_operation(*args, **kwargs)
        if operation is None:
            return None
        error = self.resolve_serializer(ErrorOutput, "response").ref
        responses = operation.setdefault("responses", {})
        wanted = []
        if self.view.get_authenticators():
            wanted += ["401", "429"]  # a wrong token is refused, and tokens are throttled, on any view
        permissions = self.view.get_permissions()
        if not all(isinstance(p, AllowAny) or getattr(p, "token_scopes", None) == () for p in permissions):
            wanted.append("403")
        scopes = declared_token_scopes(self.view)
        if scopes is not None:
            # What a harness token needs for this operation, all of it (accounts.auth); none: any token, or none.
            operation["x-required-scopes"] = list(scopes)
        if "{" in self.path:
            wanted.append("404")
        has_query = any(p.get("in") == "query" for p in operation.get("parameters", []))
        if self.method in ("POST", "PUT", "PATCH") or has_query:
            wanted.append("400")
        # On SQLite any request may have to write (a token's last use, the audit log): behind an import it can
        # answer 503 (console.busy).
        wanted.append("503")
        added = set()
        for code in sorted(wanted):
            if code not in responses:
                responses[code] = {"description": ERRORS[code], "content": {"application/json": {"schema": error}}}
                added.add(code)
        for code in ("429", "503"):
            if code in responses and (code == "429" or code in added):
                responses[code].setdefault(
                    "headers",
                    {"Retry-After": {"schema": {"type": "integer"}, "description": "seconds to wait before retrying"}},
                )
        return operation


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    """Every API error is `{"error": "<one line>"}` with a 4xx status; SQLite's "database is locked" (a write
    waiting behind an import) is a 503 with Retry-After (console.busy)."""
    if is_database_busy(exc):
        set_rollback()
        return busy_api_response()
    response = drf_exception_handler(exc, context)
    if response is not None:
        detail = response.data.get("detail") if isinstance(response.data, dict) else None
        if detail is None:
            detail = _flatten(response.data)
        response.data = {"error": str(detail)}
    return response


def _flatten(data: Any) -> str:
    if isinstance(data, dict):
        return "; ".join(f"{k}: {_flatten(v)}" for k, v in data.items())
    if isinstance(data, list):
        return "; ".join(_flatten(v) for v in data)
    return str(data)
