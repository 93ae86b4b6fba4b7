"""Staging captures as they arrive at a capture door (the `capture` command, `POST /api/v1/captures/`, the
demo): a native capture (`capture_receive`, `capture_stage`; one that failed after a live read keeps only its safe
request observation, `FailedCapture`), and a HAR file or VCR.py cassette, every exchange its own recording, all or
nothing (`recordings_stage`). Each capture is checked against the record policy (`connections`) before it is
redacted, scanned, masked and staged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from n17q_engine.budget import checkpoint

from . import connections, intake
from .approval import promotion_blockers
from .models import RequestObservation, StagedRecording
from .review_rules import outcome_for
from .staging import StageResult, _stage, _stage_all, capture_digest_key, capture_original_digest

if TYPE_CHECKING:
    from .recordings import Mapping as RecordingMapping

# The review services log under the one name they had before the split (a log line's `logger` is unchanged).
log = logging.getLogger("fixtures_review.services")


def capture_receive(*, raw: bytes | str | dict, user: Any = None, token: Any = None) -> StageResult | FailedCapture:
    """What the capture doors (the `capture` command, `POST /api/v1/captures/`, the demo) call: a capture that failed
    after a live read (`capture_failure`) keeps only its safe request observation and answers that no fixture
    resulted (`FailedCapture`); any other is staged (`capture_stage`)."""
    data = intake.parse_capture(raw)
    if data.get("capture_failure") is not None:
        actor = user if getattr(user, "is_authenticated", False) else None
        return FailedCapture(connections.capture_failure_record(data, door="capture", actor=actor, token=token))
    return _capture_stage(data, raw, user=user, token=token)


def capture_stage(*, raw: bytes | str | dict, user: Any = None, token: Any = None) -> StageResult:
    """Check a capture against the record policy, then redact, scan and mask it and store it as a staged
    recording. `intake.CaptureError` if malformed or a failed capture (`capture_receive` takes those);
    `connections.CaptureRefused` (a CaptureError) if the policy refuses it, its safe request observation kept."""
    data = intake.parse_capture(raw)
    if data.get("capture_failure") is not None:
        raise intake.CaptureError("capture_failure: a failed capture stages nothing (receive it with capture_receive)")
    return _capture_stage(data, raw, user=user, token=token)


def _capture_stage(data: dict[str, Any], raw: bytes | str | dict, *, user: Any, token: Any) -> StageResult:
    actor = user if getattr(user, "is_authenticated", False) else None
    admitted = connections.capture_admit(data, door="capture", actor=actor, token=token)
    red = intake.scan_capture(intake.redact_capture(data, original_digest=capture_original_digest(raw)))
    cap = red.capture
    recording = _stage(
        red,
        origin=StagedRecording.Origin.CAPTURE,
        actor=actor,
        token=token,
        outcome=outcome_for(cap["response"]["status"], cap["response"].get("body")),
        admitted=admitted,
    )
    log.info(
        "staged recording %s for %s %s (%d redactions, %d findings)",
        recording.public_id,
        recording.scenario_name,
        recording.tool,
        len(recording.redactions),
        len(recording.findings),
    )
    return StageResult(recording, promotion_blockers(recording))


@dataclass
class FailedCapture:
    """A capture that failed after a live read: nothing staged, the safe request observation kept."""

    observation: RequestObservation

    def to_json(self) -> dict[str, Any]:
        """The `capture --json` keys (nothing staged: `staged` null, not promotable) and what was kept instead."""
        obs = self.observation
        return {
            "staged": None,
            "redactions": [],
            "findings": [],
            "promotable": False,
            "blockers": [obs.reason],
            "scenario": obs.scenario_name,
            "tool": obs.tool,
            "request_digest": obs.request_digest,
            "observation": obs.public_id,
            "fixture": None,
            "note": obs.reason,
        }


# --- captures from recordings: HAR files and VCR.py cassettes ------------------------------------------------------


@dataclass
class RecordingsResult:
    """What staging a recording file did: one StageResult per staged exchange, and the exchanges skipped."""

    kind: str  # "har" | "vcr"
    staged: list[tuple[Any, StageResult]]  # (recordings.Recording, its StageResult), in the file's order
    skipped: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        """The `capture --json` shape of DESIGN §8 for the first staged recording (its keys stay at the top), plus
        `format`, `recordings` (each staged exchange: the capture keys and `entry`, `method`, `url`, `rule`) and
        `skipped` (`entry`, `method`, `url`, `reason`)."""
        listed = [
            {**result.to_json(), "entry": rec.index, "method": rec.method, "url": rec.url, "rule": rec.rule}
            for rec, result in self.staged
        ]
        return {**listed[0], "format": self.kind, "recordings": listed, "skipped": self.skipped}


def recordings_stage(
    *,
    source: Any,
    fields: Mapping[str, Any],
    mapping: bytes | str | RecordingMapping | None = None,
    captured_at: str | None = None,
    user: Any = None,
    token: Any = None,
) -> RecordingsResult:
    """Stage every exchange of a HAR file or VCR cassette (`recordings.load`) as its own recording, each through
    the same intake as a native capture; `mapping` is the rules (a file's text, or `recordings.parse_mapping`'s
    answer). All or nothing: an exchange that fails intake refuses the whole file, naming it, and nothing is
    stored. `recordings.RecordingError` / `intake.CaptureError` if refused."""
    from . import recordings

    rules = recordings.parse_mapping(mapping) if isinstance(mapping, bytes | str) else mapping
    at = captured_at or recordings.now_instant()
    # Every exchange converted and dropped first, so that the file's faults and the conversions' are said before
    # any capture's intake fault, as when the converted captures were all held; then converted again, each handed
    # to intake as it comes and only its redacted capture kept (issue 35: the file is read an exchange at a time).
    skipped: list[dict[str, Any]] = []
    converted = recordings.iter_convert(source, fields=fields, mapping=rules, captured_at=at, skipped=skipped)
    if not sum(1 for _ in converted):
        first = "; ".join(f"{s['method']} {s['url']}: {s['reason']}" for s in skipped[:3])
        raise recordings.RecordingError(
            f"nothing to stage: all {len(skipped)} exchanges of the {source.label} were skipped ({first})"
        )
    key = capture_digest_key()
    checked = []
    actor = user if getattr(user, "is_authenticated", False) else None
    for rec in recordings.iter_convert(source, fields=fields, mapping=rules, captured_at=at, skipped=[]):
        checkpoint()  # a web request's budget (console.upload_budget), if one is open
        try:
            red = intake.intake(rec.capture, digest_key=key)
            # All or nothing: the first exchange the record policy refuses refuses the file (its trace is kept).
            admitted = connections.capture_admit(red.capture, door=source.kind, actor=actor, token=token)
        except connections.CaptureRefused as exc:
            raise connections.CaptureRefused(
                f"entry {rec.index} ({rec.method} {rec.url}): {exc}", exc.observation
            ) from None
        except intake.CaptureError as exc:
            raise intake.CaptureError(f"entry {rec.index} ({rec.method} {rec.url}): {exc}") from None
        checked.append((replace(rec, capture={}), red, admitted))  # the redacted capture is the one staged
        del rec  # its converted capture goes before the next exchange is converted
    staged = _stage_all(
        [
            dict(
                red=red,
                origin=StagedRecording.Origin.CAPTURE,
                outcome=outcome_for(red.capture["response"]["status"], red.capture["response"].get("body")),
                admitted=admitted,
            )
            for _, red, admitted in checked
        ],
        actor=actor,
        token=token,
    )
    log.info("staged %d recordings from a %s (%d skipped)", len(staged), source.label, len(skipped))
    return RecordingsResult(
        kind=source.kind,
        staged=[(rec, StageResult(r, promotion_blockers(r))) for (rec, _, _), r in zip(checked, staged, strict=True)],
        skipped=skipped,
    )
