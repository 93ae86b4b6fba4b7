"""The address that launches a replay again as it was launched, against another scenario version (issue 36: the
model-fixture loop in the browser).

A replay that stopped on a missing fixture is launched again once a reviewer approved the answer, against the
version that approval minted: the same button, the same variable and value, the same checkpoint. The missing-fixture
page, the exclusion's redirect and the review page ("Replays that needed it") all link through `relaunch_url`, so
an agent's counterfactual is relaunched as that counterfactual, never as a rerun with the recorded decider.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import urlencode

from django.urls import reverse

# The launch button of each replay mode (replays/launch.py BUTTONS).
BUTTON_OF_MODE = {"reconstruction": "inspect", "rerun": "replay", "counterfactual": "counterfactual"}


def _form_fields(vary: Mapping[str, str]) -> dict[str, str]:
    """A counterfactual's one varied variable as the counterfactual form's fields (replays.forms.CounterfactualForm
    reads them back into the same `vary`)."""
    if len(vary) != 1:
        return {}
    ((key, value),) = vary.items()
    head, _, rest = key.partition(".")
    if head == "human" and rest:
        return {"variable": "human", "human": f"{rest}={value}"}
    if head == "budget":
        return {"variable": "budget", "budget_resource": rest, "budget_amount": value}
    if head == "delay":
        return {"variable": "delay", "delay_tool": rest, "delay_s": value}
    return {"variable": head, head: value}


def relaunch_url(source_run_id: str, mode: str, vary: Mapping[str, str] | None, checkpoint: str | None,
                 scenario_ref: str) -> str:  # fmt: skip
    """The launch page of `source_run_id` prefilled to launch the same replay against `scenario_ref`."""
    button = BUTTON_OF_MODE.get(mode, "replay")
    query: dict[str, str] = {"scenario": scenario_ref}
    if button == "counterfactual":
        query.update(_form_fields(dict(vary or {})))
    if button == "counterfactual":  # the form asks for its branch point, the start included
        query["checkpoint"] = checkpoint or "start"
    return reverse("replays:replay-new", args=[source_run_id, button]) + "?" + urlencode(query)
