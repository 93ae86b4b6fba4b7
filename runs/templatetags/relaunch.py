"""`{% relaunch source_run_id mode vary checkpoint scenario_ref %}`: the address that launches a replay again as it was
launched, against another scenario version (runs/relaunch.py)."""

from __future__ import annotations

from typing import Any

from django import template

from runs.relaunch import relaunch_url

register = template.Library()


@register.simple_tag
def relaunch(source_run_id: str, mode: str, vary: Any, checkpoint: Any, scenario_ref: str) -> str:
    return relaunch_url(source_run_id, mode, vary if isinstance(vary, dict) else {}, checkpoint, scenario_ref)
