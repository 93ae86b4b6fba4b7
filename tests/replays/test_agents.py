"""Issue 18 through the console: an admin registers an agent program (the `register_agent` command, the Django
admin), the counterfactual form and the CLI offer it as the decider `agent:<name>` while its folder still has the
digest pinned at registration, and the worker runs it in the sandbox from a recorded checkpoint.

The agent is the real one of the engine tests (tests/engine/agents/mcp_openai_agent.py: the `mcp` client SDK and
the `openai` client). Its own environment is built once, from the package registry, by `register_agent
--requirements` (about 20 s; the other tests register it on the worker's own environment, which holds both). The
runs need the kernel boundary: they fail under CI=true where it cannot be made and are skipped elsewhere.
"""

from __future__ import annotations

import html as htmlmod
import json
import os
import re
import stat
import sys
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import Client

from n17q_engine.agent.spec import folder_digest
from replays.models import RegisteredAgent, Replay
from runs.models import Event, Finding, Run
from tests.engine.test_agent_decider import _isolation_or_skip, agent_folder
from tests.replays.model_connections import approve_model_connection, propose_model_connection
from tests.replays.test_replay_pages import launched

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only"),
]

A1 = "e-003-a1-checkpoint"
RUN = "run-003-review-request"
FORM = f"/runs/{RUN}/launch/counterfactual/"
AGENT = "mcp_openai_agent.py"


@pytest.fixture
def demo(capsys):
    call_command("load_demo", "--json")
    capsys.readouterr()


@pytest.fixture
def client_as(role_user):
    def make(role: str) -> Client:
        client = Client()
        client.force_login(role_user(role, f"{role}-agents"))
        return client

    return make


@pytest.fixture
def no_broker(monkeypatch):
    from replays import services

    sent: list[int] = []
    monkeypatch.setattr(services, "replay_enqueue", lambda pk: sent.append(pk) or True)
    return sent


def register(capsys, *args: str) -> dict:
    call_command("register_agent", *args, "--json")
    return json.loads(capsys.readouterr().out)


def decider_options(page: str) -> dict[str, tuple[str, bool]]:
    select = re.search(r'<select name="decider"[^>]*>(.*?)</select>', page, re.S)
    assert select, page[:2000]
    return {
        htmlmod.unescape(v): (htmlmod.unescape(label.strip()), " disabled" in attrs)
        for v, attrs, label in re.findall(r'<option value="([^"]*)"([^>]*)>(.*?)</option>', select.group(1), re.S)
    }


def test_register_agent_pins_the_digest_of_the_folder_and_uses_the_workers_environment(tmp_path, capsys):
    folder = agent_folder(tmp_path, AGENT)
    out = register(capsys, "tester", str(folder), "--command", f"python {AGENT}")
    assert out["decider"] == "agent:tester" and out["digest"] == folder_digest(folder)
    assert out["command"] == ["python", AGENT] and out["runnable"] is True
    assert out["environment"] is None and "worker's own" in out["environment_note"]
    agent = RegisteredAgent.objects.get(name="tester")
    assert agent.digest == out["digest"] and agent.folder == str(folder)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("Bad Name", "{folder}", "--command", "python a.py"), "lower-case letters"),
        (("x", "relative/folder", "--command", "python a.py"), "an absolute path to a folder"),
        (("x", "{folder}/nothing-here", "--command", "python a.py"), "an absolute path to a folder"),
        (("x", "{folder}", "--command", "missing.sh"), "is not an executable file"),
        (("x", "{folder}", "--command", "../outside.sh"), "a path inside the folder"),
        (("x", "{folder}", "--command", "python 'a.py"), "No closing quotation"),
        (("x", "{folder}", "--command", "python a.py", "--requirements", "{req_url}"), "only package specifiers"),
        (("x", "{folder}", "--command", "python a.py", "--requirements", "{req_option}"), "only package specifiers"),
        (("x", "{folder}", "--command", "python a.py", "--requirements", "{folder}/none.txt"), "--requirements"),
    ],
)
def test_register_agent_refuses_bad_input_in_one_line_and_stores_nothing(tmp_path, args, message):
    folder = agent_folder(tmp_path, AGENT)
    (tmp_path / "url.txt").write_text("mcp\nhttps://example.invalid/evil.whl\n")
    (tmp_path / "option.txt").write_text("--index-url http://127.0.0.1:9/simple\nmcp\n")
    fill = {"folder": str(folder), "req_url": str(tmp_path / "url.txt"), "req_option": str(tmp_path / "option.txt")}
    # The data folder is the test worker's, shared with the tests before this one: nothing is added to it.
    environments = Path(os.environ["N17Q_DATA_DIR"]) / "agents"
    before = sorted(environments.rglob("*")) if environments.exists() else []
    with pytest.raises(CommandError, match=re.escape(message)) as raised:
        call_command("register_agent", *(a.format(**fill) for a in args), "--json")
    assert "\n" not in str(raised.value)
    assert not RegisteredAgent.objects.exists()
    assert (sorted(environments.rglob("*")) if environments.exists() else []) == before


def test_a_name_is_registered_once(tmp_path, capsys):
    folder = agent_folder(tmp_path, AGENT)
    register(capsys, "tester", str(folder), "--command", "python", "--command", AGENT)
    with pytest.raises(CommandError, match=r"registered already \(version 1\): register it with --replace"):
        call_command("register_agent", "tester", str(folder), "--command", f"python {AGENT}")
    assert RegisteredAgent.objects.count() == 1


