""" "Make regression scenario" (issue 6): a scenario version whose success criteria are a run's invariants.

The new version is `<scenario>-regression@<next>`: the run's scenario version's package (contracts, fixtures,
world, workspaces, policy, unchanged) with `source_runs` naming the run and `invariants` derived from what the
run did, so replaying it later asserts that the run's outcome still holds:

- no live effect (always);
- for each effect route of the scenario (`mailbox:`, `review-service:` …), at most as many fixture-world
  transitions as the run made there, capped at one: a run that sent once pins "at most one delivery", a run that
  stopped without a request pins "no request", and a run that delivered twice pins one (the regression is the fix);
- approval before the effect, whenever the scenario routes effects.

The version is minted like any other (immutable, digest-verified, `source="regression"`). Two people minting
at once each get a version of their own: a lost race on the number is retried with the next one.

Seed 001, "Retention preserved the failure, not every byte forever": "A regression scenario kept the minimal fixture
needed to reproduce an invariant." Made from a replay (a rerun or a counterfactual, whose events name the fixture
that answered each call), the version keeps only the fixtures the replay was served and those its invariants need
(`regression_fixtures`): each effect route an invariant counts keeps its mutation and status fixtures, so a fixed
agent's effect is judged by the invariant rather than stopped as a missing fixture, and a declared race keeps its
tool's. The rest are left out, each named with why in `scenario.json` `minimal_fixtures`, shown before minting and
on the version's page. A recording (no fixture answered it) keeps the package whole, and says so.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Max

from fixtures_review.models import ScenarioVersion
from fixtures_review.scenarios import ScenarioRefused, body_digests, fixture_bodies
from n17q_engine.package import PackageError, build_scenario
from runs.facts import facts_of
from runs.models import Event, Run

from .launch import launch_options, scenario_loaded


class RegressionRefused(ValueError):
    pass


def regression_base(run: Run) -> ScenarioVersion | None:
    """The run's recorded version (`launch_options`), never a version derived from it: a regression scenario
    made earlier is recorded from the run too, and building on it would hide the original."""
    return launch_options(run).recorded


def regression_invariants(run: Run, base: ScenarioVersion) -> list[dict[str, Any]]:
    sc = scenario_loaded(base)
    assert sc is not None
    # Deliveries per world resource, from the run's facts (issue 34): a race's deliveries count too.
    delivered = facts_of(run)["effects"]["per_resource"]
    out: list[dict[str, Any]] = [
        {"id": "regression-no-live-effect", "check": "no_live_effect", "text": f"no live effect (as in {run.run_id})"}
    ]
    for route in sc.effects:
        made = sum(n for r, n in delivered.items() if r.startswith(route.destination_prefix))
        most = min(made, 1)
        out.append(
            {
                "id": f"regression-{route.tool.replace('.', '-')}-at-most-{most}",
                "check": "max_transitions",
                "resource_prefix": route.destination_prefix,
                "max": most,
                "text": (
                    f"at most one {route.tool} effect on {route.destination_prefix}* ({run.run_id} made {made})"
                    if most
                    else f"no {route.tool} effect on {route.destination_prefix}* (as in {run.run_id})"
                ),
            }
        )
    if sc.effects:
        out.append(
            {
                "id": "regression-approval-first",
                "check": "approval_before_effect",
                "text": "every effect approved in the run before it is executed",
            }
        )
    return out


# The kinds whose events name the fixture that answered them (n17q_engine/replay/calls.py, effects.py).
SERVED_KINDS = ("tool.result", "command.receipt", "effect.execution", "schedule.step")
LISTED = 500  # fixtures named per list in `minimal_fixtures`; the rest are counted


@dataclass(frozen=True)
class FixtureSelection:
    """Which of the base version's fixtures a regression scenario keeps, and why each is kept or left out."""

    whole: bool  # the package is kept whole (the run is a recording: nothing says which fixtures it needs)
    note: str
    kept: list[dict[str, str]] = field(default_factory=list)  # [{"fixture", "tool", "why"}]
    left_out: list[dict[str, str]] = field(default_factory=list)

    def record(self, run_id: str) -> dict[str, Any]:
        """`scenario.json` `minimal_fixtures`: what was kept and left out, bounded (the rest counted)."""
        return {
            "run": run_id,
            "kept_count": len(self.kept),
            "left_out_count": len(self.left_out),
            "kept": self.kept[:LISTED],
            "left_out": self.left_out[:LISTED],
        }


