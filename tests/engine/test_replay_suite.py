"""Issue 36, point 5: an agent's replays as tests in CI. The suite format and its refusals, the first divergence and
the missing fixtures (pure functions), and the pytest plugin run on the shipped example (examples/mcp_openai_agent)
in a child pytest, read back from its JUnit XML."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest

from n17q_engine.divergence import first_divergence, missing_fixtures
from n17q_engine.replay_suite import SuiteError, judge, load_suite, read_recorded_run
from tests.engine import replay_ci


def _write(tmp: Path, name: str, text: str) -> Path:
    path = tmp / name
    path.write_text(text)
    return path


# --- the suite file --------------------------------------------------------------------------------------------


def test_the_example_suite_names_its_cases_branch_points_and_agent():
    cases = load_suite(replay_ci.EXAMPLE / "replays.n17q.toml")
    assert [(c.name, c.branch_points, c.expect) for c in cases] == [
        ("story-001", ("start",), "completed"),
        ("story-003", ("e-003-a1-checkpoint",), "stopped"),
        ("story-001-canary", ("start",), "incomplete_test_world"),
    ]
    assert cases[0].agent.command == ("python", "agent.py") and cases[0].agent.environment == ""
    assert cases[0].agent.folder == replay_ci.EXAMPLE / "agent"


def test_a_json_suite_reads_as_its_toml_twin(tmp_path):
    """The same structure as JSON (paths absolute here, as a suite may give them)."""
    import json
    import tomllib

    toml_suite = replay_ci.EXAMPLE / "replays.n17q.toml"
    data = tomllib.loads(toml_suite.read_text())
    data["agent"]["folder"] = str(replay_ci.EXAMPLE / data["agent"]["folder"])
    for case in data["case"]:
        case["scenario"], case["run"] = (str(replay_ci.EXAMPLE / case[k]) for k in ("scenario", "run"))
    json_cases = load_suite(_write(tmp_path, "twin.n17q.json", json.dumps(data)))
    toml_cases = load_suite(toml_suite)
    assert [(c.name, c.scenario, c.run, c.branch_points, c.agent, c.expect) for c in json_cases] == [
        (c.name, c.scenario, c.run, c.branch_points, c.agent, c.expect) for c in toml_cases
    ]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("[[case]\n", "not a valid suite file"),
        ("x = 1\n", "unknown key 'x'"),
        ("[agent]\nname='a'\nfolder='.'\ncommand=['python','a.py']\n", "no [[case]] given"),
        ("[[case]]\nname='c'\nscenario='.'\nrun='.'\n", "no agent"),
        (
            "[agent]\nname='a'\nfolder='.'\ncommand=['python']\n[[case]]\nname='c'\nscenario='nope'\nrun='.'\n",
            "scenario: ",
        ),
        (
            "[agent]\nname='a'\nfolder='.'\ncommand=['python']\n[[case]]\nname='c'\nscenario='.'\nrun='.'\n"
            "expect='green'\n",
            "expect must be one of",
        ),
        (
            "[agent]\nname='A B'\nfolder='.'\ncommand=['python']\n[[case]]\nname='c'\nscenario='.'\nrun='.'\n",
            "name must be lower-case",
        ),
        (
            "[agent]\nname='a'\nfolder='.'\ncommand=['python']\n[[case]]\nname='c'\nscenario='.'\nrun='.'\n"
            "branch_points=[]\n",
            "branch_points must be a non-empty list",
        ),
    ],
    ids=["toml", "unknown-key", "no-case", "no-agent", "no-scenario", "expect", "agent-name", "branch-points"],
)
def test_a_bad_suite_is_refused_in_one_line(tmp_path, text, error):
    path = _write(tmp_path, "s.n17q.toml", text)
    with pytest.raises(SuiteError) as info:
        load_suite(path)
    assert error in str(info.value) and "\n" not in str(info.value)


def test_a_run_that_is_not_a_bundle_is_refused_in_one_line(tmp_path):
    path = _write(tmp_path, "run.zip", "not a zip")
    with pytest.raises(SuiteError, match="not a run bundle") as info:
        read_recorded_run(path)
    assert "\n" not in str(info.value)


def test_the_plugin_refuses_a_bad_suite_in_one_line_without_a_traceback(tmp_path):
    suite = _write(tmp_path, "bad.toml", "[agent]\nname='a'\nfolder='.'\ncommand=['python']\n")
    done = replay_ci.run_pytest(sys.executable, ["--n17q-suite", str(suite)], tmp_path)
    assert done.returncode == 4, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert [line for line in done.stderr.splitlines() if line.strip()] == [
        f"ERROR: {suite}: no [[case]] given (a suite names at least one case)"
    ]


def test_a_collected_suite_file_with_a_bad_checkpoint_is_one_collection_error_line(tmp_path):
    example = replay_ci.EXAMPLE
    suite = _write(
        tmp_path,
        "x.n17q.toml",
        f"[agent]\nname='a'\nfolder='{example / 'agent'}'\ncommand=['python','agent.py']\n[[case]]\nname='c'\n"
        f"scenario='{example / 'stories/001-email-delivery/scenario'}'\n"
        f"run='{example / 'stories/001-email-delivery/run.zip'}'\nbranch_points=['e-001-no-such']\n",
    )
    done = replay_ci.run_pytest(sys.executable, [str(suite)], tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout and "branch point 'e-001-no-such' is not a checkpoint event" in done.stdout


def test_without_its_options_or_suite_files_the_plugin_collects_nothing(tmp_path):
    _write(tmp_path, "test_plain.py", "def test_plain():\n    assert True\n")
    _write(tmp_path, "notes.toml", "x = 1\n")
    done = replay_ci.run_pytest(sys.executable, ["-q", str(tmp_path)], tmp_path)
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr


# --- the first divergence and the missing fixtures ------------------------------------------------------------


def _ev(seq: int, eid: str, kind: str, **fields) -> dict:
    return {"seq": seq, "id": eid, "kind": kind, **fields}


RECORDED = [
    _ev(1, "p1", "model.proposal", proposal={"type": "tool_call", "tool": "a.read"}, accepted=True),
    _ev(2, "c1", "tool.call", tool="a.read", contract_revision=1, request_digest="sha256:1", request={"q": 1}),
    _ev(3, "r1", "tool.result", call_id="c1", outcome="ok"),
    _ev(4, "p2", "model.proposal", proposal={"type": "tool_call", "tool": "a.send"}, accepted=True),
    _ev(5, "c2", "tool.call", tool="a.send", contract_revision=1, request_digest="sha256:2", request={"to": "x"}),
    _ev(6, "r2", "tool.result", call_id="c2", outcome="ok"),
]


def test_a_replay_that_does_what_the_recording_did_has_no_divergence_even_with_its_model_calls_and_arguments():
    replay = [
        _ev(1, "m1", "tool.call", tool="model.chat", contract_revision=1, request_digest="sha256:m"),
        _ev(2, "q1", "model.proposal", proposal={"type": "tool_call", "tool": "a.read", "q": 1}, accepted=True),
        *[{**e, "seq": e["seq"] + 2, "id": "x" + e["id"]} for e in RECORDED[1:3]],
        _ev(6, "q2", "model.proposal", proposal={"type": "tool_call", "tool": "a.send", "to": "x"}, accepted=True),
        *[{**e, "seq": e["seq"] + 2, "id": "x" + e["id"]} for e in RECORDED[4:]],
    ]
    replay[3]["call_id"] = "xc1"
    replay[6]["call_id"] = "xc2"
    assert first_divergence(RECORDED, replay) is None


def test_the_first_divergence_names_the_first_differing_tool_call_and_what_each_side_did():
    replay = [
        *RECORDED[:3],
        _ev(4, "q2", "model.proposal", proposal={"type": "tool_call", "tool": "a.send"}, accepted=True),
        _ev(5, "d2", "tool.call", tool="a.send", contract_revision=1, request_digest="sha256:9", request={"to": "y"}),
        _ev(6, "m", "fixture.missing", call_id="d2", tool="a.send", request_digest="sha256:9"),
    ]
    found = first_divergence(RECORDED, replay)
    assert found is not None and (found.layer, found.index) == ("tool call", 2)
    text = found.describe()
    assert "recorded c2 called a.send" in text and "-> ok" in text
    assert "replay d2 called a.send" in text and "-> no result" in text and '{"to":"y"}' in text
    (missing,) = missing_fixtures(replay)
    assert (missing.tool, missing.request_digest, missing.request) == ("a.send", "sha256:9", {"to": "y"})
    assert missing.describe() == 'missing fixture: a.send sha256:9; request {"to":"y"}'


def test_a_replay_that_stops_early_diverges_where_it_has_nothing():
    found = first_divergence(RECORDED, RECORDED[:3])
    assert found is not None and found.layer == "decision" and found.index == 2 and found.replay is None
    assert "replay nothing (no such step)" in found.describe()


def test_a_branched_replay_is_compared_after_its_checkpoint_only():
    recorded = [_ev(1, "ck", "checkpoint"), *[{**e, "seq": e["seq"] + 1} for e in RECORDED]]
    scope = _ev(1, "s", "replay.scope", segment={"from_checkpoint": "ck", "restored": {"checkpoint": "rck"}})
    history = _ev(2, "h", "model.proposal", proposal={"type": "tool_call", "tool": "other"}, accepted=True)
    replay = [scope, history, _ev(3, "rck", "checkpoint"), *[{**e, "seq": e["seq"] + 3} for e in RECORDED]]
    assert first_divergence(recorded, replay) is None


def test_the_verdict_on_the_recorded_runs_own_log_passes_and_a_canary_that_missed_nothing_fails():
    """`judge` on the recording itself (what a perfect replay would be): it passes as `completed`; a fixture-miss
    canary expecting `incomplete_test_world` fails when nothing was missing."""
    case = load_suite(replay_ci.EXAMPLE / "replays.n17q.toml")[0]
    run = read_recorded_run(case.run)
    verdict = judge(case, "start", run, run.manifest, run.events)
    assert verdict.passed and verdict.state == "completed" and verdict.divergence == "", verdict.message()
    canary = dataclasses.replace(case, expect="incomplete_test_world")
    verdict = judge(canary, "start", run, run.manifest, run.events)
    assert not verdict.passed
    assert verdict.problems == ["expected run.state incomplete_test_world, got completed: notice sent"]


# --- the plugin on the shipped example, in the sandbox ---------------------------------------------------------


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")
def test_the_example_agent_replays_story_001_to_completion_and_story_003_stops_before_review(tmp_path):
    """The project's own CI replays the shipped example through the plugin (docs/replay-in-ci.md)."""
    replay_ci.isolation_or_skip()
    junit, keep = tmp_path / "junit.xml", tmp_path / "runs"
    suite = replay_ci.EXAMPLE / "replays.n17q.toml"
    done = replay_ci.run_pytest(
        sys.executable, ["--n17q-suite", str(suite), f"--junitxml={junit}", f"--n17q-keep={keep}"], tmp_path
    )
    cases = replay_ci.junit_cases(junit)
    assert set(cases) == {"story-001[start]", "story-003[e-003-a1-checkpoint]", "story-001-canary[start]"}, done.stdout
    assert cases["story-001[start]"]["failure"] is None, cases["story-001[start]"]["failure"]
    assert cases["story-001[start]"]["properties"]["n17q.state"] == "completed"
    assert cases["story-003[e-003-a1-checkpoint]"]["failure"] is None
    assert cases["story-003[e-003-a1-checkpoint]"]["properties"]["n17q.state"] == "stopped"
    assert cases["story-001-canary[start]"]["failure"] is None
    assert cases["story-001-canary[start]"]["properties"]["n17q.state"] == "incomplete_test_world"
    assert cases["story-001-canary[start]"]["properties"]["n17q.missing_fixtures"] == "1"
    assert done.returncode == 0, done.stdout
    assert sorted(p.name for p in keep.iterdir()) == [
        "story-001--start",
        "story-001-canary--start",
        "story-003--e-003-a1-checkpoint",
    ]
    events = (keep / "story-003--e-003-a1-checkpoint" / "events.jsonl").read_text()
    assert '"tool":"review.create_request"' not in events.replace(" ", "")
    # Twice in a row: the same logs, byte for byte.
    again = tmp_path / "again"
    done = replay_ci.run_pytest(sys.executable, ["--n17q-suite", str(suite), f"--n17q-keep={again}", "-q"], tmp_path)
    assert done.returncode == 0, done.stdout
    for name in ("story-001--start", "story-003--e-003-a1-checkpoint"):
        assert (again / name / "events.jsonl").read_bytes() == (keep / name / "events.jsonl").read_bytes(), name


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")
def test_a_scenario_missing_a_model_answer_fails_with_the_missing_fixture_and_the_first_divergence(tmp_path):
    replay_ci.isolation_or_skip()
    suite = replay_ci.broken_copy(tmp_path, drop_model_turn=2)  # the answer that makes the agent send
    junit = tmp_path / "junit.xml"
    done = replay_ci.run_pytest(sys.executable, ["--n17q-suite", str(suite), f"--junitxml={junit}"], tmp_path)
    assert done.returncode == 1, done.stdout
    cases = replay_ci.junit_cases(junit)
    assert cases["story-001-whole[start]"]["failure"] is None
    message = cases["story-001-broken[start]"]["failure"]
    assert message is not None and "Traceback" not in message
    assert "expected run.state completed, got incomplete_test_world" in message
    assert "missing fixture: model.chat sha256:" in message and '"tool_call_id":"call-1"' in message
    assert "first divergence at decision #3: recorded e-001-propose-send proposed" in message
    assert "replay nothing (no such step)" in message


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")
def test_the_examples_committed_stories_are_what_its_authoring_script_writes(tmp_path):
    """Anyone can regenerate the example's runs, scenarios and model fixtures: the authoring loop (replay, read the
    request it stopped on, answer it, replay again), run on a copy, writes the committed files byte for byte."""
    import shutil
    import subprocess

    replay_ci.isolation_or_skip()
    copy = tmp_path / "example"
    shutil.copytree(replay_ci.EXAMPLE, copy, ignore=shutil.ignore_patterns("__pycache__", "stories"))
    done = subprocess.run(
        [sys.executable, str(replay_ci.EXAMPLE / "author_fixtures.py"), str(copy)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr
    written = {p.relative_to(copy): p.read_bytes() for p in sorted((copy / "stories").rglob("*")) if p.is_file()}
    committed = {
        p.relative_to(replay_ci.EXAMPLE): p.read_bytes()
        for p in sorted((replay_ci.EXAMPLE / "stories").rglob("*"))
        if p.is_file()
    }
    assert sorted(written) == sorted(committed)
    assert [name for name in written if written[name] != committed[name]] == []
