"""Replays of an agent as tests (issue 36, point 5): a suite file, each case replayed offline, judged in one place.

A suite (TOML or JSON; docs/replay-in-ci.md) names an agent (folder + command, its Python environment) and cases:
a scenario package (as `manage.py export_package` writes it), the recorded run (as `manage.py export_run` writes
it), the branch points to replay from (`start` and/or checkpoint event ids) and what the run must end as. Each
(case, branch point) is one counterfactual replay whose decider is the agent, run by `run_agent_replay`: inside the
sandbox, never degraded (no namespace: IsolationUnavailable, the case fails), its model answered from the
scenario's `model.chat` fixtures, no network and no credential. `judge` says whether it passed and, if not, why:
the state it ended in, the missing fixtures with their normalized requests, sandbox violations, lineage errors the
recording did not have, and the first divergence from the recorded run (`n17q_engine.divergence`).

Nothing here needs Django or a database: the pytest plugin (`n17q_engine.pytest_plugin`) and the example's
authoring script call it. Every refusal of the suite's own input is a `SuiteError`, one line.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .archive import unpack
from .bundle import BundleError, iter_event_records, parse_manifest, verify_blobs
from .divergence import MissingFixture, first_divergence, missing_fixtures
from .package import SCENARIO_FORMAT, Package, PackageError, build_replay, read_package

STATES = ("completed", "stopped", "failed", "incomplete_test_world")
CASE_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,79}$")
DEFAULT_TIMEOUT_S = 120.0
MAX_RUN_BYTES = 1 << 30
MAX_RUN_MEMBERS = 200_000
# Fixed, so two runs of the same case build byte-identical packages (the replay's ids and clock derive from them).
LAUNCHED_AT = "2026-01-01T00:00:00Z"


class SuiteError(ValueError):
    """A suite that cannot be read or run as written: one line a person can act on."""


@dataclass(frozen=True)
class AgentConfig:
    name: str
    folder: Path
    command: tuple[str, ...]
    environment: str  # a Python environment's prefix; "" = the interpreter running the suite (sys.prefix)


@dataclass(frozen=True)
class Case:
    name: str
    scenario: Path
    run: Path
    branch_points: tuple[str, ...]
    agent: AgentConfig
    expect: str = "completed"
    reason_contains: str = ""
    timeout_s: float = DEFAULT_TIMEOUT_S
    suite: Path = field(default=Path("."))


@dataclass(frozen=True)
class RecordedRun:
    manifest: dict[str, Any]  # the bundle's manifest, without an export's `exported` note
    events: list[dict[str, Any]]
    event_lines: bytes
    blobs: dict[str, bytes]
    expired: dict[str, dict[str, Any]]


# --- the suite file ----------------------------------------------------------------------------------------------


def load_suite(path: Path) -> list[Case]:
    """The cases of a suite file (`.toml` or `.json`). SuiteError, one line, for anything it cannot use."""
    where = str(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SuiteError(f"{where}: cannot read the suite ({exc.strerror or exc})") from None
    try:
        if path.name.endswith(".json"):
            data = json.loads(raw)
        else:
            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise SuiteError(f"{where}: not a valid suite file: {' '.join(str(exc).split())}") from None
    if not isinstance(data, dict):
        raise SuiteError(f"{where}: the suite must be a table (an object)")
    _keys(data, where, {"agent", "case", "timeout_s"})
    base = path.parent
    default_agent = data.get("agent")
    timeout = _timeout(data.get("timeout_s", DEFAULT_TIMEOUT_S), where)
    cases_raw = data.get("case")
    if not isinstance(cases_raw, list) or not cases_raw:
        raise SuiteError(f"{where}: no [[case]] given (a suite names at least one case)")
    cases: list[Case] = []
    for i, item in enumerate(cases_raw, 1):
        at = f"{where}: case {i}"
        if not isinstance(item, dict):
            raise SuiteError(f"{at}: must be a table")
        _keys(item, at, {"name", "scenario", "run", "branch_points", "agent", "expect", "reason_contains", "timeout_s"})
        name = item.get("name")
        if not isinstance(name, str) or not CASE_NAME_RE.match(name):
            raise SuiteError(f"{at}: name must be 1-80 letters, digits, '.', '_' or '-'")
        at = f"{where}: case {name}"
        if any(c.name == name for c in cases):
            raise SuiteError(f"{at}: a second case with this name")
        agent_raw = item.get("agent", default_agent)
        if agent_raw is None:
            raise SuiteError(f"{at}: no agent (give [agent] for the suite or agent = {{...}} for the case)")
        branches = item.get("branch_points", ["start"])
        if (
            not isinstance(branches, list)
            or not branches
            or not all(isinstance(b, str) and b and len(b) <= 200 for b in branches)
        ):
            raise SuiteError(f"{at}: branch_points must be a non-empty list of 'start' and checkpoint event ids")
        if len(set(branches)) != len(branches):
            raise SuiteError(f"{at}: branch_points names a branch point twice")
        expect = item.get("expect", "completed")
        if expect not in STATES:
            raise SuiteError(f"{at}: expect must be one of {', '.join(STATES)}")
        reason = item.get("reason_contains", "")
        if not isinstance(reason, str):
            raise SuiteError(f"{at}: reason_contains must be a string")
        cases.append(
            Case(
                name=name,
                scenario=_path(item.get("scenario"), base, f"{at}: scenario"),
                run=_path(item.get("run"), base, f"{at}: run"),
                branch_points=tuple(branches),
                agent=_agent(agent_raw, base, f"{at}: agent"),
                expect=expect,
                reason_contains=reason,
                timeout_s=_timeout(item.get("timeout_s", timeout), at),
                suite=path,
            )
        )
    return cases


def _keys(data: Mapping[str, Any], where: str, allowed: set[str]) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise SuiteError(f"{where}: unknown key {unknown[0]!r} (known: {', '.join(sorted(allowed))})")


def _timeout(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 10 <= value <= 3600:
        raise SuiteError(f"{where}: timeout_s must be a number of seconds from 10 to 3600")
    return float(value)


def _path(value: Any, base: Path, where: str) -> Path:
    if not isinstance(value, str) or not value:
        raise SuiteError(f"{where}: must be a path (relative to the suite file)")
    path = base / value
    if not path.exists():
        raise SuiteError(f"{where}: {path} does not exist")
    return path


def _agent(value: Any, base: Path, where: str) -> AgentConfig:
    if not isinstance(value, dict):
        raise SuiteError(f"{where}: must be a table {{name, folder, command, environment?}}")
    _keys(value, where, {"name", "folder", "command", "environment"})
    name = value.get("name", "suite-agent")
    from .agent.spec import NAME_RE

    if not isinstance(name, str) or not NAME_RE.match(name):
        raise SuiteError(f"{where}: name must be lower-case letters, digits, '.', '_' or '-'")
    folder = _path(value.get("folder"), base, f"{where}: folder")
    if not folder.is_dir():
        raise SuiteError(f"{where}: folder {folder} is not a folder")
    command = value.get("command")
    if isinstance(command, str):
        command = command.split()
    if not isinstance(command, list) or not command or not all(isinstance(a, str) and a for a in command):
        raise SuiteError(f'{where}: command must be a list of strings, e.g. ["python", "agent.py"]')
    environment = value.get("environment", "")
    if not isinstance(environment, str):
        raise SuiteError(f"{where}: environment must be a path to a Python environment")
    if environment:
        env_path = base / environment
        if not (env_path / "bin" / "python").exists():
            raise SuiteError(f"{where}: environment {env_path} has no bin/python")
        environment = str(env_path.resolve())
    return AgentConfig(name, folder.resolve(), tuple(command), environment)


# --- the inputs: the recorded run and the scenario -----------------------------------------------------------


def read_recorded_run(path: Path) -> RecordedRun:
    """A run bundle as `export_run` writes it (a .zip), or a .tar.gz or a folder, checked as an import checks it:
    the manifest, every event line, every blob's digest and size. SuiteError, one line."""
    tmp: str | None = None
    try:
        if path.is_dir():
            root = path
        else:
            tmp = tempfile.mkdtemp(prefix="n17q-run-")
            root = unpack(path, Path(tmp), max_bytes=MAX_RUN_BYTES, max_members=MAX_RUN_MEMBERS)
        raw_manifest = (root / "manifest.json").read_bytes()
        manifest = json.loads(raw_manifest)
        parsed = parse_manifest(raw_manifest)
        events: list[dict[str, Any]] = []
        lines: list[bytes] = []
        with open(root / "events.jsonl", "rb") as fh:
            for record in iter_event_records(fh):
                events.append(record.event)
                lines.append(record.text.encode() + b"\n")
        blobs = {digest: p.read_bytes() for digest, p in verify_blobs(root, parsed).items()}
    except BundleError as exc:
        raise SuiteError(f"{path}: not a run bundle: {exc}") from None
    except (OSError, ValueError) as exc:
        raise SuiteError(f"{path}: not a run bundle: {' '.join(str(exc).split())}") from None
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    listed = manifest.get("blobs") or {}
    expired = {d: dict(meta["expired"]) for d, meta in listed.items() if isinstance(meta.get("expired"), dict)}
    if expired:
        manifest["blobs"] = {d: {k: v for k, v in meta.items() if k != "expired"} for d, meta in listed.items()}
    manifest.pop("exported", None)  # the export's note: what a reader must know, not part of the run
    return RecordedRun(manifest, events, b"".join(lines), blobs, expired)


