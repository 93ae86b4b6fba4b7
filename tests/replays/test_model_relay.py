"""Issue 33: the model relay reaches only what an admin registered and another person approved.

The attack: an operator's counterfactual declared a model connection as a base URL and a credential NAME, both
typed; naming N17Q_SECRET_KEY (or DATABASE_URL, a cloud key) made the worker send `Authorization: Bearer <its
value>` to any host. Now a model endpoint is a reviewed connection (kind `model`: proposed, approved by someone else),
its one credential reference is in the model-credential namespace (N17Q_MODEL_CREDENTIAL_*), the operator chooses an
approved one by name, and the relay's calls are counted and capped per replay. A loopback `http.server` stands in
for the model API (tests.engine.test_agent_decider.Provider).
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from fixtures_review import connections
from fixtures_review.connections import (
    ConnectionRefused,
    approved_model_connections,
    connection_approve,
    connection_change,
    connection_retire,
    model_connection_resolve,
)
from fixtures_review.model_endpoints import CREDENTIAL_PREFIX, EndpointRefused, ModelEndpoint, credential_check
from fixtures_review.models import Connection
from replays import services
from replays.models import Replay
from replays.relay import ModelRelay, address_kind
from replays.services import ReplayRefused, replay_create
from runs.models import Run
from tests.conftest import approve_connection
from tests.engine.test_agent_decider import CREDENTIAL_NAME, SECRET, Provider, agent_folder
from tests.replays.model_connections import approve_model_connection, propose_model_connection, reviewers

pytestmark = pytest.mark.django_db

RUN = "run-001-recorded"
AGENT = "live_probe_agent.py"
# What the console reads for itself, and what a worker's environment commonly holds besides: none may be named.
FORBIDDEN = (
    "N17Q_SECRET_KEY",
    "DATABASE_URL",
    "REDIS_URL",
    "CELERY_BROKER_URL",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_ACCESS_KEY_ID",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "OPENAI_API_KEY",
    "N17Q_MODEL_CREDENTIAL_",  # the prefix alone names nothing
    "n17q_model_credential_provider",
    "X_N17Q_MODEL_CREDENTIAL_PROVIDER",
    "sk-live-abc123",  # a credential typed where its name belongs
)


@pytest.fixture
def provider(monkeypatch):
    monkeypatch.setenv(CREDENTIAL_NAME, SECRET)  # the worker's environment: the credential lives here only
    p = Provider()
    yield p
    p.close()


@pytest.fixture
def agent_run(tmp_path, capsys) -> Run:
    """The demo's runs and a registered agent `agent:probe` on the worker's own environment."""
    call_command("load_demo", "--json")
    call_command("register_agent", "probe", str(agent_folder(tmp_path, AGENT)), "--command", f"python {AGENT}")
    capsys.readouterr()
    return Run.objects.get(run_id=RUN)


def launch(run: Run, connection: Any) -> Replay:
    return replay_create(run, mode="counterfactual", vary={"decider": "agent:probe"}, model_connection=connection)


# --- the credential namespace ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FORBIDDEN)
def test_a_credential_outside_the_model_namespace_can_never_be_named(name):
    with pytest.raises(EndpointRefused, match=CREDENTIAL_PREFIX) as refused:
        credential_check(name)
    assert name == CREDENTIAL_PREFIX or name not in str(refused.value)  # not repeated: it may be the credential
    with pytest.raises(EndpointRefused):
        ModelRelay(ModelEndpoint("http", "127.0.0.1", 9, "/v1", name), max_calls=10)
    with pytest.raises(ConnectionRefused, match=CREDENTIAL_PREFIX):
        propose_model_connection("named-" + str(abs(hash(name))), port=9, credential=name)
    assert not Connection.objects.filter(kind=Connection.Kind.MODEL).exists()


def test_no_setting_the_console_reads_from_its_environment_is_in_the_model_namespace():
    """The class, not a list: every variable n17q_site/settings.py reads is refused as a credential reference."""
    source = (Path(__file__).resolve().parents[2] / "n17q_site" / "settings.py").read_text()
    read = set(re.findall(r'env_\w+\(\s*"([A-Z0-9_]+)"', source)) | set(
        re.findall(r'environ[^"]*"([A-Z0-9_]+)"', source)
    )
    assert {"N17Q_SECRET_KEY", "DATABASE_URL", "N17Q_MODEL_RELAY_MAX_CALLS"} <= read, sorted(read)
    for name in read:
        with pytest.raises(EndpointRefused):
            credential_check(name)


def test_a_model_connection_written_around_the_services_with_a_worker_variable_is_never_approved_nor_used():
    proposer, approver = reviewers()
    planted = Connection.objects.create(
        name="planted",
        kind=Connection.Kind.MODEL,
        endpoint_scheme="http",
        endpoint_host="127.0.0.1",
        endpoint_port=9,
        endpoint_path_prefix="/v1",
        credential_name="N17Q_SECRET_KEY",
        proposed_by=proposer,
    )
    with pytest.raises(ConnectionRefused, match=CREDENTIAL_PREFIX):
        connection_approve(connection=planted, user=approver)
    Connection.objects.filter(pk=planted.pk).update(state=Connection.State.APPROVED)  # approved by hand, even so
    assert approved_model_connections() == []
    with pytest.raises(ConnectionRefused, match=CREDENTIAL_PREFIX):
        model_connection_resolve("planted")


def test_the_admin_refuses_a_model_connection_naming_a_worker_variable(role_user):
    admin = Client()
    admin.force_login(role_user("admin", "admin-models"))
    form = {
        "name": "by-admin",
        "description": "",
        "kind": "model",
        "reaches": "live",
        "endpoint_scheme": "https",
        "endpoint_host": "api.example.com",
        "endpoint_port": "443",
        "endpoint_path_prefix": "/v1",
        "credential_name": "DATABASE_URL",
    }
    refused = admin.post("/admin/fixtures_review/connection/add/", form)
    assert refused.status_code == 200 and CREDENTIAL_PREFIX in refused.content.decode()
    assert not Connection.objects.exists()
    done = admin.post(
        "/admin/fixtures_review/connection/add/", {**form, "credential_name": "N17Q_MODEL_CREDENTIAL_EXAMPLE"}
    )
    assert done.status_code == 302, done.content.decode()[:2000]
    connection = Connection.objects.get(name="by-admin")
    assert (connection.kind, connection.state, connection.proposed_by.username) == ("model", "proposed", "admin-models")


# --- nothing typed becomes a URL or a variable name -----------------------------------------------------------------


# Each case below loads the demo once for all its attempts (about 5 s each): the attempts are in one test.
TYPED = (
    {"base_url": "http://attacker.invalid/v1", "credential_name": "N17Q_SECRET_KEY"},
    {"base_url": "http://127.0.0.1:9/v1", "credential_name": "DATABASE_URL"},
    "http://attacker.invalid/v1",
    "N17Q_SECRET_KEY",
)


def test_a_typed_url_or_variable_name_is_refused_at_launch(agent_run):
    approve_model_connection("approved-model", port=9, credential="N17Q_MODEL_CREDENTIAL_PROVIDER")
    for typed in TYPED:
        with pytest.raises(ReplayRefused) as refused:
            launch(agent_run, typed)
        assert "\n" not in str(refused.value) and "N17Q_SECRET_KEY" not in str(refused.value), typed
    assert not Replay.objects.exists()


def test_a_model_connection_that_is_not_approved_cannot_be_chosen(agent_run):
    proposer, approver = reviewers()
    # an approved connection, but one record mode captures through: not a model endpoint
    approve_connection("recording", proposer=proposer, approver=approver)
    propose_model_connection("proposed", port=9, credential="N17Q_MODEL_CREDENTIAL_PROVIDER")
    retired = approve_model_connection("retired", port=9, credential="N17Q_MODEL_CREDENTIAL_PROVIDER")
    connection_retire(connection=retired, user=approver)
    assert approved_model_connections() == []
    for name, message in (
        ("recording", "no model connection is registered"),
        ("proposed", "is proposed, not approved"),
        ("retired", "is retired, not approved"),
    ):
        with pytest.raises(ReplayRefused, match=message):
            launch(agent_run, name)
    assert not Replay.objects.exists()


def test_a_model_connection_is_approved_by_another_person_than_its_proposer():
    proposer, approver = reviewers()
    connection = propose_model_connection("four-eyes", port=9, credential="N17Q_MODEL_CREDENTIAL_PROVIDER")
    with pytest.raises(ConnectionRefused, match="four eyes"):
        connection_approve(connection=connection, user=proposer)
    assert connection_approve(connection=connection, user=approver).state == Connection.State.APPROVED
    assert [c.name for c in approved_model_connections()] == ["four-eyes"]


def test_a_connection_changed_or_retired_after_launch_is_never_followed_by_the_worker(agent_run):
    connection = approve_model_connection("moving", port=9, credential="N17Q_MODEL_CREDENTIAL_PROVIDER")
    replay = launch(agent_run, "moving")
    assert replay.model_connection["base_url"] == "http://127.0.0.1:9/v1"
    assert services._relay_for(replay).url == "http://127.0.0.1:9/v1/chat/completions"
    # changed to reach elsewhere: proposed again (its changer is its proposer), then approved by another reviewer
    connection.endpoint_host = "203.0.113.7"
    changer = reviewers()[1]
    assert connection_change(connection=connection, user=changer) == "proposed"
    connection_approve(connection=Connection.objects.get(pk=connection.pk), user=reviewers()[0])
    with pytest.raises(services.AgentError, match="changed since this replay was launched"):
        services._relay_for(replay)
    connection_retire(connection=Connection.objects.get(pk=connection.pk), user=changer)
    with pytest.raises(services.AgentError, match="retired, not approved"):
        services._relay_for(replay)


# --- the relay reaches the approved endpoint, nothing else, a bounded number of times --------------------------------


def request_line(n: int = 1) -> bytes:
    return json.dumps({"model": "probe", "messages": [{"role": "user", "content": f"call {n}"}]}).encode()


def test_the_relay_reaches_an_approved_endpoint_with_the_approved_credential(provider):
    """The positive control: an approved model connection, resolved as the worker resolves it, reaches the loopback
    stand-in for the model API under its path prefix, with the credential its reference names."""
    approve_model_connection("loopback-model", port=provider.port, credential=CREDENTIAL_NAME)
    relay = ModelRelay(model_connection_resolve("loopback-model"), max_calls=5)
    answer = json.loads(relay(request_line()))
    assert answer["body"]["choices"][0]["message"]["content"] == "live answer 1"
    (received,) = provider.received
    assert received["path"] == "/v1/chat/completions"
    assert received["headers"]["Authorization"] == f"Bearer {SECRET}"
    assert (relay.calls, relay.refused) == (1, 0)


def test_a_call_beyond_the_cap_is_refused_and_counted(provider):
    relay = ModelRelay(provider.endpoint(), max_calls=2)
    answers = [json.loads(relay(request_line(n))) for n in (1, 2, 3)]
    assert [("body" in a) for a in answers] == [True, True, False]
    assert "cap of 2 model calls for this replay is reached" in answers[2]["error"]
    assert len(provider.received) == 2 and (relay.calls, relay.refused, relay.capped) == (2, 1, True)


def test_a_redirect_to_another_place_is_not_followed(provider):
    """The approved endpoint answering 302 elsewhere: the relay never sends the request (nor its credential) on."""
    hits: list[str] = []

    class Elsewhere(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_response(200)
            self.end_headers()

        do_POST = do_GET

        def log_message(self, *args: Any) -> None:
            pass

    elsewhere = ThreadingHTTPServer(("127.0.0.1", 0), Elsewhere)
    threading.Thread(target=elsewhere.serve_forever, daemon=True).start()

    class Redirecting(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.send_response(302)
            self.send_header("Location", f"http://127.0.0.1:{elsewhere.server_address[1]}/collect")
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            pass

    redirecting = ThreadingHTTPServer(("127.0.0.1", 0), Redirecting)
    threading.Thread(target=redirecting.serve_forever, daemon=True).start()
    try:
        endpoint = ModelEndpoint("http", "127.0.0.1", redirecting.server_address[1], "/v1", CREDENTIAL_NAME)
        answer = json.loads(ModelRelay(endpoint, max_calls=5)(request_line()))
        assert answer == {"error": "the provider answered HTTP 302 (a redirect, not followed)"}
        assert hits == []
    finally:
        for server in (redirecting, elsewhere):
            server.shutdown()
            server.server_close()


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8080/v1/chat/completions",  # the endpoint itself: admitted
        "http://127.0.0.1:8081/v1/chat/completions",
        "http://127.0.0.2:8080/v1/chat/completions",
        "https://127.0.0.1:8080/v1/chat/completions",
        "http://127.0.0.1:8080/v2/chat/completions",
        "http://127.0.0.1:8080/v1/../admin",
        "http://127.0.0.1:8080/v1x/chat/completions",
        "http://user@127.0.0.1:8080/v1/chat/completions",
        "http://127.0.0.1:8080/v1/chat/completions?x=1",
    ],
)
def test_only_urls_under_the_approved_host_port_and_path_prefix_are_admitted(url):
    endpoint = ModelEndpoint("http", "127.0.0.1", 8080, "/v1", "N17Q_MODEL_CREDENTIAL_PROVIDER")
    assert endpoint.admits(url) is (url == "http://127.0.0.1:8080/v1/chat/completions")


@pytest.mark.parametrize(
    ("scheme", "host", "port", "prefix", "message"),
    [
        ("ftp", "api.example.com", 21, "/v1", "http or https"),
        ("https", "user@api.example.com", 443, "/v1", "host"),
        ("https", "api.example.com/evil", 443, "/v1", "host"),
        ("https", "API.example.com", 443, "/v1", "host"),
        ("https", "api.example.com", 0, "/v1", "port"),
        ("https", "api.example.com", 70000, "/v1", "port"),
        ("https", "api.example.com", 443, "v1", "path prefix"),
        ("https", "api.example.com", 443, "/v1/../admin", "path prefix"),
        ("https", "api.example.com", 443, "/v1?x=1", "path prefix"),
        ("https", "api.example.com", 443, "/v1%2f..", "path prefix"),
    ],
)
def test_an_endpoint_that_is_not_a_plain_host_port_and_path_is_refused(scheme, host, port, prefix, message):
    with pytest.raises(ConnectionRefused, match=message):
        connections.connection_propose(
            name="bad-endpoint",
            user=reviewers()[0],
            kind=Connection.Kind.MODEL,
            endpoint_scheme=scheme,
            endpoint_host=host,
            endpoint_port=port,
            endpoint_path_prefix=prefix,
            credential_name="N17Q_MODEL_CREDENTIAL_PROVIDER",
        )


def test_the_replay_records_its_relayed_calls_and_that_the_cap_stopped_it(agent_run, provider, settings, monkeypatch):
    """The worker's path without a sandbox: the agent's runner is replaced by one that asks the relay three times
    under a cap of two. The replay's record says how many calls were made and that the cap refused the third."""
    settings.N17Q_MODEL_RELAY_MAX_CALLS = 2
    approve_model_connection("loopback-model", port=provider.port, credential=CREDENTIAL_NAME)
    replay = launch(agent_run, "loopback-model")
    assert replay.model_connection["max_calls"] == 2

    def three_calls(package: Any, spec: Any, *, relay: Any, **kwargs: Any) -> Any:
        for n in (1, 2, 3):
            relay(request_line(n))
        raise services.SandboxError("the agent stopped: its model call was refused")

    monkeypatch.setattr(services, "run_agent_replay", three_calls)
    done = services.replay_execute(replay.pk)
    assert done.state == Replay.State.FAILED and len(provider.received) == 2
    assert (done.model_calls, done.model_calls_refused) == (2, 1)
    assert done.model_relay_record == {
        "connection": "loopback-model",
        "calls": 2,
        "refused_by_cap": 1,
        "cap": 2,
        "stopped_by_cap": True,
    }
    assert SECRET not in json.dumps(list(Replay.objects.values()), default=str)


