"""Annotations and corrections (issue 38, seed 001 "Corrections named their author, basis, and time"): what a reviewer
adds to a run after it ran, as new events of its graph (docs/annotations.md).

An annotation is an `annotation.recorded` event: a score (a named value on a scale, `correctness` 0.8 on `0..1`, or
`pass` on `pass/fail`), a label (a tag) or a comment (bounded text), on the run, on one of its events (a span of an
imported trace is its event) or on a lineage finding (its code and the events on its two ends). A correction is an
`annotation.correction` event: the reviewer says that a recorded fact of one event was otherwise (`field`, the value
`recorded`, the value `corrected`), on the events it rests on (`basis_ids`), with a rationale. Both name their author
and role; `at.wall` is when they were made. History stays append-only: they are appended after the run's last event,
nothing before them changes, and a change of mind is a later annotation naming the one it supersedes.

What a correction does not do: change the recorded event, the run's facts, its findings or its verdict. Pages show the
recorded value and the correction beside it, each with its author; the lineage checker reads neither kind.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import F, Max, Value
from django.db.models.functions import Coalesce

from accounts.audit import audit_record
from accounts.roles import ADMIN, REVIEWER, user_roles
from n17q_engine import vocabulary as v
from n17q_engine.identifiers import id_problem
from n17q_secrets import gate

from .models import Edge, Event, Finding, Run, RunObject

ANNOTATE_PERM = "runs.annotate_run"
TEXT_MAX = 4000  # a comment's or a rationale's characters
NAME_MAX = 100  # a score's or a label's name, a scale, a field
VALUE_MAX = 500  # a correction's recorded or corrected value, as text
BASIS_MAX = 20  # events a correction rests on
ANNOTATIONS_SHOWN = 200  # on the run page; the API pages through all of them
PANEL_SHOWN = 50  # in an event's detail panel
TARGETS = ("run", "event", "finding")
# What the run page's forms post (runs.views.run_annotate), the API's fields by the same names.
FORM_FIELDS = (
    "annotation", "target", "event", "finding", "name", "value", "scale", "text",
    "field", "corrected", "basis", "rationale", "supersedes",
)  # fmt: skip


class AnnotationRefused(ValueError):
    """Bad input for an annotation: one line, safe to show, naming the field."""

    def __init__(self, message: str, *, field: str = "") -> None:
        super().__init__(message)
        self.field = field


def can_annotate(user: Any) -> bool:
    return bool(getattr(user, "is_authenticated", False) and user.has_perm(ANNOTATE_PERM))


def _author_role(user: Any) -> str:
    roles = user_roles(user)
    return ADMIN if ADMIN in roles else REVIEWER if REVIEWER in roles else "unknown"


def _text(value: Any, name: str, *, limit: int, required: bool = False) -> str | None:
    if value is None or value == "":
        if required:
            raise AnnotationRefused(f"{name} is required", field=name)
        return None
    if not isinstance(value, str):
        raise AnnotationRefused(f"{name} must be text", field=name)
    value = value.strip()
    if "\x00" in value:
        raise AnnotationRefused(f"{name} must not hold a NUL character", field=name)
    if len(value) > limit:
        raise AnnotationRefused(f"{name} is longer than {limit} characters", field=name)
    if required and not value:
        raise AnnotationRefused(f"{name} is required", field=name)
    return value or None


def _event(run: Run, ref: Any, name: str) -> Event:
    if not isinstance(ref, str) or id_problem(ref, what="an event id") is not None:
        raise AnnotationRefused(f"{name} must be an event id of this run", field=name)
    event = Event.objects.filter(run=run, event_id=ref).only("pk", "event_id", "kind", "body").first()
    if event is None:
        raise AnnotationRefused(f"this run holds no event {ref!r} ({name})", field=name)
    return event


def _score(value: Any, scale: str | None) -> tuple[Any, str]:
    """A score's value on its scale: a number within `lo..hi`, or one of the words of `a/b/c`."""
    scale = scale or "0..1"
    if ".." in scale:
        lo_text, _, hi_text = scale.partition("..")
        try:
            lo, hi = float(lo_text), float(hi_text)
        except ValueError:
            raise AnnotationRefused(
                "scale must be LOW..HIGH (numbers) or words joined by / (pass/fail)", field="scale"
            ) from None
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise AnnotationRefused("scale must be LOW..HIGH with LOW below HIGH", field="scale")
        try:
            number = float(value) if not isinstance(value, bool) else math.nan
        except (TypeError, ValueError):
            raise AnnotationRefused(f"value must be a number on {scale}", field="value") from None
        if not math.isfinite(number) or not lo <= number <= hi:
            raise AnnotationRefused(f"value must be a number on {scale}", field="value")
        return (int(number) if number.is_integer() else number), scale
    words = [w.strip() for w in scale.split("/") if w.strip()]
    if len(words) < 2:
        raise AnnotationRefused("scale must be LOW..HIGH (numbers) or words joined by / (pass/fail)", field="scale")
    if not isinstance(value, str) or value.strip() not in words:
        raise AnnotationRefused(f"value must be one of {' | '.join(words)}", field="value")
    return value.strip(), "/".join(words)