def regression_fixtures(run: Run, base: ScenarioVersion, invariants: list[dict[str, Any]]) -> FixtureSelection:
    sc = scenario_loaded(base)
    assert sc is not None
    if run.mode not in ("rerun", "counterfactual"):
        return FixtureSelection(
            whole=True,
            note=f"{run.run_id} is a {run.mode} run, not a replay in fixtures: no fixture answered it, so nothing says "
            f"which of {base.ref}'s {len(sc.fixtures)} fixtures it needs; the package is kept whole",
        )
    served: set[str] = set()
    bodies = Event.objects.filter(run=run, kind__in=SERVED_KINDS).values_list("body", flat=True)
    for body in bodies.iterator(chunk_size=2000):
        fixture = body.get("fixture") if isinstance(body, dict) else None
        if isinstance(fixture, str):
            served.add(fixture)
    needed: dict[str, str] = {}  # tool -> why the invariants need its fixtures
    for inv in invariants:
        prefix = inv.get("resource_prefix")
        if inv.get("check") != "max_transitions" or not isinstance(prefix, str):
            continue
        for route in sc.effects:
            if route.destination_prefix.startswith(prefix) or prefix.startswith(route.destination_prefix):
                needed.setdefault(route.tool, f"invariant {inv['id']} counts its effects on {prefix}*")
                if route.status_tool:
                    needed.setdefault(
                        route.status_tool, f"invariant {inv['id']}: the status read before an effect is resent"
                    )
    for race in sc.races:
        needed.setdefault(race.tool, f"race {race.id} is declared on it")
    kept: list[dict[str, str]] = []
    left_out: list[dict[str, str]] = []
    for fixture in sc.fixtures:
        if fixture.id in served:
            kept.append({"fixture": fixture.id, "tool": fixture.tool, "why": f"served to {run.run_id}"})
        elif fixture.tool in needed:
            kept.append({"fixture": fixture.id, "tool": fixture.tool, "why": needed[fixture.tool]})
        else:
            left_out.append(
                {
                    "fixture": fixture.id,
                    "tool": fixture.tool,
                    "why": f"not served to {run.run_id}, and no invariant needs {fixture.tool}",
                }
            )
    return FixtureSelection(
        whole=False,
        note=f"{len(kept)} of {base.ref}'s {len(sc.fixtures)} fixtures kept: those served to {run.run_id} and those "
        f"its invariants need; {len(left_out)} left out",
        kept=kept,
        left_out=left_out,
    )


def regression_scenario_mint(*, run: Run, user: Any) -> ScenarioVersion:
    base = regression_base(run)
    if base is None:
        raise RegressionRefused(
            f"run {run.run_id} names no scenario version and none was recorded from it: nothing to build on"
        )
    files = {name: json.loads(text) for name, text in base.files.items()}
    meta = dict(files["scenario.json"])
    name = meta["name"] if meta["name"].endswith("-regression") else f"{meta['name']}-regression"
    invariants = regression_invariants(run, base)
    selection = regression_fixtures(run, base, invariants)
    if not selection.whole:
        kept = {k["fixture"] for k in selection.kept}
        files["fixtures.json"] = [f for f in files["fixtures.json"] if f.get("id") in kept]
        meta["minimal_fixtures"] = selection.record(run.run_id)
    for _ in range(5):
        latest = ScenarioVersion.objects.filter(name=name).aggregate(n=Max("version"))["n"] or 0
        scenario = {
            **meta,
            "name": name,
            "version": latest + 1,
            # the same fixture world (and so the same effect namespace) as the version it was built from
            "world": meta.get("world", f"{meta['name']}-w{meta['version']}"),
            "source_runs": [run.run_id],
            "invariants": invariants,
            "description": f"regression scenario from run {run.run_id} on {base.ref}: its invariants are the "
            "success criteria",
        }
        try:
            # The fixtures it keeps hold their bodies as the base's do (by digest: kept, or expired with the record;
            # a replay of it reaching an expired one stops as incomplete_test_world, seed 001).
            bodies = fixture_bodies(body_digests(files["fixtures.json"]))
            package = build_scenario(
                {**files, "scenario.json": scenario}, bodies=bodies.bodies, expired_bodies=bodies.expired
            )
        except (PackageError, ScenarioRefused) as exc:
            raise RegressionRefused(f"the regression scenario could not be built: {exc}") from None
        try:
            # Stored here rather than through scenario_import so that it names its base (`based_on`): the launch
            # page labels it "regression of <base>" and never mistakes it for the run's recorded version.
            with transaction.atomic():
                return ScenarioVersion.objects.create(
                    name=name,
                    version=latest + 1,
                    digest=package.digest,
                    manifest=package.manifest,
                    files={n: d.decode("utf-8") for n, d in sorted(package.files.items())},
                    source="regression",
                    imported_by=user if getattr(user, "is_authenticated", False) else None,
                    based_on=base,
                )
        except IntegrityError:
            continue  # another mint took this number; take the next
    raise RegressionRefused(f"{name}: too many concurrent mints; try again")