def test_a_model_connection_rewritten_around_the_services_after_its_approval_is_neither_offered_nor_resolved():
    """The approval covers the endpoint it approved (`approved_identity`): a row pointed elsewhere by a queryset
    update, past `save` and `connection_change`, is not what a reviewer approved."""
    connection = approve_model_connection("rewritten", port=9, credential="N17Q_MODEL_CREDENTIAL_PROVIDER")
    assert model_connection_resolve("rewritten").host == "127.0.0.1"  # the positive control
    Connection.objects.filter(pk=connection.pk).update(endpoint_host="203.0.113.7")
    with pytest.raises(ConnectionRefused, match="changed since it was approved"):
        model_connection_resolve("rewritten")
    assert approved_model_connections() == []


# --- the cap holds across claims and workers (counted in the database) ----------------------------------------------


def test_the_cap_holds_when_a_replay_is_claimed_again_after_its_worker_died(agent_run, provider, settings, monkeypatch):
    """A worker relays two calls under a cap of two and dies; the replay is claimed again. The new worker's relay
    starts from the replay's durable count, not from zero: its calls are refused, none reaches the endpoint, and the
    run says the cap refused them."""
    settings.N17Q_MODEL_RELAY_MAX_CALLS = 2
    approve_model_connection("loopback-model", port=provider.port, credential=CREDENTIAL_NAME)
    replay = launch(agent_run, "loopback-model")
    first_worker = services._relay_for(replay)  # the relay of the worker that dies after two calls
    assert all("body" in json.loads(first_worker(request_line(n))) for n in (1, 2))
    assert Replay.objects.get(pk=replay.pk).model_calls == 2  # already in the database, before any end is recorded

    def three_calls(package: Any, spec: Any, *, relay: Any, **kwargs: Any) -> Any:
        answers = [json.loads(relay(request_line(n))) for n in (3, 4, 5)]
        raise services.SandboxError(f"the agent stopped: {answers[0]['error']}")

    monkeypatch.setattr(services, "run_agent_replay", three_calls)
    done = services.replay_execute(replay.pk)  # the claim again
    assert len(provider.received) == 2
    assert (done.model_calls, done.model_calls_refused) == (2, 3)
    record = done.model_relay_record
    assert record is not None and record["stopped_by_cap"] is True
    assert "cap of 2 model calls for this replay is reached (2 made, counting every claim of it)" in done.error