def test_replace_makes_a_new_version_the_decider_runs_and_old_replays_keep_theirs(
    demo, tmp_path, capsys, no_broker, client_as
):
    """Issue 36: `register_agent NAME ... --replace` makes version 2; version 1 stays (a replay launched with it keeps
    it, and its page says so); `agent:NAME` then means version 2; the admin's list shows both."""
    from replays.agents import agent_for
    from replays.models import Replay
    from replays.services import replay_create

    (tmp_path / "v1").mkdir()
    (tmp_path / "v2").mkdir()
    speak = "import sys; print('I am version {n}', file=sys.stderr); sys.exit({n})\n"
    first = agent_folder(tmp_path / "v1", extra={"who.py": speak.format(n=1)})
    out = register(capsys, "tester", str(first), "--command", "python who.py")
    assert out["version"] == 1
    run = Run.objects.get(run_id=RUN)
    launch: dict[str, Any] = {
        "mode": "counterfactual",
        "vary": {"decider": "agent:tester"},
        "scenario": "coding-review-request@1",
    }
    old = replay_create(run, **launch)
    assert old.agent_version == 1 and old.environment["agent"]["version"] == 1

    second = agent_folder(tmp_path / "v2", extra={"who.py": speak.format(n=2)})
    out = register(capsys, "tester", str(second), "--command", "python who.py", "--replace")
    assert out["version"] == 2 and out["folder"] == str(second) and out["digest"] == folder_digest(second)
    assert RegisteredAgent.objects.filter(name="tester").count() == 2
    assert agent_for("agent:tester").version == 2 and agent_for("agent:tester", 1).folder == str(first)
    new = replay_create(run, **launch)
    assert new.agent_version == 2
    old = Replay.objects.get(pk=old.pk)
    assert old.agent_version == 1  # the old replay keeps the version it was launched with
    admin = client_as("admin")
    page = admin.get(f"/replays/{old.pk}/").content.decode()
    assert "agent:tester</code> version 1" in page
    listing = admin.get("/admin/replays/registeredagent/").content.decode()
    assert re.findall(r'class="field-version">(\d+)<', listing) == ["2", "1"]  # the newest first
    # the worker runs the version each replay was launched with
    _isolation_or_skip()
    from replays.services import replay_execute

    for replay, n in ((old, 1), (new, 2)):
        done = replay_execute(replay.pk)
        assert done.run is not None, done.error
        state = Event.objects.filter(run=done.run, kind="run.state").order_by("-seq").first()
        assert state is not None
        assert state.body["reason"] == f"agent tester exited with status {n}: I am version {n}", state.body
    # the form offers the newest version once
    query = {"scenario": "coding-review-request@1", "variable": "decider", "decider": "agent:tester"}
    options = decider_options(admin.get(FORM, query).content.decode())
    assert "version 2" in options["agent:tester"][0]


def test_the_admin_registers_an_agent_and_lists_it_readably(tmp_path, client_as):
    admin = client_as("admin")
    folder = agent_folder(tmp_path, AGENT)
    refused = admin.post(
        "/admin/replays/registeredagent/add/",
        {"name": "by-admin", "folder": "not/absolute", "command_line": f"python {AGENT}", "requirements": ""},
    )
    assert refused.status_code == 200 and "an absolute path to a folder" in refused.content.decode()
    assert not RegisteredAgent.objects.exists()
    done = admin.post(
        "/admin/replays/registeredagent/add/",
        {"name": "by-admin", "folder": str(folder), "command_line": f"python {AGENT}", "requirements": ""},
    )
    assert done.status_code == 302, done.content.decode()[:3000]
    agent = RegisteredAgent.objects.get(name="by-admin")
    assert agent.digest == folder_digest(folder) and agent.registered_by.username == "admin-agents"
    page = admin.get("/admin/replays/registeredagent/").content.decode()
    for text in ("agent:by-admin", f"python {AGENT}", agent.digest[:19], "folder unchanged since registration"):
        assert text in page
    assert admin.get(f"/admin/replays/registeredagent/{agent.pk}/change/").status_code == 200
    # the same name again: refused in one line, unless it is to be a new version
    again = {"name": "by-admin", "folder": str(folder), "command_line": f"python {AGENT}", "requirements": ""}
    refused = admin.post("/admin/replays/registeredagent/add/", again)
    assert refused.status_code == 200 and "register it with --replace to make version 2" in refused.content.decode()
    assert admin.post("/admin/replays/registeredagent/add/", {**again, "replace": "on"}).status_code == 302
    assert sorted(RegisteredAgent.objects.filter(name="by-admin").values_list("version", flat=True)) == [1, 2]


def test_the_form_offers_a_registered_agent_and_disables_one_whose_folder_changed(
    demo, tmp_path, capsys, client_as, no_broker
):
    folder = agent_folder(tmp_path, AGENT)
    register(capsys, "tester", str(folder), "--command", f"python {AGENT}")
    operator = client_as("operator")
    query = {"scenario": "coding-review-request@1", "variable": "decider", "decider": "agent:tester", "checkpoint": A1}
    page = operator.get(FORM, query).content.decode()
    label, disabled = decider_options(page)["agent:tester"]
    assert not disabled and "model from model fixtures" in label
    # the summary names the agent, its digest and its model source
    assert "agent:tester" in page and "Model source: fixtures" in page
    assert htmlmod.escape(folder_digest(folder)[:20]) in page or folder_digest(folder)[7:15] in page

    (folder / AGENT).chmod(0o644)
    (folder / AGENT).write_text((folder / AGENT).read_text() + "\n# changed after registration\n")
    page = operator.get(FORM, query).content.decode()
    label, disabled = decider_options(page)["agent:tester"]
    assert disabled and "changed since registration" in label
    digest = re.search(r'name="summary_digest" value="([^"]*)"', page)
    response = operator.post(FORM, {**query, "summary_digest": digest.group(1) if digest else ""})
    assert response.status_code == 400 and "changed since registration" in response.content.decode()
    assert not Replay.objects.exists() and no_broker == []


def test_the_cli_refuses_an_unknown_or_changed_agent_in_one_line(demo, tmp_path, capsys):
    with pytest.raises(CommandError, match="no agent is registered under that name"):
        call_command("replay", RUN, "--mode", "counterfactual", "--vary", "decider=agent:nobody", "--inline")
    folder = agent_folder(tmp_path, AGENT)
    register(capsys, "tester", str(folder), "--command", f"python {AGENT}")
    (folder / "extra.txt").write_text("a new file")
    with pytest.raises(CommandError, match="changed since registration"):
        call_command("replay", RUN, "--mode", "counterfactual", "--vary", "decider=agent:tester", "--inline")
    assert not Replay.objects.exists()


