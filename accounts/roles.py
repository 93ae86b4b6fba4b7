"""The console's roles (DESIGN §8) as Django groups with permissions.

viewer reads; operator also imports and launches replays; reviewer also reviews and approves fixtures and
annotates runs (scores, labels, comments, corrections: runs/annotations.py);
admin may do everything and reaches the Django admin. A harness acts through a scoped token whose user
holds the role its scopes need.
"""

from __future__ import annotations

from typing import Any

VIEWER, OPERATOR, REVIEWER, ADMIN = "viewer", "operator", "reviewer", "admin"
ROLES = (VIEWER, OPERATOR, REVIEWER, ADMIN)

# Permission codenames as "app_label.codename".
ROLE_PERMISSIONS: dict[str, tuple[str, ...]] = {
    VIEWER: ("runs.view_run",),
    OPERATOR: ("runs.view_run", "runs.import_run", "runs.launch_replay", "fixtures_review.capture_recording"),
    REVIEWER: (
        "runs.view_run",
        "fixtures_review.review_capture",
        "fixtures_review.capture_recording",
        "runs.annotate_run",
    ),
    ADMIN: (
        "runs.view_run",
        "runs.import_run",
        "runs.launch_replay",
        "fixtures_review.review_capture",
        "fixtures_review.capture_recording",
        "runs.annotate_run",
    ),
}


def user_roles(user: Any) -> set[str]:
    if not getattr(user, "is_authenticated", False):
        return set()
    roles = {g.name for g in user.groups.all() if g.name in ROLES}
    if user.is_superuser:
        roles.add(ADMIN)
    return roles


def can_import(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and user.has_perm("runs.import_run"))
