"""The review workflow's shared rules: who may review or capture (`REVIEW_PERM`, `CAPTURE_PERM`), the refusal
every review service raises (`ReviewRefused`), which parts of a recording a reviewer may edit and which carry
meaning, and the outcome an HTTP status stands for (`outcome_for`, and its inverse for the outcomes a fixture holds).

Every module of the review services (listed in `fixtures_review.services`) builds on this one; it imports none of
them.
"""

from __future__ import annotations

from typing import Any

REVIEW_PERM = "fixtures_review.review_capture"
CAPTURE_PERM = "fixtures_review.capture_recording"
# Where a change alters what a replay sees or how it is keyed: a synthesized value there needs a fidelity note.
MEANING_ROOTS = ("request.args", "response.body", "response.status", "proposed_transition")
EDITABLE_ROOTS = ("request", "response", "proposed_transition")


class ReviewRefused(ValueError):
    """A review action the rules do not allow; the message says why in one sentence a reviewer can act on."""


# --- outcomes ----------------------------------------------------------------------------------------------------

_STATUS_OUTCOMES = {401: "denied", 403: "denied", 404: "not_found", 410: "deleted", 408: "timeout", 504: "timeout"}


def outcome_for(status: int, body: Any) -> str:
    """The fixture outcome an HTTP response stands for. `empty`: a 2xx with nothing in it."""
    if status in _STATUS_OUTCOMES:
        return _STATUS_OUTCOMES[status]
    if 200 <= status < 300:
        if body in (None, "", [], {}) or (isinstance(body, dict) and body.get("items") == [] and len(body) <= 2):
            return "empty"
        return "ok"
    return "error"


# The HTTP status a recorded outcome stands for (the inverse of `outcome_for`, for the outcomes a fixture holds).
_OUTCOME_STATUS = {
    "ok": 200,
    "empty": 200,
    "not_found": 404,
    "denied": 403,
    "deleted": 410,
    "timeout": 504,
    "error": 500,
}