@pytest.mark.database_incidental
def test_an_agent_with_its_own_environment_runs_from_the_checkpoint_launched_from_the_console(
    demo, tmp_path, capsys, client_as, no_broker, django_capture_on_commit_callbacks
):
    """The whole path: `register_agent --requirements` builds the agent its own environment from the registry
    (mcp, openai), the operator launches it from the counterfactual form from the checkpoint before the broad
    suite, the worker's task runs it in the sandbox, and the run stops precisely at its first model call (the
    demo's scenario version holds no model fixtures)."""
    _isolation_or_skip()
    folder = agent_folder(tmp_path, AGENT)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("# the agent's own dependencies\nmcp\nopenai\n")
    out = register(capsys, "own-env", str(folder), "--command", f"python {AGENT}", "--requirements", str(requirements))
    env = Path(out["environment"])
    assert env.is_relative_to(Path(os.environ["N17Q_DATA_DIR"]) / "agents")
    assert out["requirements"] == ["mcp", "openai"] and out["requirements_digest"].startswith("sha256:")
    installed = {line.split("==")[0].lower() for line in out["installed"]}
    assert {"mcp", "openai"} <= installed and "django" not in installed  # its own, not the worker's
    assert not os.stat(env / "bin" / "python").st_mode & stat.S_IWUSR or (env / "bin" / "python").is_symlink()
    assert not os.stat(env / "pyvenv.cfg").st_mode & 0o222  # read-only

    operator = client_as("operator")
    data = {"scenario": "coding-review-request@1", "variable": "decider", "decider": "agent:own-env", "checkpoint": A1}
    replay = launched(operator, RUN, "counterfactual", data, django_capture_on_commit_callbacks)
    assert replay.state == Replay.State.FINISHED, replay.error
    assert replay.decider == "agent:own-env" and replay.checkpoint == A1 and replay.isolation == "netns"
    agent = replay.environment["agent"]
    assert (agent["name"], agent["digest"], agent["model_source"]) == ("own-env", out["digest"], "fixtures")
    assert "own, built from the package registry" in agent["environment"]
    # The address the agent is given, as docs/agents.md says (issue 38's tour: the summary said 127.0.0.1).
    assert "its model at 198.18.0.1 of the sandbox's own network namespace" in agent["runs"]
    (missing,) = replay.missing
    assert missing["tool"] == "model.chat"
    run = replay.run
    scope = Event.objects.get(run=run, kind="replay.scope").body
    assert scope["segment"]["from_checkpoint"] == A1 and "agent:own-env" in scope["segment"]["evaluated"]
    # it stopped at its first model call, after the restored checkpoint: the demo scenario pins no model contract,
    # so the built-in one normalized the request, which the run holds (issue 36: an answer can be staged for it)
    assert missing["reason"].startswith("unrecorded: the scenario pins no model.chat contract; the built-in one")
    assert Event.objects.get(run=run, event_id=missing["call_id"]).body["request"]["model"] == "n17q-test-model"
    assert missing["checkpoint_id"] == scope["segment"]["restored"]["checkpoint"]
    assert Event.objects.filter(run=run, kind="effect.intent").count() == 0
    page = operator.get(f"/replays/{replay.pk}/").content.decode()
    assert "agent:own-env" in page and "Model source: fixtures" in page


# Transactional: the worker's relay answers from the sandbox's relay thread, which counts each call in the replay's
# row over a connection of its own (replays.relay_count): it must see the committed replay, as a worker does.
@pytest.mark.django_db(transaction=True)
def test_a_declared_live_model_is_relayed_by_the_worker_and_the_run_is_a_fresh_comparison_run(
    demo, tmp_path, capsys, client_as, no_broker, monkeypatch, django_capture_on_commit_callbacks
):
    """The operator chooses an approved model connection (issue 33: an admin registered its endpoint and credential
    reference, another reviewer approved it); the worker relays the agent's chat requests to a loopback
    OpenAI-compatible server standing in for a provider. The credential is never in the form, the database, the
    page, or the sandbox."""
    from tests.engine.test_agent_decider import CREDENTIAL_NAME, SECRET, Provider

    _isolation_or_skip()
    monkeypatch.setenv(CREDENTIAL_NAME, SECRET)  # the worker's environment
    provider = Provider()
    try:
        approve_model_connection("loopback-model", port=provider.port, credential=CREDENTIAL_NAME)
        folder = agent_folder(tmp_path, "live_probe_agent.py")
        register(capsys, "live-probe", str(folder), "--command", "python live_probe_agent.py")
        operator = client_as("operator")
        data = {
            "scenario": "email-delivery@1",
            "variable": "decider",
            "decider": "agent:live-probe",
            "checkpoint": "start",
            "model_connection": "loopback-model",
        }
        page = operator.get("/runs/run-001-recorded/launch/counterfactual/", data).content.decode()
        assert "A fresh comparison run, not a replay" in page and CREDENTIAL_NAME in page
        assert SECRET not in page

        replay = launched(operator, "run-001-recorded", "counterfactual", data, django_capture_on_commit_callbacks)
        assert replay.state == Replay.State.FINISHED, replay.error
        assert replay.model_connection == {
            "connection": "loopback-model",
            "base_url": provider.base_url,
            "credential_name": CREDENTIAL_NAME,
            "max_calls": 100,
        }
        assert (replay.model_calls, replay.model_calls_refused) == (2, 0)
        summary = replay.environment
        assert summary["truth"] == "fresh comparison" and summary["agent"]["model_source"] == "live"
        assert all(r["headers"]["Authorization"] == f"Bearer {SECRET}" for r in provider.received)
        assert len(provider.received) == 2
        dump = provider.received[1]["body"]["messages"][-1]["content"]
        assert SECRET not in dump and CREDENTIAL_NAME not in json.loads(dump)["environ"]
        results = [e.body for e in Event.objects.filter(run=replay.run, kind="tool.result")]
        assert [r["origin"] for r in results if r.get("connection", "").startswith("live:")] == ["live", "live"]
        # the imported run says it is no replay: each live result is a LIN014 finding of a counterfactual run
        assert Finding.objects.filter(run=replay.run, code="LIN014").count() == 2
        # nothing stored holds the credential
        from accounts.models import AuditEntry

        stored = json.dumps(
            [
                list(Replay.objects.values()),
                list(AuditEntry.objects.values("detail", "target")),
                [e.body for e in Event.objects.filter(run=replay.run)],
            ],
            default=str,
        )
        assert SECRET not in stored
        assert SECRET not in operator.get(f"/replays/{replay.pk}/").content.decode()
        # issue 34: the relayed run says on every page that it is a fresh comparison run, not reproducible
        assert replay.run.fresh_comparison
        for url in (f"/replays/{replay.pk}/", f"/replays/{replay.pk}/comparison/", f"/runs/{replay.run.run_id}/"):
            assert "fresh comparison run (live model): not reproducible" in operator.get(url).content.decode(), url
    finally:
        provider.close()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"model_connection": "proposed-model"}, "Select a valid choice"),  # proposed, not approved: no choice
        ({"model_connection": "http://127.0.0.1:9/v1"}, "Select a valid choice"),  # a URL typed: no choice
        ({"model_connection": "approved-model", "decider": "careful"}, "for an agent decider only"),
    ],
)
def test_only_an_approved_model_connection_can_be_chosen_and_only_for_an_agent(
    demo, tmp_path, capsys, client_as, no_broker, extra, message
):
    approve_model_connection("approved-model", port=9, credential="N17Q_MODEL_CREDENTIAL_PROVIDER")
    propose_model_connection("proposed-model", port=9, credential="N17Q_MODEL_CREDENTIAL_PROVIDER")
    folder = agent_folder(tmp_path, AGENT)
    register(capsys, "tester", str(folder), "--command", f"python {AGENT}")
    operator = client_as("operator")
    data = {"scenario": "coding-review-request@1", "variable": "decider", "decider": "agent:tester", "checkpoint": A1}
    options = re.search(
        r'<select name="model_connection"[^>]*>(.*?)</select>',
        operator.get(FORM, data).content.decode(),
        re.S,
    )
    assert options and "approved-model" in options.group(1) and "proposed-model" not in options.group(1)
    response = operator.post(FORM, {**data, **extra, "summary_digest": "x"})
    assert response.status_code == 400 and message in htmlmod.unescape(response.content.decode())
    assert not Replay.objects.exists() and no_broker == []


