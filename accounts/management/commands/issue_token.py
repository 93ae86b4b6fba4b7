from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError
from django.db import transaction

from accounts.audit import audit_record
from accounts.cli import JsonCommand
from accounts.models import HarnessToken


class Command(JsonCommand):
    help = "Issue a scoped harness token for a user. The key is printed once; only its digest is kept."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("username")
        parser.add_argument("--name", required=True)
        parser.add_argument("--scope", action="append", choices=HarnessToken.Scope.values, required=True)
        super().add_arguments(parser)

    def run(self, *, username: str, name: str, scope: list[str], **options: Any) -> dict[str, Any]:
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        if HarnessToken.Scope.CAPTURE in scope and len(set(scope)) > 1:
            raise CommandError(f"a {HarnessToken.Scope.CAPTURE} token can only capture: issue it with that scope alone")
        key = HarnessToken.new_key()
        with transaction.atomic():
            token = HarnessToken.objects.create(
                name=name, user=user, key_digest=HarnessToken.digest_key(key), prefix=key[:9], scopes=sorted(set(scope))
            )
            # The command line has no signed-in user: the entry says `cli <os user>` and names the token's owner.
            audit_record(
                actor=None,
                action="token.issue",
                target=str(token),
                detail={"token": token.pk, "owner": username, "scopes": token.scopes, "prefix": token.prefix},
            )
        return {"name": name, "user": username, "scopes": sorted(set(scope)), "token": key}