@pytest.mark.django_db(transaction=True)
def test_concurrent_relays_of_one_replay_share_one_cap(agent_run, provider, settings):
    """Two workers holding the same replay (a lapsed lease taken over while the first still runs), each relaying from
    several threads at once: exactly the cap's number of calls reach the endpoint."""
    settings.N17Q_MODEL_RELAY_MAX_CALLS = 3
    approve_model_connection("loopback-model", port=provider.port, credential=CREDENTIAL_NAME)
    replay = launch(agent_run, "loopback-model")
    relays = [services._relay_for(replay), services._relay_for(replay)]
    answers: list[dict] = []
    lock = threading.Lock()

    def call(n: int) -> None:
        answer = json.loads(relays[n % 2](request_line(n)))
        with lock:
            answers.append(answer)

    threads = [threading.Thread(target=call, args=(n,)) for n in range(10)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(answers) == 10
    assert sum("body" in a for a in answers) == 3 and len(provider.received) == 3
    stored = Replay.objects.get(pk=replay.pk)
    assert (stored.model_calls, stored.model_calls_refused) == (3, 7)


# --- a host NAME is checked where it was reached, not where it was approved (DNS rebinding) ------------------------


class RawModelServer:
    """A loopback stand-in for the model API that records every byte of every connection it accepts (not only the
    requests it could parse), and answers a whole HTTP request with a chat completion."""

    def __init__(self) -> None:
        import socket

        self.connections: list[bytes] = []  # one entry per accepted connection, appended when it ends
        self._lock = threading.Lock()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.listener.settimeout(0.1)
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: Any) -> None:
        data = b""
        with conn:
            conn.settimeout(30)
            try:
                while True:
                    head, sep, rest = data.partition(b"\r\n\r\n")
                    if sep:
                        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
                        if len(rest) >= length:
                            answer = json.dumps(
                                {"choices": [{"message": {"role": "assistant", "content": "reached"}}]}
                            ).encode()
                            conn.sendall(
                                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
                                + f"Content-Length: {len(answer)}\r\n\r\n".encode()
                                + answer
                            )
                            break
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    data += chunk
            except OSError:
                pass
        with self._lock:
            self.connections.append(data)

    def ended(self, n: int) -> list[bytes]:
        """The bytes of the first `n` connections, once that many have ended (polled under a generous deadline)."""
        import time

        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.connections) >= n:
                    return list(self.connections)
            time.sleep(0.01)
        raise AssertionError(f"{n} connection(s) did not end within 30 s: {self.connections!r}")

    def close(self) -> None:
        self._stop.set()
        self.listener.close()


