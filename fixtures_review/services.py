"""Fixture review: staging captures, reviewer actions, promotion, minting scenario versions (DESIGN §7).

Every write of the review workflow is a keyword-only function named `<entity>_<action>` that owns its
transaction. Views, the API and the `capture` command parse their input, call one of these, render.

The rules:
- Nothing reaches the database or the blob store before `intake` has redacted and masked it.
- A reviewer's action is an append-only `ReviewEvent` (actor, time, path, reason), and never holds a value
  that was removed. A refused approval is an event too, with its reason.
- Approving needs the reviewer role; whoever captured a recording, or owns the token that did, cannot
  approve it; an unresolved finding blocks it; so does a failing contract test.
- Approving claims the recording with a conditional UPDATE (`state = staged AND revision = <the one the
  reviewer read>`): of two reviewers approving at once exactly one changes a row, and only that one mints.
- Minting serializes per scenario on the scenario's first version row (SELECT … FOR UPDATE), reads the
  latest version after the lock, and builds on it; the unique (name, version) constraint is the last guard.

The services live in modules of one concern (issue 31), each building only on those listed below it (a layers
contract in pyproject.toml keeps it so, and none of them imports this module):
- `captures`: staging a capture as it arrives, and a HAR file or VCR.py cassette (`capture_receive`,
  `capture_stage`, `recordings_stage`); `run_results`: staging an imported run's tool results
  (`run_recordings_stage`).
- `copying`: "Copy similar" and "Copy the recorded answer" for a replay's missing fixture; `review_actions`:
  redact, synthesize, reject, exclude a tool.
- `approval`: four eyes, what blocks promotion, a second body for an answered key, `recording_approve`.
- `minting`: `scenario_version_mint`, `scenario_files_mint` and the per-scenario lock.
- `fixture_checks`: the fixture a recording becomes and its contract and mutation tests; `content`: reading a
  recording's content and its unresolved findings; `staging`: storing a redacted capture as a staged recording
  (its bodies, events, audit entries).
- `review_rules`: the roles, `ReviewRefused`, the editable and meaning-carrying roots, `outcome_for`.

This module keeps every name its callers import from `fixtures_review.services`. To replace a name in a test
(monkeypatch), patch it in the module that defines it: the services look their names up there, not here.
"""

from __future__ import annotations

from .approval import (
    AUTHORING_ACTIONS,
    approval_refusal,
    content_authors,
    promoted_key_conflict,
    promotion_blockers,
    recording_approve,
)
from .captures import FailedCapture, RecordingsResult, capture_receive, capture_stage, recordings_stage
from .content import content_of, is_meaning_path, leaf_paths, unresolved_findings
from .copying import recording_copy_recorded, recording_copy_similar
from .fixture_checks import AMBIGUOUS_OUTCOMES, fixture_dict, fixture_id_for, mutation_gaps
from .minting import _lock_scenario, fixture_request_digest, scenario_files_mint, scenario_version_mint
from .review_actions import (
    recording_declare_no_change,
    recording_exclude_tool,
    recording_redact,
    recording_reject,
    recording_synthesize,
)
from .review_rules import (
    _OUTCOME_STATUS,
    CAPTURE_PERM,
    EDITABLE_ROOTS,
    MEANING_ROOTS,
    REVIEW_PERM,
    ReviewRefused,
    outcome_for,
)
from .run_results import (
    MAX_RUN_RESULTS,
    RECORDED_ORIGINS,
    ContractRevisions,
    RunRecordingsResult,
    contract_revisions_parse,
    run_recordings_stage,
)
from .staging import StageResult, _audit, _blob_name, _stage, capture_digest_key, capture_original_digest

__all__ = [
    "AMBIGUOUS_OUTCOMES",
    "AUTHORING_ACTIONS",
    "CAPTURE_PERM",
    "EDITABLE_ROOTS",
    "MAX_RUN_RESULTS",
    "MEANING_ROOTS",
    "RECORDED_ORIGINS",
    "REVIEW_PERM",
    "ContractRevisions",
    "FailedCapture",
    "RecordingsResult",
    "ReviewRefused",
    "RunRecordingsResult",
    "StageResult",
    "approval_refusal",
    "capture_digest_key",
    "capture_original_digest",
    "capture_receive",
    "capture_stage",
    "content_authors",
    "content_of",
    "contract_revisions_parse",
    "fixture_dict",
    "fixture_id_for",
    "fixture_request_digest",
    "is_meaning_path",
    "leaf_paths",
    "mutation_gaps",
    "outcome_for",
    "promoted_key_conflict",
    "promotion_blockers",
    "recording_approve",
    "recording_copy_recorded",
    "recording_copy_similar",
    "recording_declare_no_change",
    "recording_exclude_tool",
    "recording_redact",
    "recording_reject",
    "recording_synthesize",
    "recordings_stage",
    "run_recordings_stage",
    "scenario_files_mint",
    "scenario_version_mint",
    "unresolved_findings",
]
# Private names that callers imported from here before the split (their homes are the modules above).
__all__ += ["_OUTCOME_STATUS", "_audit", "_blob_name", "_lock_scenario", "_stage"]
