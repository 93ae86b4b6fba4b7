"""History is append-only (DESIGN §3): the model base every record of what happened builds on.

The models refuse updates and deletes themselves; on PostgreSQL a trigger installed by each app's migration
refuses them again at the database, so a raw SQL statement cannot slip past the ORM's guard either.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db import models


class HistoryIsAppendOnly(Exception):
    """An attempt to update or delete an event, edge, object or finding of an imported run."""


class AppendOnlyQuerySet(models.QuerySet):
    def update(self, **kwargs: Any) -> int:
        raise HistoryIsAppendOnly(f"{self.model.__name__} rows are append-only; record a correction as a new event")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise HistoryIsAppendOnly(f"{self.model.__name__} rows are append-only; history is never deleted")


class AppendOnlyModel(models.Model):
    objects = AppendOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        if not self._state.adding:
            raise HistoryIsAppendOnly(f"{type(self).__name__} {self.pk} is append-only")
        super().save(*args, **kwargs)

    def delete(self, *args: Any, **kwargs: Any) -> tuple[int, dict[str, int]]:
        raise HistoryIsAppendOnly(f"{type(self).__name__} {self.pk} is append-only")


class ReadOnlyAdmin(admin.ModelAdmin):
    """History is append-only: the admin may look, never add, change or delete."""

    def has_add_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: Any, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: Any, obj: Any = None) -> bool:
        return False
