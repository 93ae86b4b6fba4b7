"""Captures, review decisions, fixture and scenario versions (DESIGN §7).

So far: immutable scenario versions. A version is a digest-verified scenario package
(`n17q_engine.package`, `n17q.scenario-package/1`), stored whole: its manifest and every file's bytes.
Replays are pinned to one version; a new version is a new row, never an edit.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from runs.models import AppendOnlyModel


class ScenarioVersion(AppendOnlyModel):
    name = models.CharField(max_length=100)
    version = models.PositiveIntegerField()
    digest = models.CharField(max_length=71, unique=True)  # the package manifest's digest
    manifest = models.JSONField()
    # file name -> the file's text (package files are canonical UTF-8 JSON)
    files = models.JSONField()
    source = models.CharField(max_length=20, default="import")  # import | demo | promotion
    imported_at = models.DateTimeField(auto_now_add=True)
    imported_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        ordering = ["name", "-version"]
        constraints = [models.UniqueConstraint(fields=["name", "version"], name="scenario_version_unique")]

    def __str__(self) -> str:
        return f"{self.name}@{self.version}"

    @property
    def ref(self) -> str:
        return f"{self.name}@{self.version}"