def read_scenario(path: Path) -> Package:
    try:
        return read_package(path, SCENARIO_FORMAT)
    except PackageError as exc:
        raise SuiteError(f"{path}: not a scenario package: {exc}") from None


def check_branch_point(run: RecordedRun, branch: str, where: str) -> None:
    if branch == "start":
        return
    event = next((e for e in run.events if e.get("id") == branch), None)
    if event is None or event.get("kind") != "checkpoint":
        found = [e["id"] for e in run.events if e.get("kind") == "checkpoint"]
        raise SuiteError(
            f"{where}: branch point {branch!r} is not a checkpoint event of the recorded run "
            f"(its checkpoints: {', '.join(found) or 'none'}; or 'start')"
        )


# --- one replay --------------------------------------------------------------------------------------------------


def replay_package(branch: str, agent_name: str, scenario: Package, run: RecordedRun) -> Package:
    """The counterfactual a case replays: decider `agent:<name>`, from `branch`. Every field is a function of the
    recorded run, the branch point and the agent's name (not of the case's name or the suite's place), so the same
    story replays with the same ids, and the agent sends the same model requests, on every machine and under any
    case name: the values a replay generates from its id (an execution id in a tool result the agent reads back)
    stay the same, and the model fixtures keep matching."""
    source_id = str(run.manifest.get("run", {}).get("id") or "run")
    slug = re.sub(r"[^A-Za-z0-9._-]", "-", f"{source_id}-{branch}")[:120]
    return build_replay(
        replay_id=f"ci-{slug}",
        run_id=f"{source_id}~ci-{slug}"[:200],
        mode="counterfactual",
        vary={"decider": f"agent:{agent_name}"},
        decider="recorded",
        launched_at=LAUNCHED_AT,
        scenario=scenario,
        source_manifest=run.manifest,
        source_events=run.event_lines,
        source_blobs=run.blobs,
        checkpoint=None if branch == "start" else branch,
        expired_blobs=run.expired or None,
    )


