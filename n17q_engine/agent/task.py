"""What an agent is told of its task (issue 36; docs/agents.md, "What your agent receives").

`task_context` reads it from the replay's package only (the recorded run's manifest and events, the scenario),
never from a replay id, a clock or the host, so the same branch gives the same bytes every time. It reaches the agent
three ways, all the same document: the MCP resource `n17q://task` (JSON), the MCP prompt `n17q-task` (the same as
text, one user message), and the environment (`N17Q_TASK_ID`, `N17Q_TASK_TITLE`, `N17Q_TASK_FILE`: the JSON in a
read-only file inside the sandbox). Values are the recording's as stored: a value the importer's secret scan masked
is masked here too (nothing is read back from anywhere else).

"What the run did before the branch, as far as the agent may know": the restored history's steps the model side saw
(attempts started and ended, tool calls the model proposed with their arguments and each call's outcome, commands'
exit codes and result counts, human inputs' notes) and the checkpoint it branches at; not the bodies of tool results
(those are fixtures' blobs), not policy internals, not the recording's own later steps.
"""

from __future__ import annotations

from typing import Any

from ..deciders import SourceRun
from ..package import ScenarioPackage
from .model import MODEL_TOOL
from .names import openai_name

TASK_FORMAT = "n17q.agent-task/1"
TASK_URI = "n17q://task"
TASK_PROMPT = "n17q-task"
TASK_FILE_NAME = "n17q-task.json"
MAX_STEPS = 200  # steps of the history before the branch; the newest kept
TEXT_CHARS = 2000  # one text value (a note, an instruction)


def _text(value: Any) -> str | None:
    if value is None:
        return None
    text = str(value)
    return text if len(text) <= TEXT_CHARS else text[: TEXT_CHARS - 1] + "\u2026"


def _instructions(events: list[dict[str, Any]]) -> str | None:
    """The task as the recording states it: the first attempt's reason (`task: ...`)."""
    for event in events:
        if event.get("kind") == "attempt.started" and event.get("reason"):
            return _text(event["reason"])
    return None


def _step(event: dict[str, Any], tool_of: dict[str, str]) -> dict[str, Any] | None:
    kind = event.get("kind")
    if kind == "attempt.started":
        return {"step": "attempt.started", "attempt": event.get("attempt"), "reason": _text(event.get("reason"))}
    if kind == "attempt.ended":
        return {"step": "attempt.ended", "attempt": event.get("attempt"), "outcome": event.get("outcome")}
    if kind == "model.proposal":
        proposal = dict(event.get("proposal") or {})
        if proposal.get("type") != "tool_call":
            return {"step": "model.proposal", "type": proposal.get("type"), "accepted": event.get("accepted")}
        tool = str(proposal.pop("tool", ""))
        proposal.pop("type", None)
        return {"step": "tool_call", "tool": tool, "arguments": proposal, "accepted": event.get("accepted")}
    if kind == "tool.call" and event.get("tool") != MODEL_TOOL and not event.get("proposal_id"):
        return {"step": "tool_call", "tool": event.get("tool"), "arguments": event.get("request"), "by": "harness"}
    if kind == "tool.result":
        called = tool_of.get(str(event.get("call_id")))
        if called == MODEL_TOOL:
            return None
        return {"step": "tool_result", "tool": called, "outcome": event.get("outcome")}
    if kind == "command.receipt":
        return {
            "step": "command_result",
            "command": event.get("command"),
            "workspace": event.get("workspace_id"),
            "completion": event.get("completion"),
            "exit_code": event.get("exit_code"),
            "results": event.get("results"),
        }
    if kind == "human.input":
        return {
            "step": "human_input",
            "actor_role": event.get("actor_role"),
            "action": event.get("action"),
            "note": _text(event.get("note")),
        }
    if kind == "checkpoint":
        return {"step": "checkpoint", "id": event.get("id")}
    return None


def task_context(source: SourceRun, sc: ScenarioPackage, tools: list[str]) -> dict[str, Any]:
    """The task document (see the module docstring); `tools` are the MCP tool names the agent is offered."""
    run = source.manifest.get("run") or {}
    task = run.get("task") or {}
    history = source.history
    every = [*history, *source.events]
    tool_of = {str(e["id"]): str(e.get("tool")) for e in every if e.get("kind") == "tool.call"}
    steps = [s for s in (_step(e, tool_of) for e in history) if s is not None]
    workspaces_seen = [e.get("workspace_id") for e in history if e.get("kind") == "workspace.created"]
    return {
        "format": TASK_FORMAT,
        "task": {
            "id": task.get("id"),
            "revision": task.get("revision"),
            "title": _text(run.get("title")),
            "instructions": _instructions(every),
        },
        "recorded_run": {"id": run.get("id"), "policy_revision": run.get("policy_revision")},
        # The scenario by name only: approving a model answer mints a new version, and a version in the task would
        # change the agent's first request, so no answer approved earlier would ever match (docs/agents.md).
        "scenario": {"name": sc.name},
        "workspaces": {
            "offered": sorted(sc.workspaces),
            "created_before_the_branch": [w for w in workspaces_seen if w],
        },
        "branch": {
            "from": history[-1]["id"] if history else "start",
            "history_events": len(history),
        },
        "before_the_branch": steps[-MAX_STEPS:],
        "steps_left_out": max(0, len(steps) - MAX_STEPS),
        "tools": [{"name": name, "openai_name": openai_name(name)} for name in tools],
    }


def task_prompt(context: dict[str, Any]) -> str:
    """The task document as a prompt's text (the `n17q-task` prompt's one user message)."""
    task, branch = context["task"], context["branch"]
    lines = [
        f"Task {task['id']} (revision {task['revision']}): {task['title']}",
        f"Instructions, as the recorded run states them: {task['instructions'] or '(none recorded)'}",
        f"Scenario {context['scenario']['name']}; "
        f"workspaces: {', '.join(context['workspaces']['offered']) or '(none)'}",
    ]
    if branch["from"] == "start":
        lines.append("You start where the recorded run started: nothing was done before you.")
    else:
        lines.append(
            f"You continue the recorded run from its checkpoint {branch['from']}; before it, the run did "
            f"{len(context['before_the_branch'])} steps (the resource {TASK_URI} lists them)."
        )
    lines.append("Tools: " + ", ".join(f"{t['name']} (OpenAI name {t['openai_name']})" for t in context["tools"]))
    return "\n".join(lines)
