from typing import Any

from .roles import user_roles


def roles(request: Any) -> dict[str, Any]:
    user = getattr(request, "user", None)
    found = user_roles(user) if user is not None else set()
    return {
        "user_roles": sorted(found),
        "can_import": bool(user and user.is_authenticated and user.has_perm("runs.import_run")),
        "can_launch": bool(user and user.is_authenticated and user.has_perm("runs.launch_replay")),
        "can_see_staging": bool(
            user
            and user.is_authenticated
            and (user.has_perm("fixtures_review.review_capture") or user.has_perm("fixtures_review.capture_recording"))
        ),
    }
