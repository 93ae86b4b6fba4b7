"""The run doors: a run bundle through `import_run`, `POST /api/v1/runs/` and the import page; OTLP files
(protobuf, JSON) through the file door; an Inspect AI log (`.eval`, `.json`, written by a real eval) through
`import_run` and the API; and the OTLP/HTTP receiver (`POST /v1/traces`, protobuf and JSON), its trace then
finalized into a run."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import call_command
from django.urls import reverse

from accounts.models import HarnessToken
from otlp_receiver.models import ReceivedTrace
from runs.models import Run
from tests import bundles
from tests.runs.test_api import token_for, upload

from . import reader, spans
from .canaries import Canaries

pytestmark = pytest.mark.django_db(transaction=True)

PRODUCER = Path(__file__).parent / "inspect_producer.py"


def import_run(path: Path) -> dict:
    out = io.StringIO()
    call_command("import_run", str(path), "--json", stdout=out)
    return json.loads(out.getvalue())


def bundle(c: Canaries, tmp_path: Path) -> Path:
    """The example bundle with every canary in it: the run's title, a tool call's request, a result's blob, a
    command's output blob, a state's reason."""
    manifest, events, blobs = bundles.example_parts()
    manifest["run"]["title"] = f"deploy with {c.github.value}"
    call = next(e for e in events if e["kind"] == "tool.call")
    call["request"]["note"] = c.environment_text()
    result = next(e for e in events if e["kind"] == "tool.result" and e.get("blob"))
    old = result["blob"]
    blobs, new = bundles.with_blob(blobs, json.dumps(c.document()).encode())
    manifest["blobs"][new] = {**manifest["blobs"].pop(old), "size": len(blobs[new])}
    del blobs[old]
    result["blob"] = new
    last = events[-1]
    events.append({"seq": last["seq"] + 1, "id": "e-canary-state", "kind": "run.state", "at": last["at"],
                   "attempt": last.get("attempt"), "state": "completed", "reason": c.prose()})  # fmt: skip
    folder = bundles.write_folder(tmp_path / "bundle", manifest, events, blobs)
    return bundles.zip_folder(folder, tmp_path / "bundle.zip")


def inspect_logs(c: Canaries, out: Path) -> dict[str, Path]:
    """An `.eval` and a `.json` log of a real Inspect eval (mock model) holding every canary."""
    texts = {
        "input": "Rotate the keys. Context:\n" + "\n".join(text for _, text in c.in_context()),
        "tool_output": c.environment_text(),
        "answer": f"Done: {c.prose()}",
        "metadata": c.document(),
    }
    (out / "texts.json").write_text(json.dumps(texts))
    home = out / "home"
    env = {**os.environ, "INSPECT_DISPLAY": "none", "HOME": str(home), "XDG_DATA_HOME": str(home / "data"),
           "XDG_CACHE_HOME": str(home / "cache"), "XDG_CONFIG_HOME": str(home / "config"), "INSPECT_TELEMETRY": "",
           "NO_COLOR": "1"}  # fmt: skip
    env.pop("INSPECT_EVAL_MODEL", None)
    done = subprocess.run(
        [sys.executable, str(PRODUCER), str(out / "logs"), str(out / "texts.json")],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (out / "texts.json").unlink()
    logs = {fmt: sorted((out / "logs" / fmt).glob(f"*.{fmt}")) for fmt in ("eval", "json")}
    assert all(len(v) == 1 for v in logs.values()), logs
    return {fmt: paths[0] for fmt, paths in logs.items()}


# ---------------------------------------------------------------------------------------------- run bundles


def test_bundle_command(sweep, tmp_path):
    answer = import_run(bundle(sweep.canaries, tmp_path))
    assert Run.objects.filter(run_id=answer["run"]).exists()
    sweep.check("run bundle (import_run)")


def test_bundle_api(sweep, client, role_user, tmp_path):
    key = token_for(role_user("operator"), HarnessToken.Scope.IMPORT_RUNS)
    response = upload(client, bundle(sweep.canaries, tmp_path).read_bytes(), HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 201, response.content[:500]
    sweep.check("run bundle (API)")


def test_bundle_page(sweep, client, role_user, tmp_path):
    client.force_login(role_user("operator"))
    upload = io.BytesIO(bundle(sweep.canaries, tmp_path).read_bytes())
    upload.name = "bundle.zip"
    response = client.post(reverse("runs:run-import"), {"bundle": upload})
    assert response.status_code == 302 and Run.objects.count() == 1, response.content[:500]
    sweep.check("run bundle (import page)")


def test_bundle_export(sweep, client, role_user, tmp_path):
    # The way out (issue 38, point 5): a run exported as a bundle holds what the console stored, masked; its bytes
    # are searched as the sweep searches stored files (zip members and every layer inside them opened).
    answer = import_run(bundle(sweep.canaries, tmp_path))
    client.force_login(role_user("viewer"))
    response = client.get(f"/runs/{answer['run']}/export/")
    assert response.status_code == 200
    data = b"".join(response.streaming_content)
    finder = reader.Finder([*sweep.canaries.all])
    hits = reader.search(finder, "export", "bundle.zip", data)
    assert [hit.line("run bundle export") for hit in hits] == []
    assert len(reader.search(finder, "control", "the bundle imported", bundle(sweep.canaries, tmp_path).read_bytes()))
    # The same run as OTLP JSON (its events whole, as stored): the same search finds nothing either.
    response = client.get(f"/runs/{answer['run']}/export/?format=otlp-json")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    data = b"".join(response.streaming_content)
    assert json.loads(data)["resourceSpans"][0]["scopeSpans"][0]["spans"]
    hits = reader.search(finder, "export", "run.otlp.json", data)
    assert [hit.line("run OTLP JSON export") for hit in hits] == []
    sweep.check("run bundle export (web)")


# ---------------------------------------------------------------------------------------------- OTLP files


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_otlp_file(sweep, tmp_path, encoding):
    path = tmp_path / "spans.bin"
    path.write_bytes(spans.protobuf(sweep.canaries) if encoding == "protobuf" else spans.json_file(sweep.canaries))
    answer = import_run(path)
    assert Run.objects.filter(run_id=answer["run"]).exists()
    sweep.check(f"OTLP file ({encoding}, import_run)")


# ---------------------------------------------------------------------------------------------- Inspect AI logs


@pytest.fixture(scope="module")
def inspect_made(tmp_path_factory) -> tuple[Canaries, dict[str, Path]]:
    """One real eval for the module's three Inspect doors (it takes seconds): its own canaries."""
    canaries = Canaries.fresh()
    return canaries, inspect_logs(canaries, tmp_path_factory.mktemp("inspect"))


