"""Concurrency as recorded behaviour (seed 000, "Concurrency was recorded as behavior"): races a scenario declares.

Two requests can race against one world; serial fixtures would hide the duplicate effect that follows. A scenario
version may therefore declare a *race* on a mutation contract (`scenario.json` `concurrency`, docs/concurrency.md):

    {"id": "second-delivery",
     "text": "the queue delivers the send job twice; the second arrives while the first is held",
     "tool": "email.send",
     "effect_identity": "delivery",                      # or "idempotency_key"
     "deliveries": [{"name": "first", "barrier": "after_acceptance"}, {"name": "second"}],
     "schedule": [{"run": "first"}, {"run": "second"}, {"release": "first"}]}

The first execution of an intent routed to `tool` is then carried out as these deliveries of the same request
instead of one: the first delivery is the one the decider asked for, the others are the harness delivering it
again (a queue's at-least-once delivery, a retrying worker). The engine (`replay/effects.py`) follows the
schedule step by step and records each step it took as a `schedule.step` event; the simulated world (`world.py`)
keeps the provider's ledger of accepted effects, keyed by effect identity, so the identity alone decides whether
the second delivery joins the first effect (one resource) or becomes an effect of its own (two).

- `effect_identity: idempotency_key`: the provider keys an effect on the intent's idempotency key, which every
  delivery of the intent carries, so a second delivery is deduplicated at acceptance.
- `effect_identity: delivery`: the provider keys it on each delivery's own identity (the improperly narrow
  identity of seed 001), so every delivery is accepted and committed as an effect of its own.

A delivery goes through acceptance (the ledger entry), commit (the fixture's world transition, looked up in the
world as it is at that moment) and acknowledgement (its `effect.execution`). A barrier holds it after acceptance
or after the world mutation (before the acknowledgement); `{"run": d}` runs delivery d until its barrier or its
end, `{"release": d}` runs a held delivery to its end. A race may also declare `reads` (`{name, tool, args}` of a
read contract) and take each once with `{"read": r}`: answered by the fixture of the world at that step, so a read
taken while a delivery is held after acceptance is a stale read, recorded as such (docs/concurrency.md).

Everything a race declares is checked when the package loads, and a bad declaration is refused with one line
naming the field (`parse_races`): an unknown or read-only tool, a tool no effect route executes, a barrier at a
stage the contract does not model, a schedule that runs a delivery twice, releases one before it ran or that has no
barrier, or leaves a barrier unreleased, and a race on a tool that also has a declared fault (a raced delivery's
stages come from the schedule; two sources of stages would make the recorded schedule a half-truth).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .contracts import ContractError, ContractSet
from .identifiers import id_problem
from .vocabulary import SCHEDULE_STEPS

EFFECT_IDENTITIES = ("idempotency_key", "delivery")
# The stages a delivery can be held at: after the provider accepted it, and after the world changed (before the
# acknowledgement). Named as DESIGN §3's execution stages, and a contract must model the stage (its `fault_stages`).
BARRIER_STAGES = ("after_acceptance", "after_world_mutation")
# What a `schedule.step` event says happened (docs/concurrency.md): a schedule entry ran or released a delivery, or
# was skipped (the delivery was not held: it had ended before its barrier); the provider accepted a delivery, or
# deduplicated it at acceptance; a delivery reached its barrier; its world mutation was committed.
STEPS = SCHEDULE_STEPS
MAX_DELIVERIES = 8
# What each identity means, in the words the scenario page shows beside a race.
IDENTITY_MEANS = {
    "idempotency_key": "the intent's idempotency key, which every delivery carries: a second delivery is "
    "deduplicated at acceptance, so the race leaves one resource",
    "delivery": "each delivery's own identity: every delivery is accepted and committed as an effect of its own, "
    "so the race leaves one resource per delivery",
}
BARRIER_MEANS = {
    "after_acceptance": "held after the provider accepted it, before the world changes",
    "after_world_mutation": "held after the world changed, before the acknowledgement",
}


class RaceError(ValueError):
    """A race declaration that cannot be followed; one line naming the field."""


@dataclass(frozen=True)
class Delivery:
    name: str
    barrier: str | None  # one of BARRIER_STAGES, or None: it runs to its end


@dataclass(frozen=True)
class Read:
    """A read the harness takes at one point of the schedule (`{"read": name}`): the request of a read contract,
    answered by the fixture of the world as it is at that step. Taken while a delivery is held after acceptance,
    it is the stale read serial fixtures hide: the provider accepted the effect, the world does not show it yet."""

    name: str
    tool: str
    args: dict[str, Any]


@dataclass(frozen=True)
class ScheduleEntry:
    op: str  # "run" | "release" | "read"
    delivery: str  # the delivery run or released, or the read taken


@dataclass(frozen=True)
class Race:
    id: str
    text: str
    tool: str
    effect_identity: str
    deliveries: tuple[Delivery, ...]
    schedule: tuple[ScheduleEntry, ...]
    reads: tuple[Read, ...] = ()

    def delivery(self, name: str) -> Delivery:
        return next(d for d in self.deliveries if d.name == name)

    def read(self, name: str) -> Read:
        return next(r for r in self.reads if r.name == name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "text": self.text,
            "tool": self.tool,
            "effect_identity": self.effect_identity,
            "deliveries": [{"name": d.name, **({"barrier": d.barrier} if d.barrier else {})} for d in self.deliveries],
            "schedule": [{e.op: e.delivery} for e in self.schedule],
            **({"reads": [{"name": r.name, "tool": r.tool, "args": r.args} for r in self.reads]} if self.reads else {}),
        }


def schedule_rows(race: Race) -> list[dict[str, Any]]:
    """The declared schedule in words, one row per step, for the scenario page."""
    rows = []
    for n, entry in enumerate(race.schedule, start=1):
        if entry.op == "read":
            tool = race.read(entry.delivery).tool
            what = f"read {entry.delivery}: {tool} observes the world as it is at this step"
            rows.append({"n": n, "op": "read", "delivery": entry.delivery, "barrier": None, "what": what})
            continue
        barrier = race.delivery(entry.delivery).barrier
        if entry.op == "release":
            what = f"release {entry.delivery}: it goes on from its barrier to its end"
        elif barrier is not None:
            what = f"run {entry.delivery} until its barrier: {BARRIER_MEANS[barrier]}"
        else:
            what = f"run {entry.delivery} to its end"
        rows.append({"n": n, "op": entry.op, "delivery": entry.delivery, "barrier": barrier, "what": what})
    return rows


def identity_for(race: Race, idempotency_key: str, delivery: str) -> str:
    """The identity the simulated provider keys a delivery's effect on."""
    if race.effect_identity == "idempotency_key":
        return idempotency_key
    return f"{idempotency_key}#{delivery}"