# --- an agent shipped as a wheel ------------------------------------------------------------------------------------

WHEEL_PACKAGE = "n17q_wheel_agent"
WHEEL_SCRIPT = "n17q-wheel-agent"
AGENTS_DIR = Path(__file__).resolve().parent.parent / "engine" / "agents"


def build_wheel(
    where: Path,
    *,
    filename: str = f"{WHEEL_PACKAGE}-1.0-py3-none-any.whl",
    requires: tuple[str, ...] = ("mcp", "openai"),
    drop: str = "",
    extra: dict[str, str] | None = None,
    entry_points: str = "",
) -> Path:
    """A valid wheel, written member by member as the wheel spec lays it out (dist-info with METADATA, WHEEL,
    entry_points.txt and a RECORD of every file's urlsafe-base64 sha256), holding the real agent of the engine tests
    as the package `n17q_wheel_agent` with a console script and a `__main__`; `drop` leaves one member out, `extra`
    adds members, `entry_points` adds lines to entry_points.txt."""
    import base64
    import hashlib
    import zipfile

    dist = f"{WHEEL_PACKAGE}-1.0.dist-info"
    files = {
        f"{WHEEL_PACKAGE}/__init__.py": "def cli() -> None:\n"
        "    import sys\n\n    import anyio\n\n    from . import agent\n\n    sys.exit(anyio.run(agent.main))\n",
        f"{WHEEL_PACKAGE}/__main__.py": "from . import cli\n\ncli()\n",
        f"{WHEEL_PACKAGE}/agent.py": (AGENTS_DIR / AGENT).read_text(),
        f"{dist}/METADATA": "Metadata-Version: 2.1\nName: n17q-wheel-agent\nVersion: 1.0\n"
        + "".join(f"Requires-Dist: {r}\n" for r in requires),
        f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: n17q-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/entry_points.txt": f"[console_scripts]\n{WHEEL_SCRIPT} = {WHEEL_PACKAGE}:cli\n{entry_points}",
        **(extra or {}),
    }
    record = []
    for name, text in files.items():
        data = text.encode()
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{name},sha256={digest},{len(data)}")
    files[f"{dist}/RECORD"] = "\n".join([*record, f"{dist}/RECORD,,"]) + "\n"
    path = where / filename
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, text in files.items():
            if name != drop:
                zf.writestr(name, text)
    return path


@pytest.mark.database_incidental
def test_a_wheel_is_installed_with_its_dependencies_from_the_registry_pinned_and_decides_story_001(tmp_path, capsys):
    """A wheel plus its console script: installed with its Requires-Dist (mcp, openai) from the package registry
    into its own read-only environment, pinned by the wheel's sha256 and the environment's digest, then run as the
    decider of story 001 (it sends exactly once in the replay namespace); a changed environment is refused."""
    from n17q_engine.agent.spec import environment_digest, file_digest
    from replays.agents import agent_spec, agent_status
    from tests.engine import test_agent_decider as engine

    _isolation_or_skip()
    wheel = build_wheel(tmp_path)
    out = register(capsys, "wheel-agent", str(wheel), "--command", WHEEL_SCRIPT)
    assert out["wheel"] == wheel.name and out["digest"] == file_digest(wheel)
    env = Path(out["environment"])
    assert env.is_relative_to(Path(os.environ["N17Q_DATA_DIR"]) / "agents")
    assert out["environment_digest"] == environment_digest(env)
    installed = {line.split("==")[0].split(" @ ")[0].lower() for line in out["installed"]}
    assert {"mcp", "openai", "n17q-wheel-agent"} <= installed and "django" not in installed
    assert (env / "bin" / WHEEL_SCRIPT).is_file() and not os.stat(env / "bin" / WHEEL_SCRIPT).st_mode & 0o222
    assert (Path(out["folder"]) / wheel.name).read_bytes() == wheel.read_bytes()  # the copy the digest pins
    assert out["runnable"] is True and out["command"] == [WHEEL_SCRIPT]

    spec = agent_spec(RegisteredAgent.objects.get(name="wheel-agent"))
    assert spec.executable() == str(env / "bin" / WHEEL_SCRIPT)
    fixtures, log = engine.author(spec, engine.STORY_001, "email-delivery", engine.story_001_script())
    assert len(fixtures) == 4
    assert len(engine.kinds(log, "effect.execution")) == 1 and engine.final(log)["state"] == "completed"
    assert [c["tool"] for c in engine.kinds(log, "tool.call") if c["tool"] != "model.chat"][:2] == [
        "email.draft_create",
        "email.draft_update",
    ]

    # its environment changed after registration: offered no more, refused at launch
    script_path = env / "lib"
    site = next(script_path.glob("python*/site-packages")) / WHEEL_PACKAGE / "agent.py"
    site.parent.chmod(0o755)
    site.chmod(0o644)
    site.write_text(site.read_text() + "\n# changed after registration\n")
    assert "its environment changed since it was built" in agent_status(RegisteredAgent.objects.get(name="wheel-agent"))