@pytest.fixture
def raw_server(monkeypatch):
    monkeypatch.setenv(CREDENTIAL_NAME, SECRET)
    server = RawModelServer()
    yield server
    server.close()


def test_an_approved_host_name_that_resolves_to_loopback_is_refused_and_nothing_is_sent(raw_server):
    """The approved host is a NAME (`localhost`, which resolves to loopback, as an attacker's name would after a
    rebinding): the relay connects, sees its peer is a loopback address, and closes without sending a byte; the run
    gets one line saying so. The listener accepted the connection and received nothing: no credential."""
    approve_model_connection("named-model", port=raw_server.port, credential=CREDENTIAL_NAME, host="localhost")
    relay = ModelRelay(model_connection_resolve("named-model"), max_calls=5)
    answer = json.loads(relay(request_line()))
    assert answer == {"error": "localhost resolved to 127.0.0.1, a loopback address: not sent"}
    assert raw_server.ended(1) == [b""]


def test_the_same_server_through_its_approved_address_literal_is_reached(raw_server):
    """The positive control: an endpoint approved as an address literal (127.0.0.1) states its intent, and the same
    listener receives the request with its credential."""
    approve_model_connection("literal-model", port=raw_server.port, credential=CREDENTIAL_NAME, host="127.0.0.1")
    relay = ModelRelay(model_connection_resolve("literal-model"), max_calls=5)
    answer = json.loads(relay(request_line()))
    assert answer["body"]["choices"][0]["message"]["content"] == "reached"
    (received,) = raw_server.ended(1)
    assert received.startswith(b"POST /v1/chat/completions ") and f"Bearer {SECRET}".encode() in received


