from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from django import forms

from n17q_engine import vocabulary

from .models import Environment, Mode, RunSummary

CODE = re.compile(r"^LIN\d{3}$")


class DateInput(forms.DateInput):
    input_type = "date"


# A day as the API's schema says it (OpenAPI `date`: ISO 8601 YYYY-MM-DD) and a date input sends it; not the locale's
# other forms (10/25/2006), which a client of the schema would not expect to be accepted.
ISO_DAY = ["%Y-%m-%d"]


class RunFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        label="Search",
        max_length=200,
        help_text="a run's id or title, its task, a tool it called, a destination it meant to reach, a model it "
        "called, or a finding's code or message",
        widget=forms.TextInput(attrs={"type": "search", "aria-describedby": "run-search-hint"}),
    )
    state = forms.CharField(required=False, max_length=30)
    mode = forms.ChoiceField(required=False, choices=[("", "any mode"), *Mode.choices])
    environment = forms.ChoiceField(required=False, choices=[("", "any environment"), *Environment.choices])
    scenario = forms.CharField(required=False, max_length=200)
    findings = forms.ChoiceField(
        required=False, choices=[("", "with or without findings"), ("yes", "with findings"), ("no", "without findings")]
    )
    # Replays (runs with a parent) are counted on their source's row and listed under it only when asked for.
    replays = forms.BooleanField(required=False, label="Show replays")
    # One source and its replays (the link a source's replay count leads to).
    source = forms.CharField(required=False, max_length=200, widget=forms.HiddenInput)

    # The cross-run search (issue 38 §3, runs/search.py): any of these (or `q`) lists every matching run, replays
    # included, newest created first, a page at a time after the cursor `after`.
    tool = forms.CharField(required=False, max_length=200, help_text="a tool whose name starts with this")
    model = forms.CharField(required=False, max_length=200, help_text="a model whose name starts with this")
    code = forms.CharField(required=False, max_length=6, label="Finding code", help_text="a lineage code: LIN012")
    kind = forms.ChoiceField(required=False, choices=[("", "any kind"), *RunSummary.Kind.choices])
    outcome = forms.ChoiceField(required=False, choices=[("", "any outcome"), *RunSummary.Outcome.choices])
    created_from = forms.DateField(required=False, label="Created from", widget=DateInput, input_formats=ISO_DAY)
    created_to = forms.DateField(required=False, label="Created to", widget=DateInput, input_formats=ISO_DAY)
    started_from = forms.DateField(required=False, label="Started from", widget=DateInput, input_formats=ISO_DAY)
    started_to = forms.DateField(required=False, label="Started to", widget=DateInput, input_formats=ISO_DAY)
    tokens_min = forms.IntegerField(required=False, min_value=0, label="Tokens from")
    tokens_max = forms.IntegerField(required=False, min_value=0, label="Tokens to")
    cost_min = forms.DecimalField(required=False, min_value=0, max_digits=20, decimal_places=6, label="Cost from")
    cost_max = forms.DecimalField(required=False, min_value=0, max_digits=20, decimal_places=6, label="Cost to")
    after = forms.CharField(required=False, max_length=80, widget=forms.HiddenInput)

    def clean_code(self) -> str:
        code = self.cleaned_data["code"].strip().upper()
        if code and not CODE.match(code):
            raise forms.ValidationError("a lineage code is LIN and three digits (LIN012)")
        return code

    def clean_after(self) -> tuple[datetime, int] | None:
        raw = self.cleaned_data["after"]
        if not raw:
            return None
        at, _, pk = raw.rpartition("~")
        try:
            when = datetime.fromisoformat(at)
            key = int(pk)
        except ValueError:
            raise forms.ValidationError("not a cursor this list gave") from None
        if when.tzinfo is None:
            raise forms.ValidationError("not a cursor this list gave")
        return when, key

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        for low, high, what in (
            ("created_from", "created_to", "created"),
            ("started_from", "started_to", "started"),
            ("tokens_min", "tokens_max", "tokens"),
            ("cost_min", "cost_max", "cost"),
        ):
            a, b = data.get(low), data.get(high)
            if a is not None and b is not None and a > b:
                self.add_error(high, f"the {what} range ends before it starts")
        return data


SEARCH_FIELDS = (
    "q",
    "tool",
    "model",
    "code",
    "kind",
    "outcome",
    "created_from",
    "created_to",
    "started_from",
    "started_to",
    "tokens_min",
    "tokens_max",
    "cost_min",
    "cost_max",
    "after",
)


def search_asked(data: dict[str, Any]) -> bool:
    """Whether the list is a search (runs/search.py): any of its fields given."""
    return any(data.get(name) not in (None, "") for name in SEARCH_FIELDS)


def form_errors_line(form: forms.Form) -> str:
    """The form's errors as one line: `field: message; ...`."""
    return "; ".join(f"{name}: {' '.join(str(e) for e in errors)}" for name, errors in form.errors.items())


class SpanSearchForm(forms.Form):
    """The event search across runs (runs/search.py: span_search)."""

    tool = forms.CharField(required=False, max_length=200, help_text="a tool whose name starts with this")
    model = forms.CharField(required=False, max_length=200, help_text="a model whose name starts with this")
    kind = forms.ChoiceField(
        required=False, choices=[("", "any kind"), *((k, k) for k in sorted(vocabulary.KINDS))], label="Event kind"
    )
    text = forms.CharField(required=False, max_length=200, label="Text", help_text="anywhere in the event")
    after = forms.CharField(required=False, max_length=80, widget=forms.HiddenInput)

    clean_after = RunFilterForm.clean_after


class BundleUploadForm(forms.Form):
    bundle = forms.FileField(
        label="Run file",
        help_text="A run bundle as .zip or .tar.gz (n17q.run-bundle/1), an OTLP trace file (JSON or protobuf) or an "
        "Inspect AI log (.eval or .json)",
    )