@pytest.mark.database_incidental
def test_a_wheel_runs_with_python_dash_m_as_its_entry(demo, tmp_path, capsys):
    """`python -m MODULE` as the entry; launched from the CLI on story 003 from the checkpoint before the broad
    suite, it runs in the sandbox and stops precisely at its first model call (the demo holds no model fixtures).
    The wheel carries the planted `.pth`/`sitecustomize` of `hostile`: they are the sandbox's interpreter's to
    process (their host folder is not in its view), and neither registration nor the run leaves a marker on the
    host."""
    _isolation_or_skip()
    markers = tmp_path / "markers"
    markers.mkdir()
    wheel = build_wheel(tmp_path, **hostile(markers))
    out = register(capsys, "wheel-m", str(wheel), "--command", f"python -m {WHEEL_PACKAGE}")
    assert out["command"] == ["python", "-m", WHEEL_PACKAGE] and out["runnable"] is True
    call_command(
        "replay", RUN, "--mode", "counterfactual", "--vary", "decider=agent:wheel-m", "--checkpoint", A1, "--inline"
    )
    replay = Replay.objects.get()
    assert replay.state == Replay.State.FINISHED, replay.error
    (missing,) = replay.missing
    assert missing["tool"] == "model.chat"  # the agent ran, listed its tools and asked its model
    assert replay.environment["agent"]["digest"] == out["digest"]
    assert sorted(p.name for p in markers.iterdir()) == []


def hostile(markers: Path) -> dict:
    """`build_wheel` arguments planting code that would run on the host if anything of the wheel were started there:
    `.pth` files with an `import` line (at the root and in `.data/purelib`), `sitecustomize` and `usercustomize`
    modules, a `pip` package and console script, a gui script and a `#!python` script. Each leaves a file in
    `markers` (a host folder the sandbox does not show) when it runs."""
    dist_data = f"{WHEEL_PACKAGE}-1.0.data"

    def leaves(name: str) -> str:
        return f"import os; open(os.path.join({str(markers)!r}, {name!r}), 'w').close()"

    return {
        "extra": {
            "zz_n17q_hostile.pth": leaves("root.pth") + "\n",
            f"{dist_data}/purelib/zz_n17q_hostile_data.pth": leaves("data.pth") + "\n",
            "sitecustomize.py": leaves("sitecustomize") + "\n",
            "usercustomize.py": leaves("usercustomize") + "\n",
            "pip/__init__.py": leaves("pip-package") + "\n",
            "pip/__main__.py": leaves("pip-main") + "\n",
            f"{WHEEL_PACKAGE}/hostile.py": f"def run() -> None:\n    {leaves('entry-point')}\n",
            f"{dist_data}/scripts/n17q-hostile-script": "#!python\n" + leaves("script") + "\n",
        },
        "entry_points": f"pip = {WHEEL_PACKAGE}.hostile:run\n[gui_scripts]\nn17q-gui = {WHEEL_PACKAGE}.hostile:run\n",
    }


@pytest.mark.parametrize("door", ["service", "admin"])
def test_registering_a_wheel_runs_nothing_of_it_on_the_host_and_records_what_it_installed(tmp_path, client_as, door):
    """Issue 33: a wheel's `.pth`, `sitecustomize`, `usercustomize`, a `pip` of its own and its entry points run
    nowhere at registration (the marker folder stays empty), through the service and through the admin form; the
    environment still holds them (the sandbox's interpreter will see them) and records what was installed."""
    from replays.agents import agent_register

    markers = tmp_path / "markers"
    markers.mkdir()
    wheel = build_wheel(tmp_path, requires=(), **hostile(markers))
    if door == "service":
        agent = agent_register("hostile", str(wheel), [WHEEL_SCRIPT])
    else:
        done = client_as("admin").post(
            "/admin/replays/registeredagent/add/",
            {"name": "hostile", "folder": str(wheel), "command_line": WHEEL_SCRIPT, "requirements": ""},
        )
        assert done.status_code == 302, done.content.decode()[:3000]
        agent = RegisteredAgent.objects.get(name="hostile")
    assert sorted(p.name for p in markers.iterdir()) == []
    assert agent.installed == ["n17q-wheel-agent==1.0"] and agent.wheel == wheel.name
    env = Path(agent.environment)
    site = next(env.glob("lib/python*/site-packages"))
    for planted in ("zz_n17q_hostile.pth", "zz_n17q_hostile_data.pth", "sitecustomize.py", "pip/__init__.py"):
        assert (site / planted).is_file(), planted  # unpacked as files, for the sandbox's interpreter alone
    for script in (WHEEL_SCRIPT, "pip", "n17q-gui", "n17q-hostile-script"):
        assert (env / "bin" / script).read_text().startswith(f"#!{env / 'bin' / 'python'}\n"), script
    assert (env / "bin" / "python").is_symlink()  # the venv's interpreter, not a wheel's launcher
    assert (env / "bin" / "pip").read_text().count(f"from {WHEEL_PACKAGE}.hostile import run") == 1
    assert sorted(p.name for p in markers.iterdir()) == []


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        ({"entry_points": f"python = {WHEEL_PACKAGE}:cli\n"}, "bin/python would replace the environment's own file"),
        ({"entry_points": f"python3 = {WHEEL_PACKAGE}:cli\n"}, "bin/python3 would replace the environment's own"),
        ({"extra": {f"{WHEEL_PACKAGE}-1.0.data/data/pyvenv.cfg": "home = /tmp\n"}}, "pyvenv.cfg would replace"),
        ({"extra": {f"{WHEEL_PACKAGE}-1.0.data/scripts/python": "#!python\n"}}, "bin/python would replace"),
        ({"extra": {f"{WHEEL_PACKAGE}-1.0.data/data/lib64/x.py": ""}}, "is reached through a symlink"),
        ({"entry_points": "evil = os:system('id')\n"}, "is not NAME = module:attr"),
    ],
)
def test_a_wheel_that_would_replace_the_environments_interpreter_is_refused_and_nothing_ran(tmp_path, plant, message):
    """A console script or data file named like the venv's own interpreter or config (the old install ran
    `<env>/bin/python -m pip freeze` on the host: a wheel's `python` launcher would have run there) is refused in
    one line; nothing is registered, nothing of the wheel ran, no environment is left."""
    from replays.agents import AgentRefused, agent_register

    markers = tmp_path / "markers"
    markers.mkdir()
    marked = hostile(markers)
    wheel = build_wheel(
        tmp_path,
        requires=(),
        extra={**marked["extra"], **plant.get("extra", {})},
        entry_points=marked["entry_points"] + plant.get("entry_points", ""),
    )
    agents = Path(os.environ["N17Q_DATA_DIR"]) / "agents"
    before = sorted(agents.iterdir()) if agents.exists() else []
    with pytest.raises(AgentRefused, match=re.escape(message)) as raised:
        agent_register("hostile", str(wheel), [WHEEL_SCRIPT])
    assert "\n" not in str(raised.value)
    assert not RegisteredAgent.objects.exists()
    assert (sorted(agents.iterdir()) if agents.exists() else []) == before
    assert sorted(p.name for p in markers.iterdir()) == []


