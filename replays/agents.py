"""Registered agents (issue 18): an admin registers an agent program; a counterfactual runs it as `agent:<name>`.

`agent_register` checks the folder and the command, pins the digest of the folder's files (`folder_digest`), and,
when the agent names Python requirements, builds its own read-only environment from the package registry in the
data folder (`n17q_engine.agent.environment`). An agent shipped as a wheel (a `.whl` instead of a folder) is
checked (`n17q_engine.agent.wheel`: a zip, a wheel's file name, its dist-info, the entry command it provides),
copied into the data folder and unpacked with its `Requires-Dist` from the registry into its own environment;
the wheel's sha256 and the environment's digest are pinned and checked before every launch.

Registration runs nothing of the agent's (issue 33): this is called by the admin form in the web process and by
`register_agent`, so an environment is built from wheels by copying bytes, and no interpreter that would process
the agent's `.pth` or `sitecustomize` is started (docs/agents.md, "What registration runs on the host").

`agent_status` says whether a registration can still run (its folder or wheel unchanged, its environment there and
unchanged); the counterfactual form offers only those that can, the others disabled with the reason, and a launch
of one that cannot is refused. `agent_spec` is what the worker hands the engine.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction

from accounts.audit import audit_record
from n17q_engine.agent.environment import Environment, build_environment, remove_environment, requirement_lines
from n17q_engine.agent.spec import NAME_RE, AgentError, AgentSpec, folder_digest
from n17q_engine.agent.wheel import entry_check, inspect_wheel

from .models import RegisteredAgent

PREFIX = "agent:"
NAME_CHARS = RegisteredAgent._meta.get_field("name").max_length or 40


class AgentRefused(ValueError):
    """An agent that cannot be registered as given; one line."""


def agent_environments() -> str:
    return str(settings.DATA_DIR / "agents")


def agent_register(
    name: str, folder: str, command: list[str], *, requirements: str = "", user: Any = None, replace: bool = False
) -> RegisteredAgent:
    """Register an agent; see the module docstring. Raises AgentRefused (nothing stored) for anything wrong.

    A name is registered once, unless `replace`: then the registration is a new version of it (the newest is what
    `agent:<name>` means from now on; the older ones stay, for the replays that ran them)."""
    if not NAME_RE.match(name or "") or len(name) > NAME_CHARS:
        raise AgentRefused(f"agent name {name!r}: up to {NAME_CHARS} lower-case letters, digits, '.', '_' or '-'")
    newest = RegisteredAgent.objects.filter(name=name).order_by("-version").values_list("version", flat=True).first()
    if newest is not None and not replace:
        raise AgentRefused(
            f"agent {name!r} is registered already (version {newest}): register it with --replace to make version "
            f"{newest + 1}, or choose another name"
        )
    version = (newest or 0) + 1
    if folder and os.path.isabs(folder) and (folder.endswith(".whl") or os.path.isfile(folder)):
        return _register_wheel(name, folder, command, requirements=requirements, user=user, version=version)
    if not folder or not os.path.isabs(folder) or not os.path.isdir(folder):
        raise AgentRefused(f"agent folder {folder!r}: an absolute path to a folder (or a .whl) on the worker's disk")
    folder = os.path.normpath(folder)
    if not command or not all(isinstance(a, str) and a and "\0" not in a for a in command):
        raise AgentRefused("agent command: a non-empty list of arguments, e.g. python agent.py")
    head = command[0]
    if head != "python":
        path = head if os.path.isabs(head) else os.path.normpath(os.path.join(folder, head))
        if not os.path.isabs(head) and not path.startswith(folder + os.sep):
            raise AgentRefused(f"agent command {head!r}: a path inside the folder, an absolute path, or python")
        if not os.path.isfile(path) or not os.access(path, os.X_OK):
            raise AgentRefused(f"agent command {head!r}: {path} is not an executable file")
    try:
        digest = folder_digest(folder)
        lines = requirement_lines(requirements or "")
    except AgentError as exc:
        raise AgentRefused(str(exc)) from None
    env: Environment | None = None
    if lines:
        dest = os.path.join(agent_environments(), f"{name}-{digest[7:19]}-{secrets.token_hex(4)}")
        try:
            env = build_environment(requirements, dest)
        except AgentError as exc:
            raise AgentRefused(str(exc)) from None
    agent = RegisteredAgent(
        name=name,
        version=version,
        folder=folder,
        command=list(command),
        digest=digest,
        requirements="\n".join(lines),
        requirements_digest=env.requirements_digest if env else "",
        environment=env.path if env else "",
        installed=list(env.installed) if env else [],
        environment_digest=env.digest if env else "",
        registered_by=user if getattr(user, "is_authenticated", False) else None,
    )
    return _save(agent, user, env.path if env else None, {"requirements": lines})


def _register_wheel(
    name: str, wheel: str, command: list[str], *, requirements: str, user: Any, version: int = 1
) -> RegisteredAgent:
    """An agent shipped as a wheel: checked, copied into the data folder beside the environment it is installed in
    (its Requires-Dist and any extra requirements from the registry); both pinned by digest."""
    try:
        info = inspect_wheel(wheel)
        entry_check(info, command)
        lines = requirement_lines(requirements or "")
    except AgentError as exc:
        raise AgentRefused(str(exc)) from None
    home = os.path.join(agent_environments(), f"{name}-{info.digest[7:19]}-{secrets.token_hex(4)}")
    folder = os.path.join(home, "wheel")
    try:
        os.makedirs(folder)
        shutil.copyfile(wheel, os.path.join(folder, info.filename))
        copied = AgentSpec(name, folder, tuple(command), info.digest, sys.prefix, wheel=info.filename)
        env = build_environment("\n".join(lines), os.path.join(home, "env"), wheel=os.path.join(folder, info.filename))
        os.chmod(os.path.join(folder, info.filename), 0o444)
        os.chmod(folder, 0o555)
        copied.check()  # the copy is the wheel that was inspected
    except (AgentError, OSError) as exc:
        remove_environment(home)
        raise AgentRefused(str(exc)) from None
    agent = RegisteredAgent(
        name=name,
        version=version,
        folder=folder,
        command=list(command),
        digest=info.digest,
        wheel=info.filename,
        requirements="\n".join(lines),
        requirements_digest=env.requirements_digest,
        environment=env.path,
        installed=list(env.installed),
        environment_digest=env.digest,
        registered_by=user if getattr(user, "is_authenticated", False) else None,
    )
    return _save(agent, user, home, {"wheel": info.filename, "requires": list(info.requires), "requirements": lines})


def _save(agent: RegisteredAgent, user: Any, built: str | None, detail: dict[str, Any]) -> RegisteredAgent:
    """Check the registration as the engine will run it, then store it with its audit entry; on a refusal the
    environment built for it is removed (nothing is registered)."""
    try:
        agent_spec(agent).check()
        with transaction.atomic():
            agent.save()
            audit_record(
                actor=user,
                action="agent.register",
                target=agent.decider,
                detail={
                    "version": agent.version,
                    "folder": agent.folder,
                    "command": list(agent.command),
                    "digest": agent.digest,
                    "environment_digest": agent.environment_digest or None,
                    **detail,
                },
            )
    except (AgentError, IntegrityError) as exc:
        if built is not None:
            remove_environment(built)
        raise AgentRefused(
            str(exc)
            if isinstance(exc, AgentError)
            else f"agent {agent.name!r} version {agent.version} is registered already (registered meanwhile)"
        ) from None
    return agent


def agent_spec(agent: RegisteredAgent) -> AgentSpec:
    """What the engine runs: the folder, command, pinned digest, and its environment (the worker's own when the
    agent named no requirements)."""
    return AgentSpec(
        agent.name,
        agent.folder,
        tuple(agent.command),
        agent.digest,
        agent.environment or sys.prefix,
        wheel=agent.wheel,
        environment_digest=agent.environment_digest,
    )


def agent_status(agent: RegisteredAgent) -> str:
    """Why the agent cannot run now (its folder changed or is gone, its environment is gone), or "" when it can."""
    try:
        agent_spec(agent).check()
    except AgentError as exc:
        return str(exc)
    return ""


def agent_for(decider: str | None, version: int | None = None) -> RegisteredAgent | None:
    """The registration a decider value `agent:<name>` names: its newest version, or `version` (a replay's, as
    launched). None: not an agent decider, or none by that name (and version)."""
    if not decider or not decider.startswith(PREFIX):
        return None
    found = RegisteredAgent.objects.filter(name=decider[len(PREFIX) :])
    if version is not None:
        return found.filter(version=version).first()
    return found.order_by("-version").first()


def agent_check(decider: str, version: int | None = None) -> RegisteredAgent:
    """The registration of `agent:<name>` (newest, or `version`), if it can run; AgentRefused in one line otherwise."""
    agent = agent_for(decider, version)
    if agent is None and version is not None:
        raise AgentRefused(f"{decider} version {version} is no longer registered")
    if agent is None:
        raise AgentRefused(f"unknown decider {decider!r}: no agent is registered under that name")
    why = agent_status(agent)
    if why:
        raise AgentRefused(f"{decider} cannot run: {why}")
    return agent


def agent_choices() -> list[tuple[str, str, str]]:
    """(decider value, label, why it cannot run or "") for every registered agent, by name."""
    out = []
    seen: set[str] = set()
    for agent in RegisteredAgent.objects.order_by("name", "-version"):  # the newest version of each name
        if agent.name in seen:
            continue
        seen.add(agent.name)
        why = agent_status(agent)
        label = (
            f"{agent.decider} — your agent, version {agent.version}, {agent.digest[:19]}…, model from model fixtures"
        )
        out.append((agent.decider, f"{agent.decider} — unavailable: {why}" if why else label, why))
    return out


def agent_json(agent: RegisteredAgent) -> dict[str, Any]:
    return {
        "name": agent.name,
        "version": agent.version,
        "decider": agent.decider,
        "folder": agent.folder,
        "command": list(agent.command),
        "digest": agent.digest,
        "requirements": agent.requirements.splitlines(),
        "requirements_digest": agent.requirements_digest or None,
        "environment": agent.environment or None,
        "environment_note": "its own, built from the package registry, read-only"
        if agent.environment
        else "the worker's own Python environment (no requirements named)",
        "wheel": agent.wheel or None,
        "environment_digest": agent.environment_digest or None,
        "installed": list(agent.installed),
        "registered_by": agent.registered_by.get_username() if agent.registered_by else None,
        "registered_at": agent.registered_at.isoformat() if agent.registered_at else None,
        "runnable": not agent_status(agent),
        "why_not": agent_status(agent) or None,
    }
