"""Every page and every API operation needs a role, checked in one place the routes cannot forget.

Signing in proves who someone is, not that they may read: a user whose role was removed keeps a working session.
`RoleRequiredMiddleware` refuses every page to a signed-in user without the read permission every role holds
(`READ_PERM`), before the view runs; the REST API's default permission class (`HasRole`, REST_FRAMEWORK's
DEFAULT_PERMISSION_CLASSES) does the same for every API operation. What needs more than reading (importing,
launching, capturing, reviewing) is checked by its view or service on top. Exempt, by declaration only: views
marked `login_not_required` (sign-in, health) or `role_not_required` (sign-out), and the Django admin, which checks
staff status and model permissions itself. `tests/accounts/test_permissions.py` walks every URL pattern.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from rest_framework import permissions

READ_PERM = "runs.view_run"
NO_ROLE = "your account holds no role in this console: ask an admin to give you one"


def has_role(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and user.has_perm(READ_PERM))


def role_not_required(view: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a page any signed-in user may open, role or not (signing out)."""
    view.role_required = False  # type: ignore[attr-defined]
    return view


class RoleRequiredMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        return self.get_response(request)

    def process_view(self, request: HttpRequest, view_func: Any, view_args: Any, view_kwargs: Any) -> None:
        if not getattr(view_func, "login_required", True) or not getattr(view_func, "role_required", True):
            return None
        match = request.resolver_match
        if match is not None and "admin" in match.namespaces:
            return None  # the Django admin: staff status and model permissions
        from rest_framework.views import APIView  # not at import: DRF's views import this module's HasRole

        view_class = getattr(view_func, "cls", None)
        if isinstance(view_class, type) and issubclass(view_class, APIView):
            return None  # the API: its permission classes (HasRole by default) answer, in JSON
        if not request.user.is_authenticated:
            return None  # LoginRequiredMiddleware sends the visitor to sign in
        if not has_role(request.user):
            raise PermissionDenied(NO_ROLE)
        return None


class HasRole(permissions.BasePermission):
    """The API's default: signed in (session or harness token) and holding a role."""

    message = NO_ROLE

    def has_permission(self, request: Any, view: Any) -> bool:
        return has_role(request.user)
