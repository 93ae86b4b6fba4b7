"""Reads for the review pages: the queue, one staged recording, scenario versions and their coverage."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db.models import Prefetch, QuerySet
from django.utils import timezone

from console.captured_html import looks_like_html, sanitize_captured_html
from n17q_engine import concurrency, coverage
from n17q_engine.package import PackageError
from runs.relaunch import relaunch_url
from runs.retention import retention_class

from . import intake, services
from .body_access import recording_body
from .models import ReviewEvent, ScenarioVersion, StagedRecording
from .retention import recording_expiries
from .scenarios import (
    ScenarioRefused,
    fixture_bodies_expiries,
    loaded_scenario,
    scenario_bodies,
    source_expired_sentence,
)

# bleach takes about a second per 200 KB on this machine (docs/benchmarks.md): the page shows the first 64 KB of
# a captured page sanitized and says so; the whole body is the download.
HTML_PREVIEW_CHARS = 64 * 1024


def recording_queue(*, state: str = "staged", scenario: str = "") -> QuerySet[StagedRecording]:
    qs = StagedRecording.objects.select_related("captured_by", "scenario_version").prefetch_related(
        Prefetch(
            "events",
            queryset=ReviewEvent.objects.filter(action__in=[ReviewEvent.Action.REDACT, ReviewEvent.Action.SYNTHESIZE]),
            to_attr="changes",
        )
    )
    if state:
        qs = qs.filter(state=state)
    if scenario:
        qs = qs.filter(scenario_name=scenario)
    return qs.order_by("-staged_at", "-id")


def open_findings_count(recording: StagedRecording) -> int:
    return len(services.unresolved_findings(recording, getattr(recording, "changes", None)))


def age(then: datetime, now: datetime | None = None) -> str:
    """A recording's age in words: '2 days', '5 hours', '3 minutes'."""
    seconds = max(0, int(((now or timezone.now()) - then).total_seconds()))
    for unit, size in (("year", 365 * 86400), ("day", 86400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            n = seconds // size
            return f"{n} {unit}{'s' if n != 1 else ''}"
    return f"{seconds} seconds"


def shape(value: Any, depth: int = 0) -> str:
    """The response's shape, not its content: `{items: [1 x {title: string, url: string}], total: integer}`."""
    if depth > 6:
        return "…"
    if intake._is_encoded(value):
        return f"binary ({len(intake.body_bytes(value))} bytes)"
    if isinstance(value, dict):
        if not value:
            return "{}"
        return (
            "{"
            + ", ".join(f"{k}: {shape(v, depth + 1)}" for k, v in list(value.items())[:20])
            + (", …" if len(value) > 20 else "")
            + "}"
        )
    if isinstance(value, list):
        if not value:
            return "[]"
        kinds = sorted({shape(v, depth + 1) for v in value[:50]})
        return f"[{len(value)} x {' | '.join(kinds[:3])}{' | …' if len(kinds) > 3 else ''}]"
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value == intake.REDACTED:
        return "redacted"
    return f"string ({len(value)} chars)"


def flatten(value: Any, path: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, child in value.items():
            out.update(flatten(child, intake.join(path, key)))
        return out
    if isinstance(value, list) and value:
        out = {}
        for i, child in enumerate(value):
            out.update(flatten(child, intake.join(path, i)))
        return out
    return {path or "$": value}


@dataclass
class DiffRow:
    path: str
    existing: str
    staged: str
    state: str  # same | changed | only-existing | only-staged


def field_diff(existing: Any, staged: Any) -> list[DiffRow]:
    a, b = flatten(existing), flatten(staged)
    rows = []
    for path in sorted(set(a) | set(b)):
        if path not in b:
            rows.append(DiffRow(path, _show(a[path]), "", "only-existing"))
        elif path not in a:
            rows.append(DiffRow(path, "", _show(b[path]), "only-staged"))
        else:
            same = json.dumps(a[path], sort_keys=True) == json.dumps(b[path], sort_keys=True)
            rows.append(DiffRow(path, _show(a[path]), _show(b[path]), "same" if same else "changed"))
    return rows


def _show(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 200 else text[:199] + "…"


@dataclass
class Nearest:
    scenario: ScenarioVersion
    fixture: dict[str, Any]
    why: str
    diff: list[DiffRow]
    # Set when the fixture's body was removed under retention: its body is not compared (never as an empty one).
    body_expired: str = ""


def nearest_fixture(recording: StagedRecording) -> Nearest | None:
    """The existing fixture most like this recording: same tool (same contract revision first), fewest differing
    request fields, in the latest version of its scenario. For a reviewer to compare, never for a replay."""
    latest = ScenarioVersion.objects.filter(name=recording.scenario_name).order_by("-version").first()
    if latest is None:
        return None
    candidates = [f for f in latest.fixture_items if f.get("tool") == recording.tool]
    if not candidates:
        return None
    request = recording.normalized_request or recording.request.get("args") or {}

    def distance(f: dict[str, Any]) -> tuple[int, int]:
        rows = field_diff(f.get("request"), request)
        return (0 if f.get("contract_revision") == recording.contract_revision else 1,
                sum(r.state != "same" for r in rows))  # fmt: skip

    best = min(candidates, key=distance)
    rev, differing = distance(best)
    why = ("same request" if differing == 0 else f"{differing} request field(s) differ") + (
        "" if rev == 0 else f"; recorded under revision {best.get('contract_revision')}"
    )
    staged_response: dict[str, Any] = {
        "outcome": recording.outcome,
        "body": recording_body(recording, "response").value,
    }
    existing_response: dict[str, Any] = {"outcome": best.get("response", {}).get("outcome")}
    expired = ""
    try:
        held = scenario_bodies(latest).body(best)
    except ScenarioRefused as exc:
        expired = str(exc)  # the body cannot be read back: said, and not compared
    else:
        if held.expiry is not None and held.digest is not None:
            # Source material expired: the body is not there to compare; the rows compare the rest.
            expired = source_expired_sentence(str(best.get("id")), held.digest, held.expiry)
        else:
            existing_response["body"] = held.value
    if expired:
        del staged_response["body"]
    staged = {"request": request, "response": staged_response, "transition": recording.proposed_transition}
    existing = {"request": best.get("request"), "response": existing_response, "transition": best.get("transition")}
    return Nearest(latest, best, why, field_diff(existing, staged), expired)


@dataclass
class FindingView:
    id: str
    rule: str
    path: str
    preview: str
    resolved: bool


@dataclass
class RecordingPage:
    recording: StagedRecording
    events: list[ReviewEvent]
    findings: list[FindingView]
    open_findings: int
    reviewer_redactions: list[ReviewEvent]
    age: str
    normalized_json: str
    request_json: str
    response_body_json: str
    response_shape: str
    response_html: str | None
    response_html_truncated: bool
    transition_json: str
    paths: list[str]
    nearest: Nearest | None
    refusal: str | None  # why this user may not approve, or None
    blockers: list[str]
    can_review: bool
    content_type: str
    downloads: dict[str, str] = field(default_factory=dict)
    duplicates: list[StagedRecording] = field(default_factory=list)  # other staged/promoted recordings of its key
    conflict: str | None = None  # a second body for a key the latest version answers: approval needs a note
    needed_by: list[Any] = field(default_factory=list)  # NeededBy: the replay runs that stopped for want of it
    retention: Any = None  # runs.retention.RetentionClass the recording is kept under
    expiries: dict[str, Any] = field(default_factory=dict)  # {"response": Expiry}: bodies the sweep removed
    # A mutation answered ambiguously with no transition and no declared no-change: the page offers the declaration.
    no_change_offered: bool = False
    # The minted fixture version's body (seed 001): held by digest, kept or expired (with its sentence).
    fixture_body: VersionBody | None = None


@dataclass(frozen=True)
class VersionBody:
    digest: str | None  # None: the version keeps its reviewed body inline (minted before bodies were held by digest)
    expired: bool = False
    sentence: str = ""


def fixture_version_body(recording: StagedRecording) -> VersionBody | None:
    """How the fixture version minted from `recording` holds its body now (one query, and only for a version holding
    it by digest): inline, by digest and kept, or by digest and removed ("Source material expired: …")."""
    version = recording.fixture_version if recording.fixture_version_id else None
    if version is None:
        return None
    fixture = version.fixture
    digest = (fixture.get("response") or {}).get("body_digest")
    if not digest:
        return VersionBody(None)
    expiry = fixture_bodies_expiries([digest]).get(digest)
    if expiry is None:
        return VersionBody(digest)
    return VersionBody(digest, True, source_expired_sentence(version.fixture_id, digest, expiry))


def recording_page(recording: StagedRecording, user: Any) -> RecordingPage:
    events = list(recording.events.select_related("actor").order_by("at", "id"))
    unresolved = {f["id"] for f in services.unresolved_findings(recording, events)}
    findings = [
        FindingView(f["id"], f["rule"], f["path"], f["preview"], f["id"] not in unresolved) for f in recording.findings
    ]
    response = recording.response
    # The bodies as the recording holds them (fixtures_review.body_access): none once its own hold ended, whatever
    # the row or the store still carry. One query, and only for a recording the sweep has touched.
    expiries = recording_expiries(recording) if recording.expired_bodies else {}
    held = {part: recording_body(recording, part, expiries) for part in ("request", "response")}
    body = held["response"].value
    ctype = next((str(v) for k, v in (response.get("headers") or {}).items() if k.lower() == "content-type"), "")
    html = sanitize_captured_html(body[:HTML_PREVIEW_CHARS]) if looks_like_html(body, ctype) else None
    html_truncated = html is not None and len(body) > HTML_PREVIEW_CHARS
    request = {**recording.request, "body": held["request"].value}
    can_review = bool(getattr(user, "is_authenticated", False) and user.has_perm(services.REVIEW_PERM))
    return RecordingPage(
        recording=recording,
        events=events,
        findings=findings,
        open_findings=len(unresolved),
        reviewer_redactions=[e for e in events if e.action in ("redact", "synthesize")],
        age=age(recording.captured_at),
        normalized_json=_pretty(recording.normalized_request) if recording.normalized_request is not None else "",
        request_json=_pretty({k: request.get(k) for k in ("method", "url", "headers", "body")}),
        response_body_json=body if isinstance(body, str) else _pretty(body),
        response_shape=shape(body),
        response_html=html,
        response_html_truncated=html_truncated,
        transition_json=_pretty(recording.proposed_transition) if recording.proposed_transition else "",
        paths=services.leaf_paths(recording),
        nearest=nearest_fixture(recording),
        refusal=services.approval_refusal(recording, user),
        blockers=services.promotion_blockers(recording) if recording.state == "staged" else [],
        can_review=can_review,
        content_type=ctype,
        downloads={part: b.digest for part, b in held.items() if b.digest and not b.ended},
        duplicates=duplicates_of([recording]).get(recording.pk, []),
        conflict=services.promoted_key_conflict(recording) if recording.state == "staged" else None,
        needed_by=runs_needing(recording),
        no_change_offered=(
            recording.effect_class == "mutation"
            and recording.outcome in services.AMBIGUOUS_OUTCOMES
            and not recording.proposed_transition
            and not recording.no_change_reason
        ),
        retention=retention_class(recording.retention_class) if recording.retention_class else None,
        expiries={part: b.expiry for part, b in held.items() if b.expiry is not None},
        fixture_body=fixture_version_body(recording),
    )


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


# --- scenario versions ---------------------------------------------------------------------------------------------


def scenario_versions() -> QuerySet[ScenarioVersion]:
    return ScenarioVersion.objects.select_related("imported_by", "based_on").order_by("name", "-version")


@dataclass
class ScenarioPage:
    version: ScenarioVersion
    meta: dict[str, Any]
    coverage: coverage.Coverage | None
    error: str
    fixtures: list[dict[str, Any]]
    promoted: list[StagedRecording]
    later: list[ScenarioVersion]
    races: list[dict[str, Any]] = field(default_factory=list)  # declared concurrency: barriers and schedules


def scenario_page(version: ScenarioVersion) -> ScenarioPage:
    error = ""
    cov = None
    races: list[dict[str, Any]] = []
    try:
        loaded = loaded_scenario(version)
        cov = coverage.coverage_of(loaded)
        races = [
            {
                "race": race,
                "identity_means": concurrency.IDENTITY_MEANS[race.effect_identity],
                "deliveries": [
                    {"name": d.name, "barrier": d.barrier, "means": concurrency.BARRIER_MEANS.get(d.barrier or "", "")}
                    for d in race.deliveries
                ],
                "schedule": concurrency.schedule_rows(race),
            }
            for race in loaded.races
        ]
    except (ScenarioRefused, PackageError) as exc:
        error = str(exc)
    fixtures = version.fixture_items
    try:
        bodies = scenario_bodies(version)
    except ScenarioRefused:
        bodies = None  # the error above says why the version does not load
    for f in fixtures:
        # A body held by digest whose hold the sweep ended: the page says so, with the deletion record.
        digest = (f.get("response") or {}).get("body_digest")
        if bodies is not None and digest in bodies.expiries:
            f["body_expired"] = source_expired_sentence(str(f.get("id")), digest, bodies.expiries[digest])
    return ScenarioPage(
        version=version,
        meta=version.scenario_json,
        coverage=cov,
        error=error,
        fixtures=fixtures,
        promoted=list(version.promoted_recordings.select_related("fixture_version")),
        later=list(ScenarioVersion.objects.filter(name=version.name, version__gt=version.version).order_by("version")),
        races=races,
    )


# --- what answers one request ------------------------------------------------------------------------------------


@dataclass
class RequestAnswers:
    """Everything the console holds for one fixture key (scenario, tool, contract revision, request digest)."""

    staged: list[StagedRecording]  # captures waiting in the review queue
    candidates: list[StagedRecording]  # copies (of the recorded answer, or similar) waiting in the review queue
    promoted: list[StagedRecording]  # approved recordings of this key
    versions: list[tuple[ScenarioVersion, str]]  # (a version holding a fixture for it, that fixture's id)
    # (version ref, fixture id) of those fixtures whose body retention removed: they match, but answer nothing
    expired: set[tuple[str, str]] = field(default_factory=set)

    @property
    def empty(self) -> bool:
        return not (self.staged or self.candidates or self.promoted or self.versions)

    @property
    def answering(self) -> list[tuple[ScenarioVersion, str, bool]]:
        """(version, fixture id, whether that fixture's body expired) for each version holding a fixture for it."""
        return [(v, f, (v.ref, f) in self.expired) for v, f in self.versions]


def request_answers(*, scenario: str, tool: str, contract_revision: int, request_digest: str) -> RequestAnswers:
    """Staged captures, pending candidates, promoted recordings and scenario versions answering one request.

    Three queries: the recordings of the key (indexed by scenario and tool), the scenario's versions. A version's
    fixtures are read from its stored files; a scenario holds few versions, each one a handful of kilobytes.
    """
    recordings = list(
        StagedRecording.objects.filter(
            scenario_name=scenario,
            tool=tool,
            contract_revision=contract_revision,
            request_digest=request_digest,
            state__in=(StagedRecording.State.STAGED, StagedRecording.State.PROMOTED),
        )
        .select_related("scenario_version", "fixture_version")
        .order_by("staged_at", "id")
    )
    staged = [r for r in recordings if r.state == "staged" and r.origin == StagedRecording.Origin.CAPTURE]
    candidates = [r for r in recordings if r.state == "staged" and r.origin != StagedRecording.Origin.CAPTURE]
    promoted = [r for r in recordings if r.state == "promoted"]
    versions = []
    expired: set[tuple[str, str]] = set()
    for version in ScenarioVersion.objects.filter(name=scenario).order_by("version"):
        for f in version.fixture_items:
            if (
                f.get("tool") == tool
                and f.get("contract_revision") == contract_revision
                and services.fixture_request_digest(f) == request_digest
            ):
                versions.append((version, str(f.get("id") or "")))
                if scenario_bodies(version).body(f).expired:  # a query only for a body held by digest
                    expired.add((version.ref, str(f.get("id") or "")))
                break
    return RequestAnswers(staged, candidates, promoted, versions, expired)


def duplicates_of(recordings: list[StagedRecording]) -> dict[int, list[StagedRecording]]:
    """{recording pk: the other staged or promoted recordings of its fixture key}, in one query for a page."""
    if not recordings:
        return {}
    digests = {r.request_digest for r in recordings}
    others = list(
        StagedRecording.objects.filter(
            request_digest__in=digests,
            state__in=(StagedRecording.State.STAGED, StagedRecording.State.PROMOTED),
        )
        .select_related("scenario_version")
        .order_by("staged_at", "id")
    )

    def key(r: StagedRecording) -> tuple[str, str, int, str]:
        return (r.scenario_name, r.tool, r.contract_revision, r.request_digest)

    by_key: dict[tuple[str, str, int, str], list[StagedRecording]] = {}
    for other in others:
        by_key.setdefault(key(other), []).append(other)
    return {r.pk: [o for o in by_key.get(key(r), []) if o.pk != r.pk] for r in recordings}


@dataclass
class NeededBy:
    """A replay run that stopped for want of this key, and the run it replayed (the one to replay again)."""

    run_id: str
    source_run_id: str
    missing_event_id: str
    scenario_ref: str
    # The address that launches that replay again as it was launched (mode, variable, checkpoint) against a version
    # (`relaunch_url`; the run's manifest names them): an agent's counterfactual is relaunched as one.
    mode: str = "rerun"
    vary: dict = field(default_factory=dict)
    checkpoint: str | None = None

    def relaunch_url(self, scenario_ref: str) -> str:
        return relaunch_url(self.source_run_id, self.mode, self.vary, self.checkpoint, scenario_ref)


def runs_needing(recording: StagedRecording, *, limit: int = 50) -> list[NeededBy]:
    """The replay runs (newest first, among the latest `limit` of its scenario that stopped as incomplete test
    world) whose `fixture.missing` names this recording's key: the runs that needed it. Two queries."""
    from runs.models import Event, Run

    runs = list(
        Run.objects.filter(
            scenario_name=recording.scenario_name, final_state="incomplete_test_world", parent__isnull=False
        )
        .select_related("parent")
        .order_by("-pk")[:limit]
    )
    by_pk = {r.pk: r for r in runs}
    found: list[NeededBy] = []
    seen: set[int] = set()
    for run_pk, event_id, body in (
        Event.objects.filter(run__in=list(by_pk), kind="fixture.missing")
        .order_by("-run_id", "seq")
        .values_list("run_id", "event_id", "body")
    ):
        if run_pk in seen:
            continue
        if (body.get("tool"), body.get("contract_revision"), body.get("request_digest")) != (
            recording.tool,
            recording.contract_revision,
            recording.request_digest,
        ):
            continue
        seen.add(run_pk)
        run = by_pk[run_pk]
        scenario = body.get("scenario") or {}
        launched = (run.manifest_run or {}).get("replay") if isinstance(run.manifest_run, dict) else None
        launched = launched if isinstance(launched, dict) else {}
        vary = launched.get("vary")
        found.append(
            NeededBy(
                run.run_id,
                run.parent.run_id if run.parent else "",
                event_id,
                f"{scenario.get('name')}@{scenario.get('version')}",
                mode=run.mode,
                vary={str(k): str(v) for k, v in vary.items()} if isinstance(vary, dict) else {},
                checkpoint=launched.get("checkpoint") if isinstance(launched.get("checkpoint"), str) else None,
            )
        )
    return found


# --- the record policy page --------------------------------------------------------------------------------------

RECENT_OBSERVATIONS = 100  # the newest refused or failed captures shown; the admin (and the audit log) hold all


def record_policy_page() -> dict[str, Any]:
    """The reviewed connections and the newest request observations (refused or failed captures): one query
    for the connections (their people joined) and one for the observations (their actors joined), whatever the
    counts."""
    from .models import Connection, RequestObservation

    connections = list(Connection.objects.select_related("proposed_by", "approved_by", "retired_by"))
    observations = list(RequestObservation.objects.select_related("actor")[:RECENT_OBSERVATIONS])
    return {"connections": connections, "observations": observations, "limit": RECENT_OBSERVATIONS}
