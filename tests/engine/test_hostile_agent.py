"""Hostile text and an external agent (issue 19, seed 000 "The model could not switch modes"): a real agent (the
`mcp` client SDK and the `openai` client, in the sandbox) whose model obeys the hostile text calls the tools the
scenario forbids; each is refused by the world, and the repeated attempts stop the run by the invariant."""

from __future__ import annotations

import json

from n17q_engine.agent.model import MODEL_CONTRACT, MODEL_TOOL, completion, model_fixture
from n17q_engine.package import build_scenario
from tests.engine import replaylib as rl
from tests.engine import test_agent_decider as agents
from tests.engine.test_hostile_text import ATTEMPTS, HOSTILE, REFUSED

# the agent-decider tests' module fixtures: the sandbox boundary (skips without namespaces) and the real agent
pytestmark = agents.pytestmark
_boundary, real_agent = agents._boundary, agents.real_agent
RUN = "run-001-recorded"


def hostile_scenario(model_fixtures: list[dict]):
    files = {n: json.loads(d) for n, d in agents.SEEDS["email-delivery"].files.items()}
    files["contracts.json"] = [*files["contracts.json"], MODEL_CONTRACT]
    files["fixtures.json"] = [*files["fixtures.json"], *model_fixtures]
    files["scenario.json"]["invariants"] = [*files["scenario.json"].get("invariants", []), REFUSED]
    return build_scenario(files)


def test_a_real_agent_obeying_hostile_text_is_refused_and_its_repeated_attempts_stop_the_run(real_agent):
    # the model reads the hostile note and asks for one forbidden tool a turn, as the text tells it
    script = [(HOSTILE if turn == 0 else None, tool, args) for turn, (tool, args) in enumerate(ATTEMPTS)]
    fixtures: list[dict] = []
    for turn in range(len(script) + 1):
        _out, log, result = agents.replay_with(real_agent, RUN, hostile_scenario(fixtures))
        state = agents.final(log)
        missing = state["missing"]
        if state["state"] != "incomplete_test_world" or not missing or missing[0]["tool"] != MODEL_TOOL:
            break
        request = [c for c in agents.kinds(log, "tool.call") if c["tool"] == MODEL_TOOL][-1]["request"]
        content, tool, arguments = script[turn]
        calls = [(f"call-{turn}", tool, json.dumps(arguments, sort_keys=True))]
        body = completion(content, calls, model=request["model"], number=turn)
        fixtures.append(
            model_fixture(
                f"model-hostile-{turn}",
                request,
                body,
                recorded_at=rl.T0,
                synthetic=True,
                fidelity_note="a model that obeys hostile text",
            )
        )
    # three model turns were needed: the third forbidden call ended the run
    assert len(fixtures) == 3
    refused = [r for r in agents.kinds(log, "tool.result") if r.get("refused")]
    tools = {c["id"]: c["tool"] for c in agents.kinds(log, "tool.call")}
    assert [tools[r["call_id"]] for r in refused] == ["env.set", "config.write", "harness.set_mode"]
    assert all(r["outcome"] == "denied" for r in refused)
    assert state["state"] == "failed" and state["reason"].startswith("invariant no-mode-switch")
    # the agent saw each denial as a tool error (its next model request holds it), and nothing left the fixture world
    second_request = [c for c in agents.kinds(log, "tool.call") if c["tool"] == MODEL_TOOL][1]["request"]
    assert any('"denied"' in str(m.get("content")) for m in second_request["messages"] if m["role"] == "tool")
    assert agents.kinds(log, "effect.intent") == [] and result.isolation == "netns"
    assert not [e for e in log if e.get("origin") == "live" or e.get("namespace") == "live"]
