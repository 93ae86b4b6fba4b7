"""Issue 36, point 5, acceptance: the plugin from a fresh virtual environment outside the repository.

The `n17q-replay` wheel (scripts/build_replay_wheel.py) is built, installed with `pip` into a new `python -m venv`
in a temporary folder (its dependencies from the package registry, through pip's cache), with the example agent's
own `openai`; that environment's pytest finds the plugin through its `pytest11` entry point and runs a suite with a
passing case and a broken one (a scenario missing the model answer that makes the agent send). Its JUnit XML has one
passing test case and one failing with the missing fixture and the first divergence.

Needs the package registry: skipped when it cannot be reached, except with CI=true, where that fails.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.engine import replay_ci

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox is Linux-only")


def _build_wheel(out: Path) -> Path:
    done = subprocess.run(
        [sys.executable, str(replay_ci.REPO / "scripts" / "build_replay_wheel.py"), str(out)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return Path(done.stdout.strip())


def _fresh_env(where: Path, wheel: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", str(where)], check=True, capture_output=True, timeout=300)
    python = str(where / "bin" / "python")
    # --no-compile: the environment is used once, by one pytest run; Python compiles what that run imports (pip would
    # compile every module of openai, pydantic and the rest ahead, most of them never imported here).
    install = subprocess.run(
        [python, "-m", "pip", "install", "--disable-pip-version-check", "--no-compile", "-q", str(wheel), "openai"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    if install.returncode != 0:
        why = " | ".join(install.stderr.strip().splitlines()[-3:])
        if replay_ci.CI:
            pytest.fail(f"pip could not install the wheel and its dependencies in CI: {why}")
        pytest.skip(f"the package registry cannot be reached (pip install failed): {why}")
    return where


def test_the_wheel_in_a_fresh_environment_runs_a_suite_and_writes_junit_with_the_broken_case_failing(tmp_path):
    replay_ci.isolation_or_skip()
    assert replay_ci.REPO not in tmp_path.parents
    wheel = _build_wheel(tmp_path / "dist")
    assert wheel.name.startswith("n17q_replay-") and wheel.suffix == ".whl"
    env = _fresh_env(tmp_path / "venv", wheel)
    python = str(env / "bin" / "python")
    where = subprocess.run(
        [python, "-c", "import n17q_engine, importlib.util as u; print(n17q_engine.__file__, u.find_spec('django'))"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    engine_file, django = where.stdout.split()
    assert Path(engine_file).is_relative_to(env) and django == "None", where.stdout + where.stderr

    suite = replay_ci.broken_copy(tmp_path, drop_model_turn=2)
    junit = tmp_path / "replays.xml"
    run_dir = tmp_path / "ci"
    run_dir.mkdir()
    done = replay_ci.run_pytest(python, ["--n17q-suite", str(suite), f"--junitxml={junit}"], run_dir, plugin_flag=False)
    assert done.returncode == 1, done.stdout + done.stderr
    cases = replay_ci.junit_cases(junit)
    assert sorted(cases) == ["story-001-broken[start]", "story-001-whole[start]"], done.stdout
    assert cases["story-001-whole[start]"]["failure"] is None
    assert cases["story-001-whole[start]"]["properties"]["n17q.state"] == "completed"
    message = cases["story-001-broken[start]"]["failure"]
    assert message is not None
    assert "missing fixture: model.chat sha256:" in message
    assert "first divergence at decision #3: recorded e-001-propose-send" in message