def parse_races(
    value: Any, contracts: ContractSet, *, routed: set[str], faulted: set[str], where: str = "scenario.json"
) -> tuple[Race, ...]:
    """The races of a scenario, checked against its contracts, its effect routes (`routed`: the tools an effect
    executes through) and its faults (`faulted`: tools with a declared fault or a fixture fault stage)."""
    if not isinstance(value, list):
        raise RaceError(f"{where}: concurrency must be a JSON list")
    races: list[Race] = []
    for i, item in enumerate(value):
        race = _race(item, contracts, routed, faulted, f"{where}: concurrency[{i}]")
        for other in races:
            if other.id == race.id:
                raise RaceError(f"{where}: concurrency[{i}].id: {race.id!r} is declared twice")
            if other.tool == race.tool:
                raise RaceError(
                    f"{where}: concurrency[{i}].tool: {race.tool} already races in {other.id!r}; "
                    "one race per tool (its first execution follows it)"
                )
        races.append(race)
    return tuple(races)


def _race(item: Any, contracts: ContractSet, routed: set[str], faulted: set[str], where: str) -> Race:
    if not isinstance(item, dict):
        raise RaceError(f"{where}: must be a JSON object")
    _keys(item, where, {"id", "text", "tool", "effect_identity", "deliveries", "schedule"}, {"reads"})
    race_id = item["id"]
    problem = id_problem(race_id, what="a race id")
    if problem is not None:
        raise RaceError(f"{where}.id: {problem}")
    text = item["text"]
    if not isinstance(text, str) or not text.strip():
        raise RaceError(f"{where}.text: a race says what it reproduces, in a sentence")
    tool = item["tool"]
    if not isinstance(tool, str) or tool not in contracts:
        raise RaceError(f"{where}.tool: no contract for {tool!r} in this scenario")
    contract = contracts.get(tool)
    if contract.effect_class != "mutation":
        raise RaceError(f"{where}.tool: {tool} is a read; only a mutation's deliveries can race to an effect")
    if tool not in routed:
        raise RaceError(
            f"{where}.tool: no effect route of this scenario executes through {tool}, so nothing would race"
        )
    if tool in faulted:
        raise RaceError(
            f"{where}.tool: {tool} also has a declared fault (in faults or a fixture's fault_stage); a raced "
            "delivery's stages come from its schedule alone"
        )
    identity = item["effect_identity"]
    if identity not in EFFECT_IDENTITIES:
        raise RaceError(f"{where}.effect_identity: one of {', '.join(EFFECT_IDENTITIES)}, not {identity!r}")
    deliveries = tuple(_deliveries(item["deliveries"], contract.fault_stages, f"{where}.deliveries", tool))
    reads = tuple(_reads(item.get("reads", []), contracts, deliveries, f"{where}.reads"))
    schedule = tuple(_schedule(item["schedule"], deliveries, f"{where}.schedule", reads))
    return Race(race_id, text, tool, identity, deliveries, schedule, reads)


