"""Branching from a checkpoint (docs/decisions.md, issue 18): restoring the recorded history before it.

A replay may start from a `checkpoint` event of its source run rather than from the start (the package's
`checkpoint`; `_EngineState._branch` finds it, `_EngineState._enter_segment` applies the declared variable there).
`_Branching._restore` rebuilds the world, workspaces, clock and budget at the checkpoint by performing the
recorded decisions up to it against the fixtures, as a rerun would, and compares what it restored with what the
recording says. `_segment_note` is the scope note's `segment`: which checkpoint the replay evaluates from, what
the history before it held, and (once known: `_rewrite_scope`) what was restored or why it could not be.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from .. import canonical
from ..deciders import recorded
from .state import _Stopped
from .steps import PROGRESS_EVERY, _Steps


class _Branching(_Steps):
    """Restoring the history before a branch's checkpoint, and the scope note's `segment`."""

    def _restore(self, progress: Any) -> int:
        """Rebuild the world, workspaces, clock and budget at the branch checkpoint by performing the recorded
        decisions up to it against the fixtures, exactly as a rerun would. A history that cannot be re-run (a
        fixture it needs is missing, say) stops the replay there, in the state that says why (DESIGN §5: a
        missing fixture is `incomplete_test_world`, with its record), and the scope note says the checkpoint was
        not restored. Returns the number of steps performed."""
        assert self.branch_index is not None
        checkpoint = self.source.events[self.branch_index]
        history = self.source.events[: self.branch_index + 1]
        steps = recorded(replace(self.source, events=history), self)
        step = 0
        written = len(self.log.events)
        try:
            for action in steps:
                step += 1
                self.pace(action)
                self.perform(action)
                if progress is not None and step % PROGRESS_EVERY == 0:
                    progress(len(self.log.events), self.now, self.checkpoint_id)
        except _Stopped:
            state, reason = self.final or ("stopped", "the restoration stopped")
            self.final = (
                state,
                f"checkpoint {checkpoint['id']} could not be restored (its recorded history re-run against the "
                f"fixtures stopped): {reason}",
            )
            self.segment.update(restored=None, not_restored=self.final[1])
            self._rewrite_scope()
            raise
        finally:
            steps.close()
        branch = self.log.by_id.get(self.map.get(checkpoint["id"], ""))
        if branch is None:  # the recorded decider always performs the checkpoint it ends on
            self.stop("failed", f"checkpoint {checkpoint['id']} was not reached while restoring its history")
        restored = {
            "checkpoint": branch["id"],
            "world_revision": branch["world_revision"],
            "workspaces": dict(branch["workspaces"]),
            "clock": branch["clock"],
            "budget": dict(sorted(self.spent.items())),
            "events": len(self.log.events) - written,
        }
        recorded_at = self.segment["recorded"]
        differs = []
        for key in ("world_revision", "workspaces", "clock", "budget"):
            if recorded_at.get(key) != restored[key]:
                differs.append(
                    f"{key}: recorded {canonical.canonical_json(recorded_at.get(key)).decode()}, restored "
                    f"{canonical.canonical_json(restored[key]).decode()}"
                )
        self.segment.update(restored=restored, differs=differs)
        self._rewrite_scope()
        return step

    def _rewrite_scope(self) -> None:
        if self.scope_event is not None:
            self.scope_event["segment"] = dict(self.segment)
            self.log.rewrite(self.scope_event)

    def _segment_note(self) -> dict[str, Any]:
        """What the replay evaluates: from which checkpoint, and what the history before it holds (as recorded;
        `restored` is added once the engine has rebuilt it)."""
        if self.branch_index is None:
            self.segment = {
                "from_checkpoint": "start",
                "evaluated": f"the whole run, decided by {self.decider.name} from the scenario's start",
            }
            return dict(self.segment)
        src = self.source
        checkpoint = src.events[self.branch_index]
        before = src.events[self.branch_index - 1] if self.branch_index > 0 else None
        spent: dict[str, float] = {}
        for e in src.events[: self.branch_index]:
            if e["kind"] == "budget.charged":
                spent[e["resource"]] = spent.get(e["resource"], 0) + e["amount"]
        self.segment = {
            "from_checkpoint": checkpoint["id"],
            "recorded": {
                "world_revision": checkpoint.get("world_revision"),
                "workspaces": dict(checkpoint.get("workspaces") or {}),
                "clock": checkpoint.get("clock"),
                "budget": dict(sorted(spent.items())),
                "before": {"event": before["id"], "kind": before["kind"]} if before else None,
            },
            "history_events": self.branch_index + 1,
            "evaluated": (
                f"from checkpoint {checkpoint['id']} to the end, decided by {self.decider.name}; the history "
                "before it is the recording's, re-run with its recorded decisions to restore the world, and is "
                "not evaluated"
            ),
            "variable_from": "the checkpoint",
            "restored": None,
        }
        return dict(self.segment)
