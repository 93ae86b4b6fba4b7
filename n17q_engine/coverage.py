"""Coverage of a scenario version by behaviour, not by fixture count (DESIGN §6, seed 000).

Ten search variants are not worth one missing unknown-outcome path, so coverage is reported along five
dimensions, each a list of rows that are covered or not, and every uncovered row names the tools and the
scenario invariants it affects:

- **contract**: each pinned (tool, revision): does any fixture answer it at all?
- **effect class**: read and mutation: how many of each class's contracts have a fixture.
- **error category**: each outcome a contract declares other than `ok` (`not_found`, `empty`, `denied`,
  `deleted`, `error`, `timeout`): is there a fixture that reports it? A declared negative observation with
  no fixture means the simulated service can never say it.
- **scenario state**: each world state the scenario can be in for a resource (its snapshot revision, and each
  revision a fixture's transition produces): is there a fixture that selects on it (its condition names the
  resource at that revision, or it is unconditional for a tool that reads it)? A state reached by a mutation
  that no read observes is uncovered.
- **recovery transition**: for each effect route, each fault stage its mutation supports that leaves the
  outcome unknown (after acceptance, after the world mutation, before the receipt, during the response):
  can a careful agent reconcile? That needs the route's status read and a fixture for it.

Invariants are linked by what they constrain: `no_live_effect` every mutation, `approval_before_effect` every
effect route's tool, `max_transitions` the tools whose transitions touch its resource prefix.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .package import ScenarioPackage

UNKNOWN_OUTCOME_STAGES = ("after_acceptance", "after_world_mutation", "before_receipt", "during_response")


@dataclass(frozen=True)
class Row:
    dimension: str
    item: str
    covered: bool
    detail: str
    tools: tuple[str, ...] = ()
    invariants: tuple[str, ...] = ()


@dataclass
class Coverage:
    scenario: str
    rows: list[Row] = field(default_factory=list)
    excluded: list[dict[str, str]] = field(default_factory=list)
    declared_uncovered: list[str] = field(default_factory=list)

    def by_dimension(self) -> dict[str, list[Row]]:
        out: dict[str, list[Row]] = {d: [] for d in DIMENSIONS}
        for row in self.rows:
            out[row.dimension].append(row)
        return out

    @property
    def uncovered(self) -> list[Row]:
        return [r for r in self.rows if not r.covered]

    def to_json(self) -> dict[str, Any]:
        return {
            "scenario": self.scenario,
            "dimensions": {
                d: [
                    {
                        "item": r.item,
                        "covered": r.covered,
                        "detail": r.detail,
                        "tools": list(r.tools),
                        "invariants": list(r.invariants),
                    }
                    for r in rows
                ]
                for d, rows in self.by_dimension().items()
            },
            "excluded_tools": self.excluded,
            "uncovered": self.declared_uncovered,
        }


DIMENSIONS = ("scenario state", "effect class", "contract", "error category", "recovery transition")


def coverage_of(sc: ScenarioPackage) -> Coverage:
    out = Coverage(
        scenario=f"{sc.name}@{sc.version}",
        excluded=[dict(e) for e in sc.excluded_tools],
        declared_uncovered=list(sc.uncovered),
    )
    # A fixture whose body retention removed answers nothing (a call it matches stops the run, seed 001): it covers
    # nothing either, and its contract's row says so.
    by_tool: dict[str, list[Any]] = {}
    expired_by_tool: dict[str, list[Any]] = {}
    for fixture in sc.fixtures:
        held = expired_by_tool if fixture.response.expired is not None else by_tool
        held.setdefault(fixture.tool, []).append(fixture)
    contracts = list(sc.contracts)
    mutations = {c.tool for c in contracts if c.effect_class == "mutation"}
    route_tools = {r.tool for r in sc.effects} | {r.status_tool for r in sc.effects if r.status_tool}

    def invariants_for(tool: str, resources: set[str] | None = None) -> tuple[str, ...]:
        found = []
        for inv in sc.invariants:
            check = inv["check"]
            mutation = check == "no_live_effect" and tool in mutations
            if mutation or (check == "approval_before_effect" and tool in route_tools):
                found.append(inv["id"])
            elif check == "max_transitions":
                touched = resources if resources is not None else _resources_of(by_tool.get(tool, []))
                if any(r.startswith(inv["resource_prefix"]) for r in touched):
                    found.append(inv["id"])
        return tuple(found)

    # contract
    for c in contracts:
        fixtures = by_tool.get(c.tool, [])
        reason = sc.excluded(c.tool)
        if reason:
            detail = f"excluded: {reason}"
        elif fixtures:
            detail = f"{len(fixtures)} fixture(s)"
        else:
            detail = "no fixture answers it: every call stops the run as incomplete_test_world"
        if not reason and (expired := expired_by_tool.get(c.tool)):
            detail += (
                f"; {len(expired)} fixture(s) whose body expired under retention: a call one of them matches stops"
                " the run as incomplete_test_world (source material expired)"
            )
        out.rows.append(
            Row("contract", f"{c.tool} r{c.revision}", bool(fixtures), detail, (c.tool,), invariants_for(c.tool))
        )

    # effect class
    for klass in ("read", "mutation"):
        members = [c for c in contracts if c.effect_class == klass]
        if not members:
            continue
        missing = [c.tool for c in members if not by_tool.get(c.tool)]
        out.rows.append(
            Row(
                "effect class",
                klass,
                not missing,
                f"{len(members) - len(missing)} of {len(members)} contract(s) have fixtures"
                + (f"; none for {', '.join(missing)}" if missing else ""),
                tuple(missing),
                tuple(sorted({i for t in missing for i in invariants_for(t)})),
            )
        )

    # error category
    categories: dict[str, list[str]] = {}
    for c in contracts:
        for outcome in c.outcomes:
            if outcome != "ok":
                categories.setdefault(outcome, []).append(c.tool)
    for outcome, tools in sorted(categories.items()):
        lacking = [t for t in tools if not any(f.response.outcome == outcome for f in by_tool.get(t, []))]
        covered_by = [t for t in tools if t not in lacking]
        detail = (
            f"reported by fixtures of {', '.join(covered_by)}"
            if covered_by
            else "declared, never reported by a fixture"
        )
        if lacking and covered_by:
            detail += f"; not by {', '.join(lacking)}"
        out.rows.append(
            Row(
                "error category",
                outcome,
                not lacking,
                detail,
                tuple(lacking),
                tuple(sorted({i for t in lacking for i in invariants_for(t)})),
            )
        )

    # scenario state
    states: dict[tuple[str, int], str] = {}
    for resource, entry in sorted(sc.world.get("resources", {}).items()):
        states[(resource, entry["revision"])] = "snapshot"
    producers: dict[tuple[str, int], list[str]] = {}
    for fixture in sc.fixtures:
        t = fixture.transition
        if t is not None:
            states.setdefault((t.resource, t.revision_after), "produced")
            producers.setdefault((t.resource, t.revision_after), []).append(fixture.tool)
    for (resource, revision), origin in sorted(states.items()):
        selecting = [
            f.id for f in sc.fixtures if any(c.resource == resource and c.revision == revision for c in f.condition)
        ]
        made_by = sorted(set(producers.get((resource, revision), [])))
        if origin == "snapshot":
            # A snapshot state is what every unconditional fixture answers in: covered by being the start.
            covered, detail = (
                True,
                "the snapshot's state" + (f"; {len(selecting)} fixture(s) select on it" if selecting else ""),
            )
        else:
            covered = bool(selecting)
            detail = f"produced by {', '.join(made_by)}; " + (
                f"{len(selecting)} fixture(s) select on it" if selecting else "no fixture observes it afterwards"
            )
        out.rows.append(
            Row(
                "scenario state",
                f"{resource} @ {revision}",
                covered,
                detail,
                tuple(made_by),
                tuple(sorted({i for t in made_by for i in invariants_for(t, {resource})})),
            )
        )

    # recovery transition
    for route in sc.effects:
        contract = sc.contracts.get(route.tool)
        stages = [s for s in contract.fault_stages if s in UNKNOWN_OUTCOME_STAGES]
        status_fixtures = by_tool.get(route.status_tool or "", [])
        for stage in stages:
            item = f"{route.tool} {stage} → reconcile"
            if route.status_tool is None:
                covered, detail = False, "the route names no status read: an unknown outcome cannot be reconciled"
                affected: tuple[str, ...] = (route.tool,)
            elif not status_fixtures:
                covered = False
                detail = f"status read {route.status_tool} has no fixture: recovery stops as incomplete_test_world"
                affected = (route.tool, route.status_tool)
            else:
                covered = True
                detail = f"status read {route.status_tool}: {len(status_fixtures)} fixture(s)"
                affected = (route.tool, route.status_tool)
            out.rows.append(
                Row(
                    "recovery transition",
                    item,
                    covered,
                    detail,
                    affected,
                    tuple(sorted({i for t in affected for i in invariants_for(t)})),
                )
            )
    return out


def _resources_of(fixtures: list[Any]) -> set[str]:
    return {f.transition.resource for f in fixtures if f.transition is not None}
