"""The audit log: who did what to the console, when, and how it arrived (DESIGN §8 roles, issue 7).

Every sign-in (and every refused one), sign-out and every reviewer and operator action is recorded with
`audit_record`. Call it from the service that does the action, inside its transaction, so that the entry
and the action commit or roll back together, and so that every way in (page, API, command line, worker)
is recorded once. A view calls it only for an action that has no service of its own.

How the action arrived (`via`) and the client's address come from the request when there is one: passed
in, or else the request being served (set by `AuditRequestMiddleware`). Outside a request, management
commands say `cli <os user>` and Celery tasks `worker` through `audit_via`; anything else is `system`.

Action names are `<noun>.<verb>` in the product's words, e.g. `auth.sign_in`, `run.import`,
`replay.create`, `token.issue`; `detail` holds what a reader needs to tell two entries apart (never a
secret: no token key, no password).
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from django.conf import settings
from django.utils import timezone

from .models import AuditEntry, HarnessToken

log = logging.getLogger("n17q.audit")

_request: ContextVar[Any] = ContextVar("n17q_audit_request", default=None)
_via: ContextVar[str | None] = ContextVar("n17q_audit_via", default=None)


def audit_record(*, actor: Any, action: str, target: str, detail: dict | None = None, request: Any = None) -> None:
    """Append one entry to the audit log. `actor` is the user who acted, or None (nobody signed in, system)."""
    request = request if request is not None else _request.get()
    user = actor if getattr(actor, "is_authenticated", False) else None
    # JSON-safe and detached from the caller's objects: what is stored is what was true now.
    clean = json.loads(json.dumps(detail or {}, default=str, ensure_ascii=False))
    entry = AuditEntry.objects.create(
        at=timezone.now(),
        actor=user.get_username()[:150] if user is not None else "",
        actor_user_id=user.pk if user is not None else None,
        via=_via_of(request)[:60],
        action=action[:60],
        target=str(target)[:300],
        detail=clean,
        ip=client_ip(request),
    )
    # DEBUG: the entry is in the database already; a command's refusal must stay one line on stderr.
    log.debug(
        "audit %s %s",
        entry.action,
        entry.target,
        extra={"audit": {"actor": entry.actor, "via": entry.via, "action": entry.action, "target": entry.target}},
    )


@contextlib.contextmanager
def audit_via(via: str) -> Iterator[None]:
    """Name how actions arrive while no request is being served (`cli <user>`, `worker`)."""
    token = _via.set(via)
    try:
        yield
    finally:
        _via.reset(token)


class AuditRequestMiddleware:
    """Make the request being served visible to `audit_record` called from a service deeper down."""

    def __init__(self, get_response: Callable[[Any], Any]) -> None:
        self.get_response = get_response

    def __call__(self, request: Any) -> Any:
        token = _request.set(request)
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)


def _via_of(request: Any) -> str:
    if request is not None:
        # DRF sets `auth` on the underlying HttpRequest too once it has authenticated the request.
        auth = getattr(request, "auth", None)
        if isinstance(auth, HarnessToken):
            return f"token {auth.prefix}"
        return "web"
    return _via.get() or "system"


def client_ip(request: Any) -> str | None:
    """The client's address: REMOTE_ADDR, or with N17Q_NUM_PROXIES trusted proxies in front, the address
    the outermost of them saw (the same rule DRF's throttles use, so both name the same client)."""
    if request is None:
        return None
    meta = getattr(request, "META", {})
    address = meta.get("REMOTE_ADDR", "")
    proxies = int(str(settings.REST_FRAMEWORK.get("NUM_PROXIES") or 0))
    forwarded = meta.get("HTTP_X_FORWARDED_FOR", "")
    if proxies and forwarded:
        hops = [part.strip() for part in forwarded.split(",") if part.strip()]
        if hops:
            address = hops[-min(proxies, len(hops))]
    try:
        return str(ipaddress.ip_address(address))
    except ValueError:
        return None


# Sign-ins and sign-outs, from django.contrib.auth's signals (connected in RunsConfig.ready).


def on_user_logged_in(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    audit_record(actor=user, action="auth.sign_in", target=user.get_username(), request=request)


def on_user_logged_out(sender: Any, request: Any, user: Any, **kwargs: Any) -> None:
    if user is not None:
        audit_record(actor=user, action="auth.sign_out", target=user.get_username(), request=request)


def on_user_login_failed(sender: Any, credentials: dict[str, Any], request: Any = None, **kwargs: Any) -> None:
    # The name that was tried is kept (an attack on one account is visible); the password never is
    # (Django masks it in `credentials` already, and it is not read here).
    username = str(credentials.get("username", ""))[:150]
    audit_record(actor=None, action="auth.sign_in_refused", target=username, request=request)


# Changes made in the Django admin (users, their roles, tokens): Django writes a LogEntry for each; the audit log
# gets one entry too, so that who gave whom which role is read in one place (connected in RunsConfig.ready).

_ADMIN_ACTIONS = {1: "admin.add", 2: "admin.change", 3: "admin.delete"}


def on_admin_log_entry(sender: Any, instance: Any, created: bool, **kwargs: Any) -> None:
    if not created:
        return
    audit_record(
        actor=instance.user,
        action=_ADMIN_ACTIONS.get(instance.action_flag, "admin.action"),
        target=f"{instance.content_type.app_label}.{instance.content_type.model}:{instance.object_repr}"[:300],
        detail={"object_id": instance.object_id, "change": instance.get_change_message()},
    )
