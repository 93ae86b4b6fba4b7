"""Harness tokens for the REST API: `Authorization: Token <key>` (or `Bearer <key>`)."""

from __future__ import annotations

from typing import Any

from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions, permissions

from .models import HarnessToken
from .throttles import TokenFailureThrottle


class HarnessTokenAuthentication(authentication.BaseAuthentication):
    keywords = ("token", "bearer")

    def authenticate(self, request: Any) -> tuple[Any, HarnessToken] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].decode("latin-1").lower() not in self.keywords:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("the Authorization header must be 'Token <key>'")
        failures = TokenFailureThrottle()
        wait = failures.wait_before_trying(request)
        if wait is not None:
            # Too many wrong keys from this client: answer 429 before looking this one up.
            raise exceptions.Throttled(wait=wait, detail="too many refused tokens from this address; wait and retry")
        try:
            key = header[1].decode("ascii")
        except UnicodeDecodeError:
            failures.record_failure(request)
            raise exceptions.AuthenticationFailed("the token is not ASCII") from None
        token = (
            HarnessToken.objects.select_related("user")
            .filter(key_digest=HarnessToken.digest_key(key), revoked_at__isnull=True)
            .first()
        )
        if token is None or not token.user.is_active:
            failures.record_failure(request)
            raise exceptions.AuthenticationFailed("unknown or revoked token")
        HarnessToken.objects.filter(pk=token.pk).update(last_used_at=timezone.now())
        return token.user, token

    def authenticate_header(self, request: Any) -> str:
        return "Token"


class HasScope(permissions.BasePermission):
    """A request made with a harness token may do only what the token's scopes name: every one of `token_scopes`.

    Requests made in a browser session are judged by the user's role alone. Every API operation declares the scopes
    it needs through one of these among its permissions (`scoped`, `AnyTokenScope`), and the OpenAPI schema lists
    them (`x-required-scopes`, console.openapi.declared_token_scopes); tests/accounts/test_scopes.py walks the
    URLconf so that no operation goes without a declaration.
    """

    message = "this token's scopes do not allow this request"
    token_scopes: tuple[str, ...] = ()  # the name console.openapi.declared_token_scopes reads

    def has_permission(self, request: Any, view: Any) -> bool:
        token = request.auth
        if isinstance(token, HarnessToken):
            held = set(token.scopes or [])
            return all(scope in held for scope in self.token_scopes)
        return True


def scoped(*scopes: str) -> type[HasScope]:
    """The permission a token needs for an operation: all of `scopes`. `scoped()` declares that any token may."""
    names = "_".join(scope.replace(":", "_") for scope in scopes) or "any"
    return type(f"HasScope_{names}", (HasScope,), {"token_scopes": tuple(scopes)})


# Declared, not forgotten: an operation any signed-in token may use (the schema, which holds no data; /health/).
AnyTokenScope = scoped()

# A token reads runs (their list, summary, lineage, findings, results) when its scopes name runs: `runs:import` (a
# harness reads back what it imports). A capture token names captures only and reads nothing (issue 5).
READ_RUNS = HarnessToken.Scope.IMPORT_RUNS


class DjangoPerm(permissions.BasePermission):
    perm = ""

    def has_permission(self, request: Any, view: Any) -> bool:
        return bool(request.user and request.user.is_authenticated and request.user.has_perm(self.perm))


def requires_perm(perm: str) -> type[permissions.BasePermission]:
    return type(f"Requires_{perm.replace('.', '_')}", (DjangoPerm,), {"perm": perm, "message": f"needs {perm}"})


class HarnessTokenScheme(OpenApiAuthenticationExtension):
    target_class = "accounts.auth.HarnessTokenAuthentication"
    name = "harnessToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "`Token <key>` for a scoped harness token issued by an admin",
        }