@dataclass
class Target:
    kind: str  # run | event | finding
    event: Event | None = None
    finding: Finding | None = None

    def fields(self) -> dict[str, Any]:
        if self.kind == "event" and self.event is not None:
            return {"subject": self.event.event_id}
        if self.kind == "finding" and self.finding is not None:
            f = self.finding
            return {"finding": {"code": f.code, "from_id": f.from_ref, "to_id": f.to_ref}}
        return {}


def target_resolve(run: Run, *, target: Any = "run", event: Any = None, finding: Any = None) -> Target:
    """What an annotation is on: the run, an event by id, or a finding by its stored id or `CODE:from_event`."""
    if target in (None, ""):
        target = "finding" if finding else "event" if event else "run"
    if target not in TARGETS:
        raise AnnotationRefused(f"target must be one of {' | '.join(TARGETS)}", field="target")
    if target == "run":
        return Target("run")
    if target == "event":
        return Target("event", event=_event(run, event, "event"))
    found = None
    if isinstance(finding, int) or (isinstance(finding, str) and finding.isdigit()):
        found = Finding.objects.filter(run=run, pk=int(finding)).first()
    elif isinstance(finding, str) and ":" in finding:
        code, _, ref = finding.partition(":")
        found = Finding.objects.filter(run=run, code=code.strip(), from_ref=ref.strip()).order_by("id").first()
    if found is None:
        raise AnnotationRefused(
            "finding must name one of this run's findings (its id, or CODE:from-event as LIN006:e-12)", field="finding"
        )
    return Target("finding", finding=found)


def _supersedes(run: Run, ref: Any, kind: str) -> str | None:
    if ref in (None, ""):
        return None
    earlier = _event(run, ref, "supersedes")
    if earlier.kind != kind:
        raise AnnotationRefused(f"supersedes must name an earlier {kind} event of this run", field="supersedes")
    return earlier.event_id


@dataclass
class Appended:
    event: Event
    masked: list[dict[str, str]] = field(default_factory=list)


