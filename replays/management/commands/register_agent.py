"""`manage.py register_agent NAME (FOLDER | WHEEL.whl) --command ARG [...] [--requirements FILE] [--replace] --json`.

Registers an agent program as the replay decider `agent:NAME` (issue 18, docs/agents.md): FOLDER on the worker's
disk, its entry command (argv, one --command per argument, or one quoted string split like a shell), the digest of
its files pinned now, and, with --requirements, its own read-only environment built from the package registry.
A WHEEL.whl instead of a folder is installed with its dependencies from the registry into its own read-only
environment; the entry command is one of its console scripts or `python -m MODULE`. A NAME registered already is
refused, unless --replace: then this is its next version (issue 36), and agent:NAME runs the newest.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError

from accounts.cli import JsonCommand
from replays.agents import AgentRefused, agent_json, agent_register


class Command(JsonCommand):
    help = "Register an agent program as a replay decider (agent:NAME), pinned by the digest of its folder."

    def add_arguments(self, parser: Any) -> None:
        super().add_arguments(parser)
        parser.add_argument("name", help="the agent's name; the decider is agent:NAME")
        parser.add_argument(
            "folder",
            help="the agent's folder on the worker's disk, or its wheel (a .whl file); an absolute path",
        )
        parser.add_argument(
            "--command",
            action="append",
            required=True,
            metavar="ARG",
            help="the entry command: 'python agent.py' (the agent's environment's python), a path inside the folder, "
            "or an absolute path; for a wheel, one of its console scripts or 'python -m MODULE'; give it once as "
            "one string, or once per argument",
        )
        parser.add_argument(
            "--replace",
            action="store_true",
            help="NAME is registered already: make this a new version of it (the newest is what agent:NAME runs; "
            "older versions stay, for the replays that ran them)",
        )
        parser.add_argument(
            "--requirements",
            metavar="FILE",
            help="a requirements file (package specifiers only): its own environment is built from the registry",
        )

    def run(self, **options: Any) -> dict[str, Any]:
        given = options["command"]
        try:
            command = shlex.split(given[0]) if len(given) == 1 else list(given)
        except ValueError as exc:
            raise CommandError(f"--command {given[0]!r}: {exc}") from None
        requirements = ""
        if options.get("requirements"):
            try:
                requirements = Path(options["requirements"]).read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError) as exc:
                raise CommandError(f"--requirements {options['requirements']}: {exc}") from None
        try:
            agent = agent_register(
                options["name"], options["folder"], command, requirements=requirements, replace=options["replace"]
            )
        except AgentRefused as exc:
            raise CommandError(str(exc)) from None
        return agent_json(agent)

    def human(self, result: dict[str, Any]) -> str:
        environment = result["environment"] or "the worker's own"
        if result.get("wheel"):
            environment += f" ({result['environment_digest']})"
        source = f"{result['wheel']} in {result['folder']}" if result.get("wheel") else result["folder"]
        return (
            f"registered {result['decider']} version {result['version']}: {source} ({result['digest']}), command "
            f"{shlex.join(result['command'])}, environment {environment}"
        )
