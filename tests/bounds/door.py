"""The upload doors, served to the amplification suite (tests/bounds): `python -m tests.bounds.door` sets Django up
once (its data directory holds a migrated SQLite database), then for each case it reads from stdin (a JSON line:
`door`, `input`, `content_type`, `encoding`, `query`, `database`, a copy of the migrated database for this case) forks
a process that runs the door once, so that the peak memory it reports is that one request's; the hang guard is the
parent test's timeout on the answer.

Doors: `runs` (POST /api/v1/runs/, the file as `bundle`), `otlp` (POST /v1/traces), `captures`
(POST /api/v1/captures/), `import_run` (the management command). Answers one JSON line per case: `status` (the HTTP
status, or 0 for a command that succeeded and 1 for one that refused), `message` (the refusal's text, whole),
`grew_kib` (the case's peak resident memory above its resident memory just before the request) and `children_kib`
(the largest peak of its child processes, the converting process or the events checker, above the case's size
before the request: a child's own baseline below that is not seen, so it bounds what a hostile input made a child
grow).
"""

from __future__ import annotations

import gc
import io
import json
import os
import resource
import sys
import time
from pathlib import Path


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(f"{field}:"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def _reset_peak() -> None:
    """Set this process's peak resident memory (VmHWM) to what it holds now (Linux >= 4.0), so that the peak read
    after the request is the request's. Not ru_maxrss: Linux carries the parent's peak into it across fork and exec,
    and pytest's process is larger than anything measured here."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    except OSError:
        pass  # then VmHWM is the process's peak since it started, at least the request's: a looser bound


def _otlp_message(response) -> str:
    if response["Content-Type"].startswith("application/json"):
        return str(json.loads(response.content).get("message", ""))
    data = response.content
    # google.rpc.Status: field 1 (code, varint), field 2 (message, length-delimited).
    i = 0
    while i < len(data):
        tag = data[i]
        i += 1
        length = shift = 0
        while True:
            byte = data[i]
            i += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        if tag == 0x12:
            return data[i : i + length].decode("utf-8", "replace")
        if tag != 0x08:
            i += length
    return ""


def _serve_one(case: dict, key: str) -> dict:
    """In a forked child: this case's database, then the door once, measured."""
    from django.core.management import call_command
    from django.core.management.base import CommandError
    from django.db import connections
    from django.test import Client

    connections["default"].settings_dict["NAME"] = case["database"]
    client = Client()
    path = Path(case["input"])
    door, content_type, encoding, query = case["door"], case["content_type"], case["encoding"], case["query"]
    data = b"" if door in ("runs", "import_run") else path.read_bytes()
    gc.collect()
    _reset_peak()
    before = _status_kib("VmRSS")
    started = time.perf_counter()

    message = ""
    if door == "import_run":
        out = io.StringIO()
        try:
            call_command("import_run", str(path), "--json", stdout=out)
            status = 0
        except CommandError as exc:
            status, message = 1, str(exc)
    elif door == "runs":
        with open(path, "rb") as fh:  # sent under its own file name (the parent names it)
            response = client.post("/api/v1/runs/", {"bundle": fh}, HTTP_AUTHORIZATION=f"Token {key}")
        status = response.status_code
        message = response.json().get("error", "") if status >= 400 else ""
    elif door == "otlp":
        headers = {"HTTP_CONTENT_ENCODING": encoding} if encoding else {}
        response = client.post(
            "/v1/traces", data=data, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {key}", **headers
        )
        status = response.status_code
        message = _otlp_message(response) if status >= 400 else ""
    else:
        response = client.post(
            f"/api/v1/captures/{'?' + query if query else ''}",
            data=data,
            content_type=content_type,
            HTTP_AUTHORIZATION=f"Token {key}",
        )
        status = response.status_code
        message = response.json().get("error", "") if status >= 400 else ""
    seconds = time.perf_counter() - started  # for benchmarks/bench_upload_doors.py: the tests judge no time
    peak = _status_kib("VmHWM")
    # A child's ru_maxrss starts at this process's size when it was started (fork and exec carry it): what is above
    # this process's size before the request is what the child (or this request) added.
    children = max(0, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss - before)
    return {
        "status": status,
        "message": message,
        "grew_kib": max(0, peak - before),
        "children_kib": children,
        "seconds": seconds,
    }


def main() -> int:
    """Set Django up once, make the operator and its token in the migrated database, then serve cases from stdin."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "n17q_site.settings")
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import connections
    from django.test.utils import setup_test_environment

    # Loaded before any case, so that what a request costs is the request's, not the first import's.
    import fixtures_review.api  # noqa: F401
    import n17q_engine.formats.inspect_log
    import n17q_engine.formats.otlp  # noqa: F401
    import otlp_receiver.views  # noqa: F401
    import runs.api
    import runs.management.commands.import_run  # noqa: F401
    from accounts.models import HarnessToken

    setup_test_environment()
    user = get_user_model().objects.create_user("bounds-operator", password=None)
    user.groups.add(Group.objects.get(name="operator"))
    key = HarnessToken.new_key()
    HarnessToken.objects.create(
        name="bounds",
        user=user,
        key_digest=HarnessToken.digest_key(key),
        prefix=key[:9],
        scopes=[HarnessToken.Scope.IMPORT_RUNS, HarnessToken.Scope.CAPTURE],
    )
    connections.close_all()  # the template database is copied for each case: nothing of it stays open
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        case = json.loads(line)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the case, in a process of its own: its peak memory is its own
            os.close(read)
            try:
                result = _serve_one(case, key)
            except BaseException as exc:  # a door that raises is a 500: said as such, never a hang
                result = {"status": 500, "message": f"{type(exc).__name__}: {exc}"[:2000], "grew_kib": 0}
                result["children_kib"] = 0
            os.write(write, json.dumps(result).encode())
            os._exit(0)
        os.close(write)
        with os.fdopen(read, "rb") as fh:
            answer = fh.read()
        os.waitpid(pid, 0)
        print(answer.decode() or json.dumps({"status": 500, "message": "the case's process died"}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
