"""What an agent is told of its task (issue 36; docs/agents.md, "What your agent receives").

`task_context` reads it from the replay's package only (the recorded run's manifest and events, the scenario),
never from a replay id, a clock or the host, so the same branch gives the same bytes every time. It reaches the agent
three ways, all the same document: the MCP resource `n17q://task` (JSON), the MCP prompt `n17q-task` (the same as
text, one user message), and the environment (`N17Q_TASK_ID`, `N17Q_TASK_TITLE`, `N17Q_TASK_FILE`: the JSON in a
read-only file inside the sandbox). Values are the recording's as stored: a value the importer's secret scan masked
is masked here too (nothing is read back from anywhere else).

"Where you stand" (`evidence`; seed 003 "The fix worked without a better model": "I updated the context to state
workspace identity, exact test scope, partial timeout evidence, and which checks required rerun"): the workspaces
created before the branch (each one's derivation, latest tree and lifecycle state) and the one to work in (the newest
still active), every command receipt with its exact suites, workspace and tree, whether it completed (a partial or
timed-out run is marked: its counts cover only what ran before it stopped, and it validates nothing), and the suites
that need a rerun in the workspace to work in, each with why (never run there, the last run there did not complete
or failed, or ran at an older tree). The same words open the prompt's text.

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


_ENDED = ("superseded", "quarantined", "uncertain", "torn_down")


def _evidence(history: list[dict[str, Any]]) -> dict[str, Any]:
    """Where the agent stands before the branch: workspaces, receipts and the suites to rerun (module docstring)."""
    workspaces: dict[str, dict[str, Any]] = {}
    receipts: list[dict[str, Any]] = []
    for event in history:
        kind = event.get("kind")
        ws = event.get("workspace_id")
        if kind == "workspace.created" and isinstance(ws, str):
            derived = event["derived_from"] if isinstance(event.get("derived_from"), dict) else {}
            workspaces[ws] = {
                "workspace": ws,
                "derived_from": derived.get("workspace_id"),
                "relation": derived.get("relation"),
                "tree": None,
                "state": "active",
            }
        elif kind == "workspace.changed" and ws in workspaces:
            workspaces[ws]["tree"] = event.get("tree_digest")
        elif kind == "workspace.lifecycle" and ws in workspaces:
            workspaces[ws]["state"] = event.get("state")
        elif kind == "command.receipt":
            completed = event.get("completion") == "completed"
            tree = event.get("post_tree") or event.get("pre_tree")
            results = event["results"] if isinstance(event.get("results"), dict) else {}
            failed = results.get("failed")
            receipts.append(
                {
                    "receipt": event.get("id"),
                    "workspace": ws,
                    "tree": tree,
                    "command": _text(event.get("command")),
                    "suites": [s for s in event.get("suites") or [] if isinstance(s, str)],
                    "completion": event.get("completion"),
                    "exit_code": event.get("exit_code"),
                    "results": results,
                    "partial": not completed,
                    "failed": bool(failed) or (completed and bool(event.get("exit_code"))),
                }
            )
            if completed and ws in workspaces and event.get("post_tree"):
                workspaces[ws]["tree"] = event.get("post_tree")
    active = [w for w in workspaces.values() if w["state"] not in _ENDED]
    current = active[-1]["workspace"] if active else None
    rerun: list[dict[str, str]] = []
    for suite in dict.fromkeys(s for r in receipts for s in r["suites"]):
        ran = [r for r in receipts if suite in r["suites"]]
        here = [r for r in ran if r["workspace"] == current]
        last = here[-1] if here else None
        if current is None:
            why = "no workspace is active to run it in"
        elif last is None:
            where = ", ".join(dict.fromkeys(str(r["workspace"]) for r in ran))
            why = f"it never ran in {current}; it ran only in {where}"
        elif last["partial"]:
            why = f"its last run in {current} ({last['receipt']}) did not complete ({last['completion']})"
        elif last["failed"]:
            why = f"its last run in {current} ({last['receipt']}) failed"
        elif last["tree"] != workspaces[current]["tree"]:
            why = f"its last run in {current} ({last['receipt']}) was at an older tree"
        else:
            continue
        rerun.append({"suite": suite, "workspace": current or "", "why": why})
    return {
        "workspace_to_work_in": current,
        "workspaces": list(workspaces.values()),
        "receipts": receipts[-MAX_STEPS:],
        "rerun_required": rerun,
    }


def evidence_lines(evidence: dict[str, Any]) -> list[str]:
    """The `evidence` section as sentences, for the prompt."""
    lines = []
    current = evidence["workspace_to_work_in"]
    for ws in evidence["workspaces"]:
        derived = f", {ws['relation']} of {ws['derived_from']}" if ws["derived_from"] else ""
        mark = " (the workspace to work in)" if ws["workspace"] == current else ""
        lines.append(f"Workspace {ws['workspace']}{mark}: {ws['state']}{derived}.")
    for r in evidence["receipts"]:
        res = r["results"]
        counts = f"{res.get('passed', '?')} passed, {res.get('failed', '?')} failed"
        if r["partial"]:
            status = f"did NOT complete ({r['completion']}): partial evidence, {counts} before it stopped"
        else:
            status = f"completed with exit code {r['exit_code']}, {counts}"
        lines.append(
            f"Receipt {r['receipt']} in {r['workspace']}: `{r['command']}`, suites {', '.join(r['suites'])}: {status}."
        )
    for need in evidence["rerun_required"]:
        lines.append(f"Rerun required: suite {need['suite']} in {need['workspace'] or '?'}: {need['why']}.")
    return lines


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
        "evidence": _evidence(history),
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
    evidence = context.get("evidence")
    if isinstance(evidence, dict) and (evidence["workspaces"] or evidence["receipts"]):
        lines.append("Where you stand, from the record:")
        lines.extend(evidence_lines(evidence))
    return "\n".join(lines)