@pytest.mark.parametrize("fmt", ["eval", "json"])
def test_inspect_log_command(sweep, inspect_made, fmt):
    sweep.use(inspect_made[0])
    log = inspect_made[1][fmt]
    answer = import_run(log)
    assert Run.objects.filter(run_id=answer["run"]).exists()
    sweep.check(f"Inspect .{fmt} (import_run)")


def test_inspect_log_api(sweep, client, role_user, inspect_made):
    sweep.use(inspect_made[0])
    log = inspect_made[1]["eval"]
    key = token_for(role_user("operator"), HarnessToken.Scope.IMPORT_RUNS)
    response = upload(client, log.read_bytes(), name=log.name, HTTP_AUTHORIZATION=f"Token {key}")
    assert response.status_code == 201, response.content[:500]
    sweep.check("Inspect .eval (API)")


# ---------------------------------------------------------------------------------------------- OTLP receiver


@pytest.mark.parametrize("encoding", ["protobuf", "json"])
def test_otlp_receiver(sweep, client, role_user, encoding):
    key = token_for(role_user("operator", "exporter"), HarnessToken.Scope.IMPORT_RUNS)
    if encoding == "protobuf":
        data, content_type = spans.protobuf(sweep.canaries), "application/x-protobuf"
    else:
        data, content_type = spans.json_file(sweep.canaries), "application/json"
    response = client.post(
        reverse("otlp:export-traces"), data=data, content_type=content_type, HTTP_AUTHORIZATION=f"Bearer {key}"
    )
    assert response.status_code == 200, response.content[:500]
    trace = ReceivedTrace.objects.get()
    out = io.StringIO()
    call_command("otlp_flush", trace.trace_id, "--json", stdout=out)
    (done,) = json.loads(out.getvalue())["traces"]
    assert done["state"] == "finalized" and Run.objects.filter(run_id=done["run"]).exists(), done
    sweep.check(f"OTLP receiver ({encoding})")
