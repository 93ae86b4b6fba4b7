"""Health of a running console: database, broker, worker heartbeat; replays by state and queue depth.

`health_report()` is what `/health/` answers. Each check says ok or not, how long it took and, when not, why.
The report's status is `ok` when every check asked for passed and `down` otherwise; the view answers 200 or
503 accordingly, so a load balancer or a compose health check can read the code alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import connection
from django.db.models import Count
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from accounts.auth import AnyTokenScope
from replays.models import Replay, WorkerHeartbeat

CHECKS = ("database", "broker", "worker")


def _timed(check: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    started = time.perf_counter()
    try:
        result = {"ok": True, **check()}
    except Exception as exc:
        result = {"ok": False, "error": f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"}
    result["ms"] = round((time.perf_counter() - started) * 1000, 1)
    return result


def check_database() -> dict[str, Any]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return {"vendor": connection.vendor}


def _broker_connection() -> Any:
    from n17q_site.celery import app

    return app.connection_for_read(connect_timeout=2, transport_options={"socket_timeout": 2})


def _default_queue() -> str:
    from n17q_site.celery import app

    return app.conf.task_default_queue


def check_broker() -> dict[str, Any]:
    """The broker answers, and how many replay messages wait in the default queue (and are held by workers)."""
    # The queue replays are sent to (N17Q_REPLAY_QUEUE), else Celery's default queue.
    queue = getattr(settings, "N17Q_REPLAY_QUEUE", "") or _default_queue()
    with _broker_connection() as conn:
        conn.ensure_connection(max_retries=1, timeout=2)
        channel = conn.default_channel
        # A passive declare of a queue that does not exist yet (no message ever sent) fails on some transports:
        # that is an empty queue, not a broken broker.
        try:
            _name, depth, _consumers = channel.queue_declare(queue=queue, passive=True)
        except Exception:
            if not conn.connected:
                raise
            depth = 0
        result: dict[str, Any] = {"transport": conn.transport_cls, "queue": queue, "queue_depth": depth}
        client = getattr(channel, "client", None)
        if client is not None and hasattr(client, "hlen"):
            # Redis: messages a worker has taken but not acknowledged yet (acks_late: until the replay ends).
            result["reserved"] = client.hlen(getattr(channel, "unacked_key", "unacked"))
    return result


def check_worker() -> dict[str, Any]:
    """At least one worker has beaten recently (within three intervals) and has not said it stopped."""
    fresh_after = timezone.now() - timedelta(seconds=3 * settings.N17Q_HEARTBEAT_S)
    workers = list(
        WorkerHeartbeat.objects.filter(stopped_at__isnull=True, last_seen_at__gte=fresh_after)
        .order_by("hostname")
        .values("hostname", "last_seen_at")
    )
    if not workers:
        latest = WorkerHeartbeat.objects.order_by("-last_seen_at").values("hostname", "last_seen_at").first()
        seen = f"; last seen {latest['hostname']} at {latest['last_seen_at']:%Y-%m-%dT%H:%M:%SZ}" if latest else ""
        raise RuntimeError(f"no worker heartbeat in the last {3 * settings.N17Q_HEARTBEAT_S} s{seen}")
    now = timezone.now()
    return {
        "workers": [
            {"hostname": w["hostname"], "age_s": round((now - w["last_seen_at"]).total_seconds(), 1)} for w in workers
        ]
    }


def replay_counts() -> dict[str, int]:
    """Replays by state: every state is listed, zero included, so a dashboard sees a state empty out."""
    counts = dict.fromkeys(Replay.State.values, 0)
    for row in Replay.objects.order_by().values("state").annotate(n=Count("id")):
        counts[row["state"]] = row["n"]
    return counts


def health_report(checks: tuple[str, ...] = CHECKS) -> dict[str, Any]:
    runners = {"database": check_database, "broker": check_broker, "worker": check_worker}
    results = {name: _timed(runners[name]) for name in checks}
    report: dict[str, Any] = {
        "status": "ok" if all(r["ok"] for r in results.values()) else "down",
        "checks": results,
    }
    if results.get("database", {}).get("ok"):
        report["replays"] = replay_counts()
    if results.get("broker", {}).get("ok"):
        report["queue_depth"] = results["broker"]["queue_depth"]
    return report


class HealthApi(APIView):
    """`/health/`: for load balancers and compose health checks (no sign-in), and for people (details)."""

    # No sign-in, so no scope either: a load balancer holds no token (declared, like every API operation's scopes).
    permission_classes = [AllowAny, AnyTokenScope]

    class Output(serializers.Serializer):
        status = serializers.ChoiceField(choices=["ok", "down"])
        checks = serializers.DictField(
            child=serializers.DictField(),
            help_text="per check (database, broker, worker): `ok`, and when signed in `ms`, `error` and details",
        )
        replays = serializers.DictField(
            child=serializers.IntegerField(), required=False, help_text="replays by state (signed in)"
        )
        queue_depth = serializers.IntegerField(
            required=False, help_text="replay messages waiting in the broker's queue (signed in)"
        )

    @extend_schema(
        summary="Health: database, broker, worker heartbeat; replays by state and queue depth",
        description="200 when every check asked for passes, 503 when one fails. Anyone may ask for the status and "
        "which checks pass; a signed-in user (or a harness token) also gets timings, errors, the workers seen, "
        "replays by state and the queue depth. `?check=database,broker` limits the checks (a web container's "
        "own health check needs no worker).",
        parameters=[
            OpenApiParameter(
                "check",
                str,
                OpenApiParameter.QUERY,
                required=False,
                description=f"comma-separated, any of {', '.join(CHECKS)} (default: all)",
            )
        ],
        responses={200: Output, 503: Output},
    )
    def get(self, request: Request) -> Response:
        asked = request.query_params.get("check")
        checks = tuple(c.strip() for c in asked.split(",") if c.strip()) if asked is not None else CHECKS
        unknown = sorted(set(checks) - set(CHECKS))
        if unknown or not checks:
            raise exceptions.ValidationError(f"check: one or more of {', '.join(CHECKS)}")
        report = health_report(checks)
        if not (request.user and request.user.is_authenticated):
            report = {"status": report["status"], "checks": {k: {"ok": v["ok"]} for k, v in report["checks"].items()}}
        code = status.HTTP_200_OK if report["status"] == "ok" else status.HTTP_503_SERVICE_UNAVAILABLE
        return Response(report, status=code, headers={"Cache-Control": "no-store"})
