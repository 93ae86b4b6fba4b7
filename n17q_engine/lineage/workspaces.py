"""LIN009, LIN010, LIN016, LIN017: whether the workspace the work happened in was fit to be used, and the work the
attempt's own.

LIN009: a workspace left uncertain (a lifecycle saying so, or a receipt whose termination is unknown) must not be
used again (a change, tool call, receipt, observation or artifact in it, or a copy of it) before a cleanup receipt.
LIN010: an artifact must not include files its workspace's initial overlay had already changed (an edit inherited
from before the attempt). Both are decided as events arrive, from the state this module keeps on the graph
(`_uncertain`, `_reused`, `_awaiting_overlay`).

Decision taken where DESIGN §4 is silent (the project docs cite this list):

- LIN016 (extension, seed 003 "Attempt cleanup became explicit"): `workspace.created.inherited` lists what a
  workspace took over from elsewhere (`[{kind: cache|process|layer, workspace_id, digest, trusted}]`). A process is
  never an immutable layer, so inheriting one is always a finding; a cache or a layer is allowed only when it is
  `trusted: true` and content-addressed (a `sha256:` digest): a trusted immutable dependency layer. A workspace that
  declares nothing (no `inherited`) leaves LIN016 unevaluated; `inherited: []` is a declaration that it took nothing.
- LIN017 (extension, seed 003 "Human approval stopped being a ceremonial button"): a change to the repository's
  tests in the workspace (an artifact's `files`, or a `workspace.changed`'s additive `files`, matching the run's test
  paths: `graph.DEFAULT_TEST_PATHS` unless the task or scenario names its own) is a finding unless the task requires
  test changes (`run.task.requires_test_changes`). Files of the workspace's initial overlay are not the agent's
  edit (LIN010 judges those). A change without `files` cannot be judged; only artifacts and changes naming files
  count as LIN017's input.
- LIN009: an `evidence.observed` reading a record made before the workspace became uncertain (the timed-out
  receipt's partial output, kept for diagnosis) is not reuse of the environment. A lifecycle naming the cleanup
  receipt takes back the findings of the cleanup's own receipt, call and changes.
"""

from __future__ import annotations

import re
from typing import Any

from .graph import Handler, LineageGraph, _finding, _join, _path, _str, _strs, _unique

# The pseudo-kinds LIN016 and LIN017 count as their inputs (codes.REQUIRED_INPUTS): a workspace that declared what it
# inherited, a workspace change that named its files.
DECLARED_INHERITANCE = "workspace.created.inherited"
CHANGED_FILES = "workspace.changed.files"
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")


def _use_workspace(
    graph: LineageGraph,
    event_id: str,
    workspace: str | None,
    what: str,
    *,
    source_seq: int | None = None,
    link: str | None = None,
) -> None:
    if workspace is None:
        return
    marked = graph._uncertain.get(workspace)
    if marked is None:
        return
    cause, cause_seq, why = marked
    if source_seq is not None and source_seq <= cause_seq:
        return
    graph._emit(
        _finding(
            "LIN009",
            event_id,
            cause,
            f"{what} {event_id} uses workspace {workspace} after {cause} left it {why}, with no cleanup receipt "
            f"recorded in between; quarantine and clean it up, or continue in a fresh workspace.",
        )
    )
    graph._reused.setdefault(workspace, []).append((event_id, link))


def _cleaned(graph: LineageGraph, workspace: str, cleanup: str) -> None:
    """A cleanup receipt clears the workspace; the cleanup's own work on it was not reuse."""
    graph._uncertain.pop(workspace, None)
    reused = graph._reused.pop(workspace, [])
    links = dict(reused)
    exempt = {cleanup}
    call = links.get(cleanup)
    if call is not None:
        exempt.add(call)  # the call that ran the cleanup command
    for event_id, link in reused:
        if event_id in exempt or link == cleanup:
            kept = [f for f in graph._found.get(event_id, ()) if f.code != "LIN009"]
            if kept:
                graph._found[event_id] = kept
            else:
                graph._found.pop(event_id, None)


def _check_overlay(graph: LineageGraph, artifact_event: str, workspace: str, files: tuple[str, ...]) -> None:
    ws = graph._workspaces[workspace]
    absorbed = _unique(p for p in files if p in ws.overlay)
    if absorbed:
        graph._emit(
            _finding(
                "LIN010",
                artifact_event,
                ws.event,
                f"Artifact {artifact_event} includes {_join(absorbed)}, which workspace {workspace}'s initial "
                f"overlay already changed (an inherited edit the agent does not own); drop it from the artifact.",
            )
        )


def _check_tests(graph: LineageGraph, event_id: str, workspace: str, files: tuple[str, ...], what: str) -> None:
    if graph.tests_required or not files:
        return
    known = graph._workspaces.get(workspace)
    overlay = known.overlay if known is not None else frozenset()
    touched = _unique(p for p in files if p not in overlay and graph.test_globs.matches(p))
    if touched:
        graph._emit(
            _finding(
                "LIN017",
                event_id,
                known.event if known is not None else workspace,
                f"{what} {event_id} changes {_join(touched)} in workspace {workspace}: the repository's tests, "
                "which the task does not ask to change; review the test edit apart from the work, or drop it and "
                "let the unchanged tests judge the work.",
            )
        )


