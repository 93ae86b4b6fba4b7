"""Paginated API lists: `?limit=&offset=`, where a value that is not a whole number is refused, not ignored.

DRF's LimitOffsetPagination quietly falls back to its defaults on `?offset=abc` or `?limit=-3`; a harness that
sends a wrong value would read the wrong page without knowing. Here it gets a 400 naming the parameter, as
the schema says (found by the schemathesis run, tests/test_openapi.py).
"""

from __future__ import annotations

from typing import Any

from rest_framework import exceptions
from rest_framework.pagination import LimitOffsetPagination


class StrictLimitOffsetPagination(LimitOffsetPagination):
    max_limit = 500

    def _parameter(self, request: Any, name: str, minimum: int) -> int | None:
        raw = request.query_params.getlist(name)
        if not raw:
            return None
        if len(raw) > 1:
            raise exceptions.ValidationError(f"{name}: give it once")
        try:
            value = int(raw[0], 10)
        except ValueError:
            raise exceptions.ValidationError(f"{name}: {raw[0]!r} is not a whole number") from None
        if value < minimum:
            raise exceptions.ValidationError(f"{name}: must be at least {minimum}")
        return value

    def get_limit(self, request: Any) -> int | None:
        limit = self._parameter(request, self.limit_query_param, 1)
        if limit is None:
            return self.default_limit
        return min(limit, self.max_limit)

    def get_offset(self, request: Any) -> int:
        return self._parameter(request, self.offset_query_param, 0) or 0

    def get_schema_operation_parameters(self, view: Any) -> list[dict[str, Any]]:
        parameters = super().get_schema_operation_parameters(view)
        for parameter in parameters:
            minimum = 1 if parameter["name"] == self.limit_query_param else 0
            parameter["schema"] = {"type": "integer", "minimum": minimum}
            if parameter["name"] == self.limit_query_param:
                parameter["description"] = f"Number of results per page (at most {self.max_limit})."
        return parameters