@dataclass
class Outcome:
    """What one replay of a case did, and the verdict."""

    case: str
    branch: str
    passed: bool
    state: str  # the final run.state, or "" when no run came out
    reason: str
    problems: list[str]
    missing: list[MissingFixture]
    divergence: str
    events: list[dict[str, Any]]
    output: Any = None  # the ReplayOutput, when there was one
    agent_stderr: str = ""

    def message(self) -> str:
        """The failure message: the problems, the missing fixtures, the first divergence."""
        head = f"{self.case} [{self.branch}]: " + "; ".join(self.problems)
        lines = [head]
        lines += [m.describe() for m in self.missing]
        lines.append(self.divergence or "no divergence from the recorded run in decisions or tool calls")
        if self.agent_stderr:
            lines.append("the agent's last words on stderr: " + self.agent_stderr)
        return "\n".join(lines)


def agent_copy(config: AgentConfig, into: Path) -> Any:
    """The agent as a registration: its folder copied where the sandbox's unprivileged uid can read it, pinned by
    its digest, run in `config.environment` (default: this interpreter's environment)."""
    from .agent.spec import AgentSpec, folder_digest

    folder = into / "agent"
    shutil.copytree(config.folder, folder, ignore=shutil.ignore_patterns("__pycache__"), symlinks=True)
    for path in [into, folder, *folder.rglob("*")]:
        if not path.is_symlink():
            path.chmod(0o755)
    # Resolved: the sandbox binds the environment at its real path, so a path through a symlink would not exist there.
    environment = os.path.realpath(config.environment or sys.prefix)
    return AgentSpec(config.name, str(folder), config.command, folder_digest(folder), environment)