def _check_inherited(graph: LineageGraph, event_id: str, workspace: str, inherited: Any) -> None:
    for item in inherited if isinstance(inherited, list) else ():
        if not isinstance(item, dict):
            continue
        kind = _str(item.get("kind")) or "state"
        source = _str(item.get("workspace_id"))
        digest = _str(item.get("digest"))
        whence = f" from workspace {source}" if source is not None else ""
        what = f"{kind} {digest}" if digest is not None else kind
        if kind == "process":
            why = "a running process is never an immutable layer; start the new workspace without it"
        elif item.get("trusted") is True and digest is not None and _DIGEST.match(digest):
            continue
        else:
            lacks = [
                w
                for w, ok in (
                    ("trusted", item.get("trusted") is True),
                    ("content-addressed", bool(digest and _DIGEST.match(digest))),
                )
                if not ok
            ]
            why = (
                f"it is not {' and not '.join(lacks)}, so no trusted immutable dependency layer allows it; start "
                "clean or take it from such a layer"
            )
        source_ws = graph._workspaces.get(source) if source is not None else None
        graph._emit(
            _finding(
                "LIN016",
                event_id,
                source_ws.event if source_ws is not None else (source or event_id),
                f"Workspace {workspace} ({event_id}) inherits {what}{whence}: {why}.",
            )
        )


# The arrival checks, per kind; each runs after the kind's recorder (graph.plug_in), on the records just made.


def _workspace_created(graph: LineageGraph, event_id: str, seq: int, event: dict) -> None:
    workspace = _str(event.get("workspace_id"))
    if workspace is None:
        return
    ws = graph._workspaces[workspace]
    parent, relation = ws.parent, ws.relation
    if relation == "copy" and parent is not None:
        marked = graph._uncertain.get(parent)
        if marked is not None:
            graph._emit(
                _finding(
                    "LIN009",
                    event_id,
                    marked[0],
                    f"Workspace {workspace} ({event_id}) was copied from workspace {parent} after {marked[0]} "
                    f"left it {marked[2]}, with no cleanup receipt in between; reconstruct it from a clean "
                    "snapshot instead.",
                )
            )
    for artifact_event, files in graph._awaiting_overlay.pop(workspace, ()):
        _check_overlay(graph, artifact_event, workspace, files)
    inherited = event.get("inherited")
    if isinstance(inherited, list):
        graph._kinds[DECLARED_INHERITANCE] = graph._kinds.get(DECLARED_INHERITANCE, 0) + 1
        _check_inherited(graph, event_id, workspace, inherited)


def _workspace_changed(graph: LineageGraph, event_id: str, seq: int, event: dict) -> None:
    workspace = _str(event.get("workspace_id"))
    if workspace is None:
        return
    _use_workspace(graph, event_id, workspace, "Change", link=_str(event.get("cause")))
    if isinstance(event.get("files"), list):
        graph._kinds[CHANGED_FILES] = graph._kinds.get(CHANGED_FILES, 0) + 1
        _check_tests(graph, event_id, workspace, tuple(_path(p) for p in _strs(event.get("files"))), "Change")


def _workspace_lifecycle(graph: LineageGraph, event_id: str, seq: int, event: dict) -> None:
    workspace = _str(event.get("workspace_id"))
    if workspace is None:
        return
    state = event.get("state")
    cleanup = _str(event.get("cleanup_receipt_id"))
    if cleanup is not None:
        _cleaned(graph, workspace, cleanup)
    if state == "uncertain":
        graph._uncertain.setdefault(workspace, (event_id, seq, "uncertain"))


def _artifact_created(graph: LineageGraph, event_id: str, seq: int, event: dict) -> None:
    workspace = _str(event.get("workspace_id"))
    _use_workspace(graph, event_id, workspace, "Artifact")
    if workspace is None:
        return
    files = tuple(_path(p) for p in _strs(event.get("files")))
    _check_tests(graph, event_id, workspace, files, "Artifact")
    if workspace in graph._workspaces:
        _check_overlay(graph, event_id, workspace, files)
    elif files:
        graph._awaiting_overlay.setdefault(workspace, []).append((event_id, files))


def _tool_call(graph: LineageGraph, event_id: str, seq: int, event: dict) -> None:
    _use_workspace(graph, event_id, _str(event.get("workspace_id")), "Tool call")


def _command_receipt(graph: LineageGraph, event_id: str, seq: int, event: dict) -> None:
    workspace = _str(event.get("workspace_id"))
    # Before the receipt's own termination marks the workspace: the receipt that leaves it uncertain is no reuse.
    _use_workspace(graph, event_id, workspace, "Receipt", link=_str(event.get("call_id")))
    if workspace is not None and graph._receipts[event_id].completion == "termination_unknown":
        graph._uncertain.setdefault(workspace, (event_id, seq, "with an unknown termination"))


def _evidence_observed(graph: LineageGraph, event_id: str, seq: int, event: dict) -> None:
    source = _str(event.get("source"))
    source_seq = graph._seq.get(source) if source is not None else None
    _use_workspace(
        graph,
        event_id,
        _str(event.get("workspace_id")),
        "Observation",
        source_seq=source_seq if source_seq is not None and source_seq < seq else None,
    )


ARRIVAL_CHECKS: dict[str, Handler] = {
    "workspace.created": _workspace_created,
    "workspace.changed": _workspace_changed,
    "workspace.lifecycle": _workspace_lifecycle,
    "artifact.created": _artifact_created,
    "tool.call": _tool_call,
    "command.receipt": _command_receipt,
    "evidence.observed": _evidence_observed,
}
