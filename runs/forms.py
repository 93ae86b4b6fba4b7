from django import forms

from .models import Environment, Mode


class RunFilterForm(forms.Form):
    q = forms.CharField(
        required=False,
        label="Search",
        max_length=200,
        help_text="a run's id or title, its task, a tool it called or a destination it meant to reach",
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


class BundleUploadForm(forms.Form):
    bundle = forms.FileField(
        label="Run file",
        help_text="A run bundle as .zip or .tar.gz (n17q.run-bundle/1), an OTLP trace file (JSON or protobuf) or an "
        "Inspect AI log (.eval or .json)",
    )