def _append(run: Run, kind: str, fields: dict[str, Any], *, user: Any, request: Any = None) -> Appended:
    """Append one annotation event after the run's last (its seq the next, its id `ann-<seq>`), its references as edges
    like an imported event's, the run's counts with it; audited. Everything typed passes the storage gate first."""
    findings: list[dict[str, str]] = []
    masked = gate.gate_json(fields, where=f"annotation of {run.run_id}", findings=findings)
    body_fields = masked.value
    now = datetime.now(UTC)
    for attempt in range(3):
        try:
            with transaction.atomic():
                locked = Run.objects.select_for_update().only("pk", "last_logical_at").get(pk=run.pk)
                last = Event.objects.filter(run=locked).aggregate(seq=Coalesce(Max("seq"), Value(0)))["seq"]
                seq = last + 1
                event_id = f"ann-{seq}"
                while Event.objects.filter(run=locked, event_id=event_id).exists():
                    event_id += "x"
                # Scenario time stands still after the run: its last logical time. The wall clock is when.
                logical = locked.last_logical_at or now
                body = {
                    "seq": seq,
                    "id": event_id,
                    "kind": kind,
                    "at": {"logical": _iso(logical), "wall": _iso(now)},
                    "attempt": None,
                    **body_fields,
                }
                stored = Event.objects.create(
                    run=locked, seq=seq, event_id=event_id, kind=kind, logical_at=logical, wall_at=now, body=body
                )
                _edges(locked, stored, body)
                Run.objects.filter(pk=run.pk).update(event_count=F("event_count") + 1)
                counts = dict(Run.objects.filter(pk=run.pk).values_list("kind_counts", flat=True).get() or {})
                counts[kind] = counts.get(kind, 0) + 1
                Run.objects.filter(pk=run.pk).update(kind_counts=counts)
                run.kind_counts, run.event_count = counts, last + 1 if run.event_count == last else run.event_count + 1
                audit_record(
                    actor=user,
                    action="run.annotated",
                    target=run.run_id,
                    detail={"event": event_id, "kind": kind, "masked": len(findings)},
                    request=request,
                )
        except IntegrityError:  # another annotation took the seq first (SQLite's deferred lock): the next one
            if attempt == 2:
                raise AnnotationRefused("the run was annotated by someone else at this moment: try again") from None
            continue
        return Appended(stored, masked=[{k: f[k] for k in ("path", "rule") if k in f} for f in findings])
    raise AssertionError("unreachable")


def _iso(at: datetime) -> str:
    return at.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _edges(run: Run, source: Event, body: dict[str, Any]) -> None:
    refs = [(path, target) for path, target in v.references(body) if path != "attempt"]
    if not refs:
        return
    targets = {
        e.event_id: e.pk
        for e in Event.objects.filter(run=run, event_id__in={t for _, t in refs}).only("pk", "event_id")
    }
    objects = {
        o.ref: (o.pk, o.introduced_by_id) for o in RunObject.objects.filter(run=run, ref__in={t for _, t in refs})
    }
    rows = []
    for path, target in refs:
        obj = objects.get(target)
        rows.append(
            Edge(
                run=run,
                source=source,
                field=path[:300],
                target_ref=target[:200],
                target_event_id=obj[1] if obj else targets.get(target),
                target_object_id=obj[0] if obj else None,
            )
        )
    Edge.objects.bulk_create(rows)


def annotation_record(
    run: Run,
    *,
    user: Any,
    annotation: Any,
    target: Target,
    name: Any = None,
    value: Any = None,
    scale: Any = None,
    text: Any = None,
    supersedes: Any = None,
    request: Any = None,
) -> Appended:
    """A score, a label or a comment on `target`, by `user` (who may annotate: the caller checked)."""
    if annotation not in v.ANNOTATION_TYPES:
        raise AnnotationRefused(f"annotation must be one of {' | '.join(v.ANNOTATION_TYPES)}", field="annotation")
    fields: dict[str, Any] = {"annotation": annotation, **target.fields()}
    if annotation == "score":
        fields["name"] = _text(name, "name", limit=NAME_MAX, required=True)
        fields["value"], fields["scale"] = _score(value, _text(scale, "scale", limit=NAME_MAX))
    elif annotation == "label":
        fields["name"] = _text(name, "name", limit=NAME_MAX, required=True)
    comment = _text(text, "text", limit=TEXT_MAX, required=annotation == "comment")
    if comment:
        fields["text"] = comment
    earlier = _supersedes(run, supersedes, "annotation.recorded")
    if earlier:
        fields["supersedes_id"] = earlier
    fields["author"] = user.get_username()
    fields["author_role"] = _author_role(user)
    return _append(run, "annotation.recorded", fields, user=user, request=request)


