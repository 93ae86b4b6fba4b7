"""One line for the first problem a serializer found, whatever its shape (issue 39: a list field's errors are a dict
by index, a nested serializer's a dict by field): `cited.2: This field may not be blank.`"""

from __future__ import annotations

from typing import Any


def first_problem(errors: Any, path: str = "") -> str:
    """The first error of a DRF `serializer.errors` value, named by its path through fields and list indexes."""
    if isinstance(errors, dict) and errors:
        name, inner = next(iter(errors.items()))
        where = str(name) if name != "non_field_errors" else ""
        return first_problem(inner, f"{path}.{where}" if path and where else path or where)
    if isinstance(errors, list) and errors:
        return first_problem(errors[0], path)
    text = str(errors) if errors not in (None, "", [], {}) else "is not valid"
    return f"{path}: {text}" if path else text
