from django import forms

from .models import Environment, Mode


class RunFilterForm(forms.Form):
    q = forms.CharField(required=False, label="Run or task id", max_length=200)
    state = forms.CharField(required=False, max_length=30)
    mode = forms.ChoiceField(required=False, choices=[("", "any mode"), *Mode.choices])
    environment = forms.ChoiceField(required=False, choices=[("", "any environment"), *Environment.choices])
    scenario = forms.CharField(required=False, max_length=200)
    findings = forms.ChoiceField(
        required=False, choices=[("", "with or without findings"), ("yes", "with findings"), ("no", "without findings")]
    )


class BundleUploadForm(forms.Form):
    bundle = forms.FileField(help_text="A run bundle as .zip or .tar.gz (n17q.run-bundle/1)")
