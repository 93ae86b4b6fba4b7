"""Helpers for the replay-suite tests: run pytest with the plugin in a child process and read its JUnit XML."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from n17q_engine.sandbox import IsolationUnavailable, Limits, run_sandboxed

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "mcp_openai_agent"
CI = os.environ.get("CI", "").lower() == "true"


def isolation_or_skip() -> None:
    try:
        run_sandboxed("n17q_engine.sandbox_child:echo", b"x", allow_degraded=False, limits=Limits(), timeout_s=30)
    except IsolationUnavailable:
        if CI:
            pytest.fail("the sandbox's namespaces cannot be made on this CI machine; agent replays need them")
        pytest.skip("no namespaces on this machine")


def run_pytest(python: str, args: list[str], cwd: Path, *, env: dict[str, str] | None = None, plugin_flag: bool = True):
    """pytest in a child process, in `cwd` with an empty ini of its own (so the repository's pytest settings and
    conftest are not read), the plugin named explicitly unless `plugin_flag` is False (its entry point then)."""
    (cwd / "pytest.ini").write_text("[pytest]\n")
    full = [python, "-m", "pytest", "-c", str(cwd / "pytest.ini"), "--rootdir", str(cwd), "-p", "no:cacheprovider"]
    if plugin_flag:
        full += ["-p", "n17q_engine.pytest_plugin"]
    child_env = {**os.environ, **(env or {})}
    if not plugin_flag:  # an installed distribution's own entry point, and nothing of this checkout
        for name in ("PYTHONPATH", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD", "PYTEST_ADDOPTS"):
            child_env.pop(name, None)
    if plugin_flag:
        child_env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # only the plugin named: no other installed one
        child_env["PYTHONPATH"] = str(REPO)  # this checkout's engine and plugin
    return subprocess.run(full + args, cwd=cwd, env=child_env, capture_output=True, text=True, timeout=900)


def junit_cases(path: Path) -> dict[str, dict]:
    """name -> {"failure": message or None, "properties": {...}} from a JUnit XML file pytest wrote."""
    root = ET.parse(path).getroot()
    out: dict[str, dict] = {}
    for case in root.iter("testcase"):
        failure = case.find("failure")
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        out[str(case.get("name"))] = {
            "failure": None if failure is None else (failure.get("message") or "") + "\n" + (failure.text or ""),
            "error": case.find("error") is not None,
            "skipped": case.find("skipped") is not None,
            "properties": props,
        }
    return out


def broken_copy(tmp: Path, *, drop_model_turn: int) -> Path:
    """The example's suite copied into `tmp` with story 001's scenario missing one model answer (the turn-th), plus
    the same story under a second case name whose scenario is whole: one case passes, one fails."""
    root = tmp / "example"
    shutil.copytree(EXAMPLE, root, ignore=shutil.ignore_patterns("__pycache__"))
    from n17q_engine.package import SCENARIO_FORMAT, build_scenario, read_package

    scenario_dir = root / "stories" / "001-email-delivery" / "scenario"
    package = read_package(scenario_dir, SCENARIO_FORMAT)
    files = {n: json.loads(d) for n, d in package.files.items()}
    kept = [f for f in files["fixtures.json"] if f["id"] != f"model-story-001-{drop_model_turn}"]
    assert len(kept) == len(files["fixtures.json"]) - 1
    files["fixtures.json"] = kept
    broken = root / "stories" / "001-broken" / "scenario"
    build_scenario(files).write_dir(broken)
    (root / "broken.n17q.toml").write_text(
        "[agent]\n"
        'name = "mcp-openai-agent"\nfolder = "agent"\ncommand = ["python", "agent.py"]\n'
        "[[case]]\n"
        'name = "story-001-whole"\nscenario = "stories/001-email-delivery/scenario"\n'
        'run = "stories/001-email-delivery/run.zip"\nbranch_points = ["start"]\n'
        "[[case]]\n"
        'name = "story-001-broken"\nscenario = "stories/001-broken/scenario"\n'
        'run = "stories/001-email-delivery/run.zip"\nbranch_points = ["start"]\n'
    )
    return root / "broken.n17q.toml"


def python_of(prefix: Path) -> str:
    return str(prefix / "bin" / "python") if (prefix / "bin").is_dir() else sys.executable
