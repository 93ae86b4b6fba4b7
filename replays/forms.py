"""The launch forms of the three buttons, and the missing-fixture actions."""

from typing import Any, cast

from django import forms

from n17q_engine.package import vary_value_problem


class LaunchForm(forms.Form):
    """Inspect recorded run / Replay in fixtures: nothing to choose but the scenario version (the run's recorded
    version by default). `scenarios` are (ref, "ref — label") pairs from `replays.launch.launch_options`."""

    scenario = forms.ChoiceField(required=False, label="Scenario version")

    def __init__(self, *args, scenarios: list[tuple[str, str]], default: str | None, **kwargs):
        super().__init__(*args, **kwargs)
        self.choice_field("scenario").choices = list(scenarios) or [("", "none held")]
        if default:
            self.fields["scenario"].initial = default

    def vary(self) -> dict[str, str]:
        return {}

    def choice_field(self, name: str) -> forms.ChoiceField:
        return cast(forms.ChoiceField, self.fields[name])


class DeciderSelect(forms.Select):
    """A select whose options named in `disabled` cannot be chosen (a registered agent whose folder changed: its
    label says why)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.disabled: set[str] = set()

    def create_option(self, name: str, value: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
        option = super().create_option(name, value, *args, **kwargs)
        if str(value) in self.disabled:
            option["attrs"]["disabled"] = True
        return option


class CounterfactualForm(LaunchForm):
    """Exactly one declared variable (n17q_engine.package.VARY_KEYS) and the checkpoint to branch from."""

    variable = forms.ChoiceField(widget=forms.RadioSelect, label="The one variable to change")
    policy = forms.ChoiceField(required=False, label="Policy revision")
    decider = forms.ChoiceField(required=False, label="Decider", widget=DeciderSelect)
    # Every recorded approval at once (`approved` / `rejected`), or one recorded human input varied to another
    # choice (`<event id>=<choice>`, the variable `human.<event id>`); `launch.human_choices` lists them.
    human = forms.ChoiceField(
        required=False, label="Human choice", choices=[("approved", "approved"), ("rejected", "rejected")]
    )
    fault = forms.ChoiceField(required=False, label="Fault stage (tool: stage)")
    clock = forms.CharField(required=False, label="Clock start (ISO-8601)", max_length=40)
    budget_resource = forms.ChoiceField(required=False, label="Budget resource")
    budget_amount = forms.CharField(required=False, label="Budget limit", max_length=20)
    delay_tool = forms.ChoiceField(required=False, label="Visibility delay of (mutation tool)")
    delay_s = forms.CharField(required=False, label="Delay (seconds)", max_length=20)
    checkpoint = forms.ChoiceField(label="From checkpoint")
    # An agent decider's live model (issues 18, 33): one of the approved model connections, chosen by name. Nothing
    # typed here becomes a URL or a variable name: the connection names its endpoint and its one credential reference,
    # and a name that is not an approved one's is not a choice (Django refuses it as "not one of the available").
    # Issue 34: never one option among the diagnostic variables: the page offers it apart, as its own kind of run.
    model_connection = forms.ChoiceField(
        required=False, label="Fresh comparison run (live model, not reproducible): approved model connection"
    )

    def __init__(self, *args, choices: dict[str, list[tuple[str, str]]], **kwargs):
        super().__init__(*args, **kwargs)
        from replays.launch import VARIABLES

        self.choice_field("variable").choices = list(VARIABLES.items())
        for name in ("policy", "decider", "fault", "budget_resource", "delay_tool", "checkpoint"):
            self.choice_field(name).choices = choices.get(name, [])
        if "human" in choices:
            self.choice_field("human").choices = choices["human"]
        self._add_agents()
        self._add_model_connections()

    def _add_model_connections(self) -> None:
        from fixtures_review.connections import approved_model_connections

        self.choice_field("model_connection").choices = [
            ("", "none: a counterfactual replay, the model answering from fixtures"),
            *((c.name, f"{c.name} ({c.endpoint_host}:{c.endpoint_port})") for c in approved_model_connections()),
        ]

    def _add_agents(self) -> None:
        """Each registered agent as the decider `agent:<name>` (issue 18); one whose folder no longer matches its
        pinned digest is shown disabled with the reason, and refused if posted anyway."""
        from replays.agents import agent_choices

        field = self.choice_field("decider")
        held = cast(list[tuple[str, str]], list(cast(Any, field.choices)))
        known = {str(value) for value, _label in held}
        agents = [a for a in agent_choices() if a[0] not in known]
        field.choices = [*held, *((value, label) for value, label, _why in agents)]
        self.unavailable_agents = {value: why for value, _label, why in agents if why}
        cast(DeciderSelect, field.widget).disabled = set(self.unavailable_agents)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        variable = data.get("variable")
        human_input, _, human_choice = (data.get("human") or "").rpartition("=")
        values = {
            "policy": ("policy", data.get("policy")),
            "decider": ("decider", data.get("decider")),
            "human": (f"human.{human_input}", human_choice) if human_input else ("human", data.get("human")),
            "fault": ("fault", data.get("fault")),
            "clock": ("clock", (data.get("clock") or "").strip()),
            "budget": (f"budget.{data.get('budget_resource')}", (data.get("budget_amount") or "").strip()),
            "delay": (f"delay.{data.get('delay_tool')}", (data.get("delay_s") or "").strip()),
        }
        if variable == "decider" and data.get("decider") in self.unavailable_agents:
            why = self.unavailable_agents[data["decider"]]
            raise forms.ValidationError(f"{data['decider']} cannot run: {why}")
        agent_decider = variable == "decider" and str(data.get("decider") or "").startswith("agent:")
        if data.get("model_connection") and not agent_decider:
            raise forms.ValidationError("A live model connection is for an agent decider only.")
        if variable in values:
            key, value = values[variable]
            if not value or key.endswith("."):
                raise forms.ValidationError(f"Give a value for the {variable} you chose to change.")
            problem = vary_value_problem(key, value)
            if problem:
                raise forms.ValidationError(problem)
            data["_vary"] = {key: value}
        return data

    def vary(self) -> dict[str, str]:
        return dict(self.cleaned_data.get("_vary") or {})

    def chosen_model_connection(self) -> str | None:
        """The chosen approved model connection's name, or None: model fixtures. `replay_create` resolves it again
        (it may have been retired since the form was drawn)."""
        return self.cleaned_data.get("model_connection") or None


class ExcludeToolForm(forms.Form):
    reason = forms.CharField(
        label="Why the scenario cannot model this tool", max_length=500, widget=forms.Textarea(attrs={"rows": 3})
    )


class CopySimilarForm(forms.Form):
    like_fixture = forms.CharField(required=False, max_length=200)


class ModelAnswerForm(forms.Form):
    """The missing-fixture page's "Answer this model request" (issue 36): the assistant's text and/or tool calls,
    or a whole chat completion (or assistant message) as JSON; or, `copy_similar`, none of them."""

    content = forms.CharField(
        required=False, label="The assistant's answer (text)", widget=forms.Textarea(attrs={"rows": 4})
    )
    tool_calls = forms.CharField(
        required=False,
        label='Tool calls, as JSON (e.g. [{"name": "shell.run", "arguments": {"argv": ["pytest"]}}])',
        widget=forms.Textarea(attrs={"rows": 3}),
    )
    answer = forms.CharField(
        required=False,
        label="Or a whole chat completion or assistant message, as JSON",
        widget=forms.Textarea(attrs={"rows": 4}),
    )
    copy_similar = forms.BooleanField(required=False)