@pytest.mark.parametrize("door", ["folder requirements", "wheel Requires-Dist"])
def test_a_requirement_that_only_a_build_could_install_is_refused_and_its_setup_never_runs(tmp_path, monkeypatch, door):
    """Issue 33: a requirement published only as a source distribution would run its `setup.py` on the host to be
    built (the old `pip install` did, in the agent's venv). Wheels only: it is refused in one line, unbuilt. The
    registry here is a local folder (pip's own PIP_NO_INDEX / PIP_FIND_LINKS), so no network is needed."""
    import tarfile

    from replays.agents import AgentRefused, agent_register

    markers = tmp_path / "markers"
    markers.mkdir()
    links = tmp_path / "links"
    links.mkdir()
    source = tmp_path / "n17q-sdist-only-1.0"
    source.mkdir()
    (source / "setup.py").write_text(
        f"import os\nopen(os.path.join({str(markers)!r}, 'setup.py'), 'w').close()\n"
        "from setuptools import setup\nsetup(name='n17q-sdist-only', version='1.0')\n"
    )
    (source / "PKG-INFO").write_text("Metadata-Version: 1.0\nName: n17q-sdist-only\nVersion: 1.0\n")
    with tarfile.open(links / "n17q-sdist-only-1.0.tar.gz", "w:gz") as tf:
        tf.add(source, arcname=source.name)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    monkeypatch.setenv("PIP_NO_BUILD_ISOLATION", "0")  # pip's spelling of "build with what is installed"
    with pytest.raises(
        AgentRefused, match=r"wheels only.*No matching distribution found for n17q-sdist-only"
    ) as raised:
        if door == "folder requirements":
            agent_register(
                "sdist", str(agent_folder(tmp_path, AGENT)), ["python", AGENT], requirements="n17q-sdist-only"
            )
        else:
            agent_register("sdist", str(build_wheel(tmp_path, requires=("n17q-sdist-only",))), [WHEEL_SCRIPT])
    assert "\n" not in str(raised.value)
    assert not RegisteredAgent.objects.exists()
    assert sorted(p.name for p in markers.iterdir()) == []


@pytest.mark.parametrize(
    ("make", "command", "message"),
    [
        ("not-a-zip", WHEEL_SCRIPT, "is not a zip archive"),
        ("bad-name", WHEEL_SCRIPT, "not a wheel file name"),
        ("no-record", WHEEL_SCRIPT, f"has no {WHEEL_PACKAGE}-1.0.dist-info/RECORD"),
        ("ok", "not-its-script", "has no console script 'not-its-script'"),
        ("ok", "python -m not_its_module", "has no module 'not_its_module'"),
        ("ok", "python agent.py", "python -m MODULE (no script path)"),
        ("missing", WHEEL_SCRIPT, "is not a file"),
        ("url-requires", WHEEL_SCRIPT, "names a URL; its requirements come from the package registry"),
    ],
)
def test_a_bad_wheel_is_refused_in_one_line_and_nothing_is_registered(tmp_path, make, command, message):
    if make == "not-a-zip":
        wheel = tmp_path / f"{WHEEL_PACKAGE}-1.0-py3-none-any.whl"
        wheel.write_text("not a zip at all\n")
    elif make == "bad-name":
        wheel = build_wheel(tmp_path, filename="agent.whl")
    elif make == "no-record":
        wheel = build_wheel(tmp_path, drop=f"{WHEEL_PACKAGE}-1.0.dist-info/RECORD")
    elif make == "url-requires":
        wheel = build_wheel(tmp_path, requires=("mcp", "evil @ https://example.invalid/evil-1.0-py3-none-any.whl"))
    elif make == "missing":
        wheel = tmp_path / f"{WHEEL_PACKAGE}-1.0-py3-none-any.whl"
    else:
        wheel = build_wheel(tmp_path)
    agents = Path(os.environ["N17Q_DATA_DIR"]) / "agents"
    before = sorted(agents.iterdir()) if agents.exists() else []  # earlier tests' environments stay on disk
    with pytest.raises(CommandError, match=re.escape(message)) as raised:
        call_command("register_agent", "bad-wheel", str(wheel), "--command", command, "--json")
    assert "\n" not in str(raised.value)
    assert not RegisteredAgent.objects.exists()
    assert (sorted(agents.iterdir()) if agents.exists() else []) == before  # nothing built, nothing left


# --- the live model connection from the CLI -------------------------------------------------------------------------