def _reads(value: Any, contracts: ContractSet, deliveries: tuple[Delivery, ...], where: str) -> Iterator[Read]:
    if not isinstance(value, list) or len(value) > MAX_DELIVERIES:
        raise RaceError(f"{where}: a JSON list of at most {MAX_DELIVERIES} reads")
    seen = {d.name for d in deliveries}
    for j, entry in enumerate(value):
        at = f"{where}[{j}]"
        if not isinstance(entry, dict):
            raise RaceError(f"{at}: must be a JSON object")
        _keys(entry, at, {"name", "tool", "args"})
        name = entry["name"]
        problem = id_problem(name, what="a read name", max_len=40)
        if problem is not None:
            raise RaceError(f"{at}.name: {problem}")
        if name in seen:
            raise RaceError(f"{at}.name: {name!r} is already a delivery or a read of this race")
        seen.add(name)
        tool = entry["tool"]
        if not isinstance(tool, str) or tool not in contracts:
            raise RaceError(f"{at}.tool: no contract for {tool!r} in this scenario")
        contract = contracts.get(tool)
        if contract.effect_class != "read":
            raise RaceError(f"{at}.tool: {tool} is a mutation; a read step observes the world, it cannot change it")
        args = entry["args"]
        if not isinstance(args, dict):
            raise RaceError(f"{at}.args: must be a JSON object (the read's request)")
        try:
            contract.digest(args)
        except ContractError as exc:
            raise RaceError(f"{at}.args: does not fit {tool} revision {contract.revision}: {exc}") from None
        yield Read(name, tool, dict(args))


def _deliveries(value: Any, supported: tuple[str, ...], where: str, tool: str) -> Iterator[Delivery]:
    if not isinstance(value, list) or not 2 <= len(value) <= MAX_DELIVERIES:
        raise RaceError(f"{where}: a race has 2 to {MAX_DELIVERIES} deliveries of the same request")
    seen: set[str] = set()
    for j, entry in enumerate(value):
        at = f"{where}[{j}]"
        if not isinstance(entry, dict):
            raise RaceError(f"{at}: must be a JSON object")
        _keys(entry, at, {"name"}, {"barrier"})
        name = entry["name"]
        problem = id_problem(name, what="a delivery name", max_len=40)
        if problem is not None:
            raise RaceError(f"{at}.name: {problem}")
        if name in seen:
            raise RaceError(f"{at}.name: {name!r} is declared twice")
        seen.add(name)
        barrier = entry.get("barrier")
        if barrier is not None:
            if barrier not in BARRIER_STAGES:
                raise RaceError(f"{at}.barrier: one of {', '.join(BARRIER_STAGES)}, not {barrier!r}")
            if barrier not in supported:
                raise RaceError(
                    f"{at}.barrier: {tool}'s contract does not model the stage {barrier} "
                    f"(its stages: {', '.join(supported) or 'none'})"
                )
        yield Delivery(name, barrier)


def _schedule(
    value: Any, deliveries: tuple[Delivery, ...], where: str, reads: tuple[Read, ...] = ()
) -> Iterator[ScheduleEntry]:
    if not isinstance(value, list) or not value:
        raise RaceError(f"{where}: must be a non-empty JSON list of {{run: name}} and {{release: name}} steps")
    barriers = {d.name: d.barrier for d in deliveries}
    read_names = {r.name for r in reads}
    ran: set[str] = set()
    released: set[str] = set()
    taken: set[str] = set()
    for k, entry in enumerate(value):
        at = f"{where}[{k}]"
        if not isinstance(entry, dict) or len(entry) != 1 or next(iter(entry)) not in ("run", "release", "read"):
            raise RaceError(f'{at}: a step is {{"run": name}}, {{"release": name}} or {{"read": name}}, got {entry!r}')
        op, name = next(iter(entry.items()))
        if op == "read":
            if name not in read_names:
                raise RaceError(f"{at}.read: {name!r} is not a read of this race")
            if name in taken:
                raise RaceError(f"{at}.read: {name!r} is already taken; declare another read to read again")
            taken.add(name)
            yield ScheduleEntry(op, name)
            continue
        if name not in barriers:
            raise RaceError(f"{at}.{op}: {name!r} is not a delivery of this race")
        if op == "run":
            if name in ran:
                raise RaceError(f"{at}.run: {name!r} already ran; a delivery runs once")
            ran.add(name)
        else:
            if name not in ran:
                raise RaceError(f"{at}.release: {name!r} is released before it ran")
            if barriers[name] is None:
                raise RaceError(f"{at}.release: {name!r} has no barrier, so nothing holds it")
            if name in released:
                raise RaceError(f"{at}.release: {name!r} is already released")
            released.add(name)
        yield ScheduleEntry(op, name)
    for d in deliveries:
        if d.name not in ran:
            raise RaceError(f"{where}: delivery {d.name!r} never runs")
        if d.barrier is not None and d.name not in released:
            raise RaceError(f"{where}: delivery {d.name!r} is held at {d.barrier} and never released")
    for name in sorted(read_names - taken):
        raise RaceError(f"{where}: read {name!r} is never taken")


def _keys(value: dict[str, Any], where: str, required: set[str], optional: set[str] | None = None) -> None:
    missing = sorted(required - set(value))
    if missing:
        raise RaceError(f"{where}: {missing[0]} is required")
    unknown = sorted(set(value) - required - (optional or set()))
    if unknown:
        raise RaceError(f"{where}: unknown key {unknown[0]!r}")