@pytest.mark.parametrize(
    ("address", "kind"),
    [
        ("127.0.0.1", "loopback"),
        ("127.8.9.10", "loopback"),
        ("::1", "loopback"),
        ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped: judged as the IPv4 address it carries
        ("10.1.2.3", "private"),
        ("172.16.0.1", "private"),
        ("192.168.1.1", "private"),
        ("::ffff:10.0.0.1", "private"),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("fe80::1", "link-local"),
        ("fd00::1", "unique-local"),
        ("224.0.0.1", "multicast"),
        ("ff02::1", "multicast"),
        ("240.0.0.1", "reserved"),
        ("0.0.0.0", "unspecified"),
        ("::", "unspecified"),
        ("::ffff:0.0.0.0", "unspecified"),
        ("100.64.0.1", "non-global"),  # shared address space (carrier-grade NAT)
        ("93.184.216.34", None),
        ("2606:4700:4700::1111", None),
    ],
)
def test_a_peer_address_that_is_not_global_is_named_by_its_kind(address, kind):
    assert address_kind(address) == kind


def test_an_https_host_name_that_resolves_to_loopback_is_refused_before_the_tls_handshake(raw_server):
    """Over https the peer is checked before TLS starts: the listener receives not even a ClientHello (which names
    the host, and is where an internal TLS service would start answering)."""
    endpoint = ModelEndpoint("https", "localhost", raw_server.port, "/v1", CREDENTIAL_NAME)
    answer = json.loads(ModelRelay(endpoint, max_calls=5)(request_line()))
    assert answer == {"error": "localhost resolved to 127.0.0.1, a loopback address: not sent"}
    assert raw_server.ended(1) == [b""]


@pytest.mark.seed("001", "Effect identities received a replay namespace")
def test_a_request_carrying_a_replay_key_is_refused_by_the_relay_before_anything_is_sent(provider, caplog):
    relay = ModelRelay(provider.endpoint(), max_calls=2)
    carrying = {
        "model": "probe",
        "messages": [{"role": "user", "content": "send it"}],
        "metadata": {"Idempotency-Key": "replay:email-delivery-w1:5f2a9c0d1e7b3a46"},
    }
    answer = json.loads(relay(json.dumps(carrying).encode()))
    assert "request.metadata.Idempotency-Key: the replay-namespaced key" in answer["error"]
    assert "a live connection: refused before anything was sent" in answer["error"]
    assert provider.received == [], "not a byte reached the endpoint"
    assert (relay.calls, relay.refused, relay.refused_replay_keys) == (0, 0, 1), "refused apart from the cap"
    assert "model relay refused a request" in caplog.text
    # A prompt that only mentions a replay key is text, not a key: relayed.
    mention = {"model": "probe", "messages": [{"role": "user", "content": "replay:email-delivery-w1:5f2a is done"}]}
    assert "body" in json.loads(relay(json.dumps(mention).encode()))
    assert len(provider.received) == 1