# Transactional: the worker's relay answers from the sandbox's relay thread, which counts each call in the replay's
# row over a connection of its own (replays.relay_count): it must see the committed replay, as a worker does.
@pytest.mark.django_db(transaction=True)
def test_the_cli_relays_a_declared_live_model_through_the_worker_and_says_it_is_a_fresh_comparison_run(
    demo, tmp_path, capsys, monkeypatch
):
    """`replay --model-connection NAME`: the form's approved connection from the command line, the same relay path
    (the worker's relay, a loopback OpenAI-compatible server standing in for a provider). The credential is in the
    worker's environment only: never in the command's output, the database or the sandbox."""
    from accounts.models import AuditEntry
    from tests.engine.test_agent_decider import CREDENTIAL_NAME, SECRET, Provider

    _isolation_or_skip()
    monkeypatch.setenv(CREDENTIAL_NAME, SECRET)
    provider = Provider()
    try:
        approve_model_connection("loopback-model", port=provider.port, credential=CREDENTIAL_NAME)
        folder = agent_folder(tmp_path, "live_probe_agent.py")
        register(capsys, "live-probe", str(folder), "--command", "python live_probe_agent.py")
        call_command(
            "replay",
            "run-001-recorded",
            "--mode",
            "counterfactual",
            "--vary",
            "decider=agent:live-probe",
            "--model-connection",
            "loopback-model",
            "--inline",
            "--json",
        )
        said = capsys.readouterr().out
        out = json.loads(said)
        assert out["replay_state"] == "finished", out["error"]
        assert out["model_connection"] == {
            "connection": "loopback-model",
            "base_url": provider.base_url,
            "credential_name": CREDENTIAL_NAME,
            "max_calls": 100,
        }
        assert out["model_calls"] == {
            "connection": "loopback-model",
            "calls": 2,
            "refused_by_cap": 0,
            "cap": 100,
            "stopped_by_cap": False,
        }
        assert out["run_label"].startswith("a fresh comparison run, not a replay")
        assert SECRET not in said
        # the provider got the agent's two calls with the credential the worker added (positive control)
        assert len(provider.received) == 2
        assert all(r["headers"]["Authorization"] == f"Bearer {SECRET}" for r in provider.received)
        dump = json.loads(provider.received[1]["body"]["messages"][-1]["content"])
        assert CREDENTIAL_NAME not in dump["environ"] and SECRET not in json.dumps(dump)
        replay = Replay.objects.get()
        assert replay.environment["truth"] == "fresh comparison"
        results = [e.body for e in Event.objects.filter(run=replay.run, kind="tool.result")]
        assert [r["origin"] for r in results if r.get("connection", "").startswith("live:")] == ["live", "live"]
        stored = json.dumps(
            [
                list(Replay.objects.values()),
                list(AuditEntry.objects.values("detail", "target")),
                [e.body for e in Event.objects.filter(run=replay.run)],
            ],
            default=str,
        )
        assert SECRET not in stored
    finally:
        provider.close()


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--model-connection", "http://127.0.0.1:9/v1"), "no model connection is registered under that name"),
        (("--model-connection", "N17Q_SECRET_KEY"), "no model connection is registered under that name"),
        (("--model-connection", "proposed-model"), "is proposed, not approved"),
    ],
)
def test_the_cli_refuses_a_model_connection_that_is_not_an_approved_one_in_one_line(
    demo, tmp_path, capsys, flags, message
):
    propose_model_connection("proposed-model", port=9, credential="N17Q_MODEL_CREDENTIAL_PROVIDER")
    folder = agent_folder(tmp_path, AGENT)
    register(capsys, "tester", str(folder), "--command", f"python {AGENT}")
    with pytest.raises(CommandError, match=re.escape(message)) as raised:
        call_command("replay", RUN, "--mode", "counterfactual", "--vary", "decider=agent:tester", *flags, "--inline")
    assert "\n" not in str(raised.value) and "N17Q_SECRET_KEY" not in str(raised.value)
    assert not Replay.objects.exists()


def test_the_cli_refuses_a_model_connection_for_a_decider_that_is_not_an_agent(demo):
    approve_model_connection("approved-model", port=9, credential="N17Q_MODEL_CREDENTIAL_PROVIDER")
    with pytest.raises(CommandError, match="whose decider is an agent"):
        call_command(
            "replay",
            RUN,
            "--mode",
            "counterfactual",
            "--vary",
            "decider=careful",
            "--model-connection",
            "approved-model",
            "--inline",
        )
    assert not Replay.objects.exists()


# --- issue 33: a stopped agent always leaves a run ----------------------------------------------------------------


def _launch_agent(capsys, tmp_path, name: str, files: tuple[str, ...], command: str, extra=None) -> Replay:
    folder = agent_folder(tmp_path, *files, extra=extra)
    register(capsys, name, str(folder), "--command", command)
    call_command(
        "replay", RUN, "--mode", "counterfactual", "--vary", f"decider=agent:{name}", "--checkpoint", A1, "--inline"
    )
    capsys.readouterr()
    return Replay.objects.get(decider=f"agent:{name}")


def test_an_agent_stopped_for_network_attempts_leaves_a_stopped_run_with_its_violations(demo, tmp_path, capsys):
    """Attack: a quiet agent tries TCP, UDP and DNS and exits 0. The network watch stops the run; the worker keeps
    the engine's record of it: a `stopped` run with `sandbox.violation` events, never a failed replay with no run."""
    _isolation_or_skip()
    shell = "TCP_PORT=9\nUDP_PORT=9\nDNS_NAME=localhost\n"  # nothing listens: inside, every route ends at the watch
    replay = _launch_agent(capsys, tmp_path, "quiet", ("quiet_probe.sh",), "quiet_probe.sh", {"targets.sh": shell})
    assert replay.state == Replay.State.FINISHED and replay.run is not None, replay.error
    assert replay.violations and all(v["stopped"] for v in replay.violations)
    assert "sandbox violation" in replay.error  # the replay says why it stopped
    run = replay.run
    assert run.final_state == "stopped" and run.event_count > 0
    in_log = list(Event.objects.filter(run=run, kind="sandbox.violation").values_list("body", flat=True))
    assert in_log and {v["target"] for v in in_log} <= {v["target"] for v in replay.violations}
    state = Event.objects.filter(run=run, kind="run.state").order_by("-seq").first().body
    assert state["reason"].startswith("sandbox.violation: agent quiet attempted")


def test_an_agent_that_signals_every_pid_it_can_name_still_leaves_a_run(demo, tmp_path, capsys):
    """Attack: the agent signals its parent, pid 1, its group and every pid (`kill(-1)`), SIGINT to SIGKILL. The
    engine is out of its reach: the replay finishes with a `failed` run naming its exit status and its last words."""
    _isolation_or_skip()
    replay = _launch_agent(capsys, tmp_path, "signaller", ("signal_agent.py",), "python signal_agent.py")
    assert replay.state == Replay.State.FINISHED and replay.run is not None, replay.error
    assert replay.run.final_state == "failed"
    state = Event.objects.filter(run=replay.run, kind="run.state").order_by("-seq").first().body
    assert "agent signaller exited with status 3" in state["reason"] and "signals " in state["reason"]


