"""The database side of benchmarks/bench_load.py, one command per fresh interpreter (the stack's own settings).

    python -m benchmarks._load_child prepare CLIENTS          users, tokens, the demo
    python -m benchmarks._load_child launch SPEC_JSON         replays launched as an operator would: ids
    python -m benchmarks._load_child states IDS_JSON          each replay's state
    python -m benchmarks._load_child verify IDS_FILE RUNS_FILE  what the drills count (lost, duplicated, ...)

The parent sets DATABASE_URL, REDIS_URL and the rest, and reads the line starting with N17Q-BENCH-RESULT.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

from benchmarks.common import RESULT_MARK

ACTIVE = ("queued", "running")
PASSWORD = "load-test-password-1"


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "n17q_site.settings")
    import django

    django.setup()


def prepare(clients: int) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.core.management import call_command

    from accounts.models import HarnessToken

    with open(os.devnull, "w") as quiet:
        call_command("load_demo", verbosity=0, stdout=quiet)
    users, tokens = [], []
    operator = Group.objects.get(name="operator")
    for n in range(clients):
        user, _ = get_user_model().objects.get_or_create(username=f"load-{n:02d}")
        user.set_password(PASSWORD)
        user.save()
        user.groups.set([operator])
        key = HarnessToken.new_key()
        HarnessToken.objects.create(
            name=f"load-{n:02d}",
            user=user,
            key_digest=HarnessToken.digest_key(key),
            prefix=key[:9],
            scopes=[HarnessToken.Scope.IMPORT_RUNS],
        )
        users.append(user.username)
        tokens.append(key)
    return {"users": users, "password": PASSWORD, "tokens": tokens}


def launch(spec: list[dict[str, str]]) -> dict[str, Any]:
    """Launch each replay through the same service the console's buttons use, enqueued for the workers."""
    from replays import services as replays
    from runs.models import Run

    ids = []
    for item in spec:
        run = Run.objects.get(run_id=item["run"])
        if hasattr(replays, "replay_launch"):  # helper C's launch service (create + enqueue on commit)
            replay = replays.replay_launch(run, mode=item["mode"])
        else:
            from replays.tasks import replay_run

            replay = replays.replay_create(run, mode=item["mode"])
            replay_run.delay(replay.pk)
        ids.append(replay.pk)
    return {"ids": ids}


def states(ids: list[int]) -> dict[str, Any]:
    from replays.models import Replay

    return {"states": {str(pk): state for pk, state in Replay.objects.filter(pk__in=ids).values_list("pk", "state")}}


def verify(ids: list[int], imported: dict[str, int]) -> dict[str, Any]:
    """Counts for the drills. `imported`: run id -> events, for every import the load was answered 201 for."""
    from django.db.models import Count

    from replays.models import Replay
    from runs.models import Event, Finding, Run

    replays = list(Replay.objects.filter(pk__in=ids).select_related("run", "source_run"))
    by_state: dict[str, int] = {}
    for r in replays:
        by_state[r.state] = by_state.get(r.state, 0) + 1
    lost = [r.pk for r in replays if r.state in ACTIVE] + [pk for pk in ids if pk not in {r.pk for r in replays}]
    # Runs a replay produced, found by the id scheme rather than by the replay's link: a second execution that
    # imported a run of its own would show here even if the replay row points at only one of them.
    prefixes = {r.pk: f"{r.source_run.run_id}~{r.mode}-{r.pk}" for r in replays}
    runs_per_replay = {pk: Run.objects.filter(run_id__startswith=prefix).count() for pk, prefix in prefixes.items()}
    duplicated_replay_runs = sum(max(0, n - 1) for n in runs_per_replay.values())
    finished = [r for r in replays if r.state == "finished" and r.run is not None]
    # The same replay twice gives byte-identical logs: every finished replay of one (source, mode) has the
    # same number of events; a duplicated event would stand out.
    counts: dict[str, set[int]] = {}
    for r in finished:
        assert r.run is not None  # kept by the filter above
        counts.setdefault(f"{r.source_run.run_id} {r.mode}", set()).add(r.run.event_count)
    stored = {
        row["run__run_id"]: row["n"]
        for row in Event.objects.filter(run__run_id__in=list(imported))
        .values("run__run_id")
        .annotate(n=Count("id"))
        .values("run__run_id", "n")
    }
    missing_imports = [run for run in imported if run not in stored]
    wrong_event_counts = [run for run, n in imported.items() if run in stored and stored[run] != n]
    duplicate_seq = (
        Event.objects.filter(run__run_id__in=list(imported))
        .values("run_id", "seq")
        .annotate(n=Count("id"))
        .filter(n__gt=1)
        .count()
    )
    return {
        "replays": len(ids),
        "by_state": by_state,
        "lost": lost,
        "duplicated_replay_runs": duplicated_replay_runs,
        "event_counts_per_source": {k: sorted(v) for k, v in counts.items()},
        "inconsistent_replay_event_counts": [k for k, v in counts.items() if len(v) > 1],
        "duplicate_consequence_findings": Finding.objects.filter(
            run__in=[r.run for r in finished], code="LIN012"
        ).count(),
        "errors": {str(r.pk): r.error for r in replays if r.state not in ("finished",) and r.error},
        "imports_acknowledged": len(imported),
        "imports_missing": missing_imports,
        "imports_wrong_event_count": wrong_event_counts,
        "imports_duplicate_seq": duplicate_seq,
    }


def main(argv: list[str]) -> None:
    _setup()
    command = argv[0]
    if command == "prepare":
        result = prepare(int(argv[1]))
    elif command == "launch":
        result = launch(json.loads(argv[1]))
    elif command == "states":
        result = states(json.loads(argv[1]))
    elif command == "verify":
        result = verify(json.loads(Path(argv[1]).read_text()), json.loads(Path(argv[2]).read_text()))
    else:
        raise SystemExit(f"unknown command {command}")
    print(RESULT_MARK + json.dumps(result, default=str), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