def run_case(
    case: Case,
    branch: str,
    *,
    run: RecordedRun | None = None,
    scenario: Package | None = None,
    keep: Path | None = None,
    on_event: Callable[[dict[str, Any]], None] | None = None,
) -> Outcome:
    """Replay `case` from `branch` with its agent, in the sandbox, and judge it. SuiteError for unusable input;
    a sandbox that cannot be made (IsolationUnavailable) is a failed case, never a degraded run."""
    from .agent.entry import run_agent_replay
    from .agent.spec import AgentError
    from .replay import ReplayError, ReplayOutput, iter_output_events
    from .sandbox import IsolationUnavailable, SandboxError

    run = run if run is not None else read_recorded_run(case.run)
    scenario = scenario if scenario is not None else read_scenario(case.scenario)
    check_branch_point(run, branch, f"{case.suite}: case {case.name}")
    try:
        package = replay_package(branch, case.agent.name, scenario, run)
    except PackageError as exc:
        raise SuiteError(f"{case.suite}: case {case.name}: the replay package: {exc}") from None
    with tempfile.TemporaryDirectory(prefix="n17q-agent-") as tmp:
        try:
            agent = agent_copy(case.agent, Path(tmp))
            result = run_agent_replay(package, agent, timeout_s=case.timeout_s, on_event=on_event)
        except IsolationUnavailable as exc:
            return _refused(case, branch, f"the sandbox's kernel boundary cannot be made here ({exc}); an agent "
                            "replay never runs degraded")  # fmt: skip
        except (AgentError, SandboxError) as exc:
            return _refused(case, branch, f"the agent could not be run: {exc}")
    stderr_tail = " | ".join((result.stderr or "").strip().splitlines()[-5:])
    if result.returncode != 0 or not result.output:
        why = "timed out" if result.timed_out else f"exit status {result.returncode}"
        return _refused(case, branch, f"the replay produced no run ({why})", stderr_tail[-1500:])
    try:
        output = ReplayOutput.from_wire(result.output)
    except ReplayError as exc:
        return _refused(case, branch, f"the replay's output was unreadable: {exc}")
    events = list(iter_output_events(output))
    if keep is not None:
        target = keep / f"{case.name}--{re.sub(r'[^A-Za-z0-9._-]', '-', branch)}"
        shutil.rmtree(target, ignore_errors=True)  # this run's bundle only, never a blob of an earlier one
        output.write_bundle(target)
    outcome = judge(case, branch, run, output.manifest, events, channel=result.events)
    outcome.output = output
    return outcome