def test_a_crashing_agents_stderr_in_the_stop_reason_is_masked_like_every_event(demo, tmp_path, capsys):
    """Issue 36, point 4: the stop reason quotes the agent's last stderr lines; a credential among them is masked by
    the importer's secret scan, as anything else in the run's events is."""
    import secrets
    import string

    from replays.services import replay_create, replay_execute
    from runs.models import MaskedSecret

    _isolation_or_skip()
    token = "ghp_" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(36))
    crash = f"import sys\nprint('using token {token}', file=sys.stderr)\nraise SystemExit('gave up')\n"
    folder = agent_folder(tmp_path, extra={"crash.py": crash})
    register(capsys, "leaky", str(folder), "--command", "python crash.py")
    replay = replay_create(
        Run.objects.get(run_id=RUN),
        mode="counterfactual",
        vary={"decider": "agent:leaky"},
        scenario="coding-review-request@1",
    )
    done = replay_execute(replay.pk)
    assert done.run is not None, done.error
    state = Event.objects.filter(run=done.run, kind="run.state").order_by("-seq").first()
    assert state is not None
    reason = state.body["reason"]
    assert state.body["state"] == "failed" and reason.startswith("agent leaky exited with status 1: using token ")
    assert reason.endswith(" | gave up") and token[4:] not in reason, reason
    assert MaskedSecret.objects.filter(run=done.run).exists()


# --- issue 36 point 1: the same branch, the same requests, launch after launch ------------------------------------

EMAIL_RUN = "run-001-recorded"


def _email_version(version: int, fixtures: list[dict]) -> str:
    """email-delivery at `version` (the seed's files, the same seed), with the model contract and `fixtures`: what
    approving model fixtures would mint, imported as a version."""
    from fixtures_review.scenarios import scenario_import
    from n17q_demo import seed_scenarios
    from n17q_engine.agent.model import MODEL_CONTRACT
    from n17q_engine.package import build_scenario

    seed = next(p for p in seed_scenarios.seed_packages() if p.manifest["scenario"]["name"] == "email-delivery")
    files = {name: json.loads(data) for name, data in seed.files.items()}
    files["scenario.json"] = {**files["scenario.json"], "version": version}
    files["contracts.json"] = [*files["contracts.json"], MODEL_CONTRACT]
    files["fixtures.json"] = [*files["fixtures.json"], *fixtures]
    stored, _created = scenario_import(build_scenario(files))
    return stored.ref


def _run_log(replay: Replay) -> list[dict]:
    """The replay's run as imported, without what names the replay itself (docs/agents.md "Determinism")."""
    out = []
    for body in Event.objects.filter(run=replay.run).order_by("seq").values_list("body", flat=True):
        body = json.loads(json.dumps(body))
        del body["at"]["wall"]
        if body["kind"] == "replay.scope":
            del body["package"]
        if body["kind"] == "approval.recorded" and body.get("origin") == "simulated":
            assert body.pop("run") == replay.run.run_id
        out.append(body)
    return out


@pytest.mark.database_incidental
def test_story_001_launched_again_and_again_from_the_console_answers_from_fixtures_authored_by_earlier_launches(
    demo, tmp_path, capsys
):
    """The model-fixture loop through the worker: launch, read the model request the run stopped on, add its answer
    as a new scenario version, launch again. Every launch is a new replay (a new replay id, run id and launch
    instant) of a new scenario version, and the agent quotes the send's execution id and idempotency key back to its
    model: the fixtures authored by the earlier launches answer the later ones only because those values derive
    from the branch, not the replay. The last version, launched twice, completes twice with the same log."""
    from n17q_engine.agent.model import completion, model_fixture
    from tests.engine import test_agent_decider as engine

    _isolation_or_skip()
    register(capsys, "steady", str(agent_folder(tmp_path, AGENT)), "--command", f"python {AGENT}")
    script = [
        (None, "email.draft_create", engine._recorded_request(EMAIL_RUN, "e-001-call-draft-create")),
        (None, "email.draft_update", engine._recorded_request(EMAIL_RUN, "e-001-call-draft-update")),
        (None, "email.send", {"draft_id": "dr-5501"}),
        ("Sent the notice once to the narrowed audience.", None, None),
    ]

    def launch(ref: str) -> Replay:
        call_command(
            "replay", EMAIL_RUN, "--mode", "counterfactual", "--vary", "decider=agent:steady", "--scenario", ref,
            "--inline",
        )  # fmt: skip
        capsys.readouterr()
        replay = Replay.objects.order_by("-pk").first()
        assert replay is not None and replay.run is not None, replay and replay.error
        return replay

    fixtures: list[dict] = []
    launches: list[Replay] = []
    for turn in range(len(script) + 1):
        ref = _email_version(2 + turn, fixtures)
        replay = launch(ref)
        launches.append(replay)
        if replay.run.final_state != "incomplete_test_world":
            break
        (missing,) = Event.objects.filter(run=replay.run, kind="fixture.missing").values_list("body", flat=True)
        assert missing["tool"] == "model.chat", missing
        request = Event.objects.get(run=replay.run, event_id=missing["call_id"]).body["request"]
        # (red before issue 36: the request after the send, whose answer was added, missed again at the next launch)
        assert turn < len(script), f"a model request answered by an earlier launch missed again: {request}"
        content, tool, arguments = script[turn]
        calls = [(f"call-{turn}", tool, json.dumps(arguments, sort_keys=True))] if tool else None
        body = completion(content, calls, model=request["model"], number=turn)
        fixtures.append(model_fixture(f"model-steady-{turn}", request, body, recorded_at="2026-12-06T00:00:00Z"))
    assert len(fixtures) == len(script) and replay.run.final_state == "completed", replay.error
    assert len({r.pk for r in launches}) == len(launches) == len(script) + 1  # a new replay every time
    again = launch(ref)
    assert again.run is not None and again.run.final_state == "completed", again.error
    assert again.run.run_id != replay.run.run_id
    first, second = _run_log(replay), _run_log(again)
    assert [e["kind"] for e in first] == [e["kind"] for e in second]
    for a, b in zip(first, second, strict=True):
        assert a == b, {k: (a.get(k), b.get(k)) for k in a.keys() | b.keys() if a.get(k) != b.get(k)}
    (execution,) = [e for e in second if e["kind"] == "effect.execution"]
    asked = [e["request"] for e in second if e["kind"] == "tool.call" and e["tool"] == "model.chat"]
    assert execution["idempotency_key"] in json.dumps(asked[-1])  # the agent quoted it back, and was answered
