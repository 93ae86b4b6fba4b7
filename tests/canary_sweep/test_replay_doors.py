"""The replay doors: an agent run in the sandbox, its model relayed by the worker to a declared live model (a
loopback OpenAI-compatible provider). What the agent says (its requests, its stderr) is its output; what the
provider answers comes in through the relay; the worker's credential is a canary too. Each is recorded by the
worker into the replay's run: none may be stored in clear."""

from __future__ import annotations

import io
import json
import secrets
import shutil
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import Client

from n17q_engine.agent.model import MODEL_TOOL, completion
from replays.models import Replay
from runs.models import Event
from tests.engine.test_agent_decider import _isolation_or_skip
from tests.replays.model_connections import approve_model_connection
from tests.replays.test_replay_pages import launched

from .canaries import Canaries, Canary

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
]

AGENT = Path(__file__).parent / "agents" / "canary_agent.py"


class Provider:
    """A chat-completions endpoint on the loopback: every answer is `answer`."""

    def __init__(self, answer: str) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
                data = json.dumps(completion(answer, model=body["model"], number=1)).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def no_broker(monkeypatch):
    from replays import services

    monkeypatch.setattr(services, "replay_enqueue", lambda pk: True)


def test_agent_output_and_model_relay(
    sweep, tmp_path, role_user, monkeypatch, no_broker, django_capture_on_commit_callbacks
):
    """One replay, two doors, two canary sets (a replay takes seconds): the agent says one set (its output), the
    provider answers the other (the relay). The worker's credential is a third kind of canary."""
    _isolation_or_skip()
    said = Canaries.fresh("agent output")
    answered = sweep.also(Canaries.fresh("model relay"))
    sweep.use(said)
    credential = Canary("provider token (the worker's model credential)", "sk-proj-" + secrets.token_urlsafe(48), 8)
    sweep.also(credential)
    name = "N17Q_MODEL_CREDENTIAL_CANARY_" + secrets.token_hex(4).upper()  # the model-credential namespace
    monkeypatch.setenv(name, credential.value)  # the worker's environment holds it, nothing else
    call_command("load_demo", "--json", stdout=io.StringIO())
    folder = tmp_path / "agent"
    folder.mkdir()
    shutil.copy2(AGENT, folder / AGENT.name)
    (folder / "said.txt").write_text(said.environment_text())
    for path in [tmp_path, folder, *folder.iterdir()]:
        path.chmod(0o755)
    call_command("register_agent", "canary", str(folder), "--command", f"python {AGENT.name}", "--json",
                 stdout=io.StringIO())  # fmt: skip
    provider = Provider(f"Here is the config you asked for:\n{answered.environment_text()}")
    try:
        # the model endpoint, registered by one reviewer and approved by another (issue 33)
        approve_model_connection("canary-model", port=provider.port, credential=name)
        operator = Client()
        operator.force_login(role_user("operator", "operator-canary"))
        data = {"scenario": "email-delivery@1", "variable": "decider", "decider": "agent:canary",
                "checkpoint": "start", "model_connection": "canary-model"}  # fmt: skip
        replay = launched(operator, "run-001-recorded", "counterfactual", data, django_capture_on_commit_callbacks)
    finally:
        provider.close()
    assert replay.state == Replay.State.FINISHED, replay.error
    # Both model calls were recorded (their requests hold what the agent said, their results what was answered).
    calls = Event.objects.filter(run=replay.run, kind="tool.call", body__tool=MODEL_TOOL).count()
    assert calls == 2, calls
    sweep.check("agent output and model relay (replay)")