def _value_text(value: Any, name: str) -> Any:
    if value is None or isinstance(value, bool | int | float):
        return value
    return _text(value, name, limit=VALUE_MAX, required=True)


def correction_record(
    run: Run,
    *,
    user: Any,
    event: Any,
    field_name: Any,
    corrected: Any,
    basis: Any,
    rationale: Any,
    supersedes: Any = None,
    request: Any = None,
) -> Appended:
    """A correction of one recorded fact of `event`: its `field_name` was `corrected`, not what the event records, on
    the events `basis` names. The event keeps what it recorded (the correction says what it recorded, too)."""
    subject = _event(run, event, "event")
    name = _text(field_name, "field", limit=NAME_MAX, required=True)
    assert name is not None
    if name in v.ENVELOPE:
        raise AnnotationRefused(f"field {name!r} is the event's identity, not a recorded fact", field="field")
    body = subject.body if isinstance(subject.body, dict) else {}
    recorded = body.get(name)
    if name not in body:
        raise AnnotationRefused(f"event {subject.event_id} records no field {name!r}", field="field")
    spec = v.KINDS.get(subject.kind, {}).get(name)
    corrected = _value_text(corrected, "corrected")
    if spec is not None and spec.enum is not None and corrected not in spec.enum:
        raise AnnotationRefused(
            f"corrected must be one of {' | '.join(spec.enum)} for {subject.kind}.{name}", field="corrected"
        )
    if corrected == recorded:
        raise AnnotationRefused("corrected is what the event recorded: nothing to correct", field="corrected")
    refs = basis if isinstance(basis, list) else [b for b in str(basis or "").replace(",", " ").split() if b]
    if not refs:
        raise AnnotationRefused("basis must name at least one event the correction rests on", field="basis")
    if len(refs) > BASIS_MAX:
        raise AnnotationRefused(f"basis names at most {BASIS_MAX} events", field="basis")
    basis_ids = [_event(run, ref, "basis").event_id for ref in refs]
    fields: dict[str, Any] = {
        "subject": subject.event_id,
        "field": name,
        "recorded": recorded if not isinstance(recorded, dict | list) else None,
        "corrected": corrected,
        "basis_ids": list(dict.fromkeys(basis_ids)),
        "rationale": _text(rationale, "rationale", limit=TEXT_MAX, required=True),
    }
    earlier = _supersedes(run, supersedes, "annotation.correction")
    if earlier:
        fields["supersedes_id"] = earlier
    fields["author"] = user.get_username()
    fields["author_role"] = _author_role(user)
    return _append(run, "annotation.correction", fields, user=user, request=request)


def annotate(run: Run, data: dict, *, user: Any, request: Any = None) -> Appended:
    """One door's input (the API's, the command's, the page's: `annotation` score | label | comment | correction
    and its fields) to the service: AnnotationRefused (one line) when bad."""
    kind = data.get("annotation")
    if kind == "correction":
        return correction_record(
            run,
            user=user,
            event=data.get("event"),
            field_name=data.get("field"),
            corrected=data.get("corrected"),
            basis=data.get("basis"),
            rationale=data.get("rationale"),
            supersedes=data.get("supersedes"),
            request=request,
        )
    target = target_resolve(run, target=data.get("target"), event=data.get("event"), finding=data.get("finding"))
    return annotation_record(
        run,
        user=user,
        annotation=kind,
        target=target,
        name=data.get("name"),
        value=data.get("value"),
        scale=data.get("scale"),
        text=data.get("text"),
        supersedes=data.get("supersedes"),
        request=request,
    )


# --- reading -------------------------------------------------------------------------------------------------------