def _refused(case: Case, branch: str, problem: str, stderr: str = "") -> Outcome:
    return Outcome(case.name, branch, False, "", "", [problem], [], "", [], agent_stderr=stderr)


def judge(
    case: Case,
    branch: str,
    run: RecordedRun,
    manifest: Mapping[str, Any],
    events: Sequence[dict[str, Any]],
    *,
    channel: Sequence[Mapping[str, Any]] = (),
) -> Outcome:
    """The verdict on one replay. It passes when, all together:

    - its final `run.state` is the case's `expect` (default `completed`) and, when given, its reason contains
      `reason_contains`;
    - no fixture was missing or ambiguous (`fixture.missing`, `fixture.ambiguous`), except in a canary case
      (`expect = "incomplete_test_world"`), where at least one must be: a miss must stop the run, never be served;
    - no sandbox violation was recorded (in the run's log or on the sandbox's event channel);
    - no error-severity lineage finding has a code the recorded run's own findings do not have (a replay may
      keep the recording's findings; it may not introduce one)."""
    from .lineage import check_events

    states = [e for e in events if e.get("kind") == "run.state"]
    final = states[-1] if states else {}
    state, reason = str(final.get("state") or ""), str(final.get("reason") or "")
    problems: list[str] = []
    if state != case.expect:
        problems.append(f"expected run.state {case.expect}, got {state or 'none'}" + (f": {reason}" if reason else ""))
    elif case.reason_contains and case.reason_contains not in reason:
        problems.append(f"the run ended {state}, but its reason does not contain {case.reason_contains!r}: {reason}")
    missing = missing_fixtures(events)
    if case.expect == "incomplete_test_world":  # a fixture-miss canary: the miss must happen, and stop the run
        if not missing and not problems:
            problems.append("expected a missing fixture (a canary case), but none was missing")
    elif missing and not problems:
        problems.append(f"{len(missing)} fixture(s) missing")
    violations: list[Mapping[str, Any]] = [e for e in events if e.get("kind") == "sandbox.violation"]
    violations += [e for e in channel if e.get("event") == "sandbox.violation" and e not in violations]
    if violations:
        first = violations[0]
        problems.append(
            f"{len(violations)} sandbox violation(s), first: {first.get('attempted')} {first.get('target')}"
        )
    try:
        recorded_codes = {f.code for f in check_events(dict(run.manifest["run"]), run.events) if f.severity == "error"}
        introduced = [
            f
            for f in check_events(dict(manifest.get("run") or {}), events)
            if f.severity == "error" and f.code not in recorded_codes
        ]
    except (KeyError, TypeError, ValueError) as exc:  # a log the checker cannot read is a failure, not a pass
        introduced = []
        problems.append(f"the lineage check could not read the replay's log: {exc}")
    if introduced:
        f = introduced[0]
        problems.append(
            f"{len(introduced)} lineage error(s) the recorded run does not have, first: {f.code} {f.from_} -> {f.to}: "
            f"{f.message}"
        )
    divergence = first_divergence(run.events, events)
    return Outcome(
        case=case.name,
        branch=branch,
        passed=not problems,
        state=state,
        reason=reason,
        problems=problems,
        missing=missing,
        divergence=divergence.describe() if divergence else "",
        events=list(events),
    )


def scenario_with_fixtures(scenario: Package, fixtures: Sequence[Mapping[str, Any]]) -> Package:
    """`scenario` with `fixtures` appended to its fixtures.json and the `model.chat` contract added if absent (the
    authoring loop's step: the next run is asked against the answers written so far)."""
    from .agent.model import MODEL_CONTRACT, MODEL_TOOL
    from .package import build_scenario

    files = {n: json.loads(d) for n, d in scenario.files.items()}
    contracts = files.get("contracts.json") or []
    if not any(c.get("tool") == MODEL_TOOL for c in contracts):
        files["contracts.json"] = [*contracts, MODEL_CONTRACT]
    files["fixtures.json"] = [*(files.get("fixtures.json") or []), *fixtures]
    return build_scenario(files)
