"""`{% launch_options run as launch %}`: the run page's replay buttons ask `replays.launch.launch_options`.

A tag rather than a key of the run page's context so that the run page (runs/) needs no knowledge of the replays
app beyond its template; it is evaluated only inside the operator's `can_launch` branch, so a viewer's page costs
no query for it.
"""

from django import template

from replays.launch import LaunchOptions, launch_options
from runs.models import Run

register = template.Library()


@register.simple_tag(name="launch_options")
def launch_options_tag(run: Run) -> LaunchOptions:
    return launch_options(run)