@dataclass
class Annotation:
    """One annotation event as pages and answers read it."""

    event: Event
    superseded_by: str = ""

    @property
    def body(self) -> dict[str, Any]:
        return self.event.body if isinstance(self.event.body, dict) else {}

    @property
    def id(self) -> str:
        return self.event.event_id

    @property
    def is_correction(self) -> bool:
        return self.event.kind == "annotation.correction"

    @property
    def annotation(self) -> str:
        return "correction" if self.is_correction else str(self.body.get("annotation", ""))

    @property
    def target(self) -> str:
        if self.is_correction or self.body.get("subject"):
            return "event"
        return "finding" if isinstance(self.body.get("finding"), dict) else "run"

    @property
    def finding(self) -> dict[str, Any]:
        found = self.body.get("finding")
        return found if isinstance(found, dict) else {}

    def as_json(self) -> dict[str, Any]:
        b = self.body
        out: dict[str, Any] = {
            "id": self.id,
            "seq": self.event.seq,
            "kind": self.event.kind,
            "annotation": self.annotation,
            "target": self.target,
            "subject": b.get("subject"),
            "finding": b.get("finding"),
            "author": b.get("author"),
            "author_role": b.get("author_role"),
            "at": _iso(self.event.wall_at),
            "supersedes": b.get("supersedes_id"),
            "superseded_by": self.superseded_by or None,
        }
        keys = (
            ("field", "recorded", "corrected", "basis_ids", "rationale")
            if self.is_correction
            else ("name", "value", "scale", "text")
        )
        out.update({k: b.get(k) for k in keys})
        return out


def _read(events: list[Event]) -> list[Annotation]:
    out = [Annotation(e) for e in events]
    by_id = {a.id: a for a in out}
    for a in out:
        earlier = by_id.get(str(a.body.get("supersedes_id") or ""))
        if earlier is not None:
            earlier.superseded_by = a.id
    return out


def run_annotations(run: Run, *, limit: int = ANNOTATIONS_SHOWN, offset: int = 0) -> list[Annotation]:
    """The run's annotations and corrections in the order they were made (one query on the (run, kind, seq) index)."""
    if not any((run.kind_counts or {}).get(k) for k in v.ANNOTATION_KINDS):
        return []  # the count is a column: a run nobody annotated costs no query
    rows = Event.objects.filter(run=run, kind__in=v.ANNOTATION_KINDS).order_by("seq")[offset : offset + limit]
    return _read(list(rows))


def correctable_fields(event: Event) -> list[str]:
    """The recorded facts of `event` a correction may name: its scalar fields, the envelope left out."""
    body = event.body if isinstance(event.body, dict) else {}
    spec = v.KINDS.get(event.kind, {})
    names = [k for k, val in body.items() if k not in v.ENVELOPE and not isinstance(val, dict | list)]
    # The enumerated facts first (an outcome, a decision, a state): what a reviewer most often says was otherwise.
    first = ("outcome", "decision", "completion", "state", "stage")
    names.sort(key=lambda k: (k not in first, not (spec.get(k) is not None and spec[k].enum)))
    return names[:30]


def corrected_events(run: Run, event_pks: list[int]) -> set[int]:
    """Which of these events (the trace's window) a correction names as its subject: one query through the edges, none
    for a run nobody corrected."""
    if not event_pks or not (run.kind_counts or {}).get("annotation.correction"):
        return set()
    return set(
        Edge.objects.filter(
            target_event_id__in=event_pks, field="subject", source__kind="annotation.correction"
        ).values_list("target_event_id", flat=True)
    )


def annotation_total(run: Run) -> int:
    return sum((run.kind_counts or {}).get(k, 0) for k in v.ANNOTATION_KINDS)


def event_annotations(run: Run, event: Event) -> list[Annotation]:
    """The annotations and corrections naming `event` (as their subject, basis or finding's end): one query through
    the edges that point at it."""
    if not annotation_total(run):
        return []
    rows = (
        Event.objects.filter(run=run, kind__in=v.ANNOTATION_KINDS, edges_out__target_event=event)
        .distinct()
        .order_by("seq")[:PANEL_SHOWN]
    )
    return _read(list(rows))
