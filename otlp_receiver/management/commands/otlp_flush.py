from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from otlp_receiver import services, wire


class Command(JsonCommand):
    help = (
        "Make received OTLP traces runs now, in this process: the trace named (whether or not its root span has "
        "ended), else every trace due (root ended, quiet for N17Q_OTLP_QUIET_SECONDS), or with --all every trace "
        "still receiving. With --user, as that user: only the traces they opened (every trace for an admin)."
    )

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("trace_id", nargs="?", help="32 hex digits")
        parser.add_argument("--all", dest="everything", action="store_true", help="every trace still receiving")
        parser.add_argument(
            "--user",
            help="flush as this user: a trace someone else opened is refused (and audited) unless they are an admin",
        )
        super().add_arguments(parser)

    def run(self, *, trace_id: str | None, everything: bool, user: str | None, **options: Any) -> dict[str, Any]:
        acting = None
        if user is not None:
            acting = get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: user}).first()
            if acting is None:
                raise CommandError(f"there is no user {user!r}")
        if trace_id is not None:
            wanted = wire.hex_or_none(trace_id)
            if wanted is None:
                raise CommandError(f"{trace_id!r} is not a trace id (32 hex digits)")
            try:
                done = services.traces_flush([wanted], user=acting)
            except services.TraceRefused as exc:
                raise CommandError(str(exc)) from None
            if not done:
                raise CommandError(f"no trace {wanted} was received")
            if done[0].state == done[0].State.REFUSED:
                raise CommandError(f"trace {wanted} was not imported: {done[0].error}")
        else:
            done = services.traces_flush(everything=everything, user=acting)
        traces = [services.trace_json(t) for t in done]
        return {"traces": traces, "runs": [t["run"] for t in traces if t["run"] and t["state"] == "finalized"]}

    def human(self, result: dict[str, Any]) -> str:
        if not result["traces"]:
            return "no trace to flush"
        return "\n".join(
            f"{t['trace_id']}: {t['state']}, {t['spans']} spans"
            + (f" -> run {t['run']}" if t["run"] else "")
            + (f" ({t['error']})" if t["error"] else "")
            for t in result["traces"]
        )
