"""The pytest plugin (entry point `pytest11`): an agent's replays as tests in CI (issue 36, point 5).

Inert unless asked: it adds options and collects only suite files (`--n17q-suite PATH`, or files named
`*.n17q.toml` / `*.n17q.json` among pytest's arguments). Each (case, branch point) of a suite is one test item,
`<suite>::<case>[<branch point>]`; pytest's own `--junitxml` writes them as JUnit XML. A failing item's message is
`Outcome.message()`: what the run ended as and why, each missing fixture with its normalized request, and the first
divergence from the recorded run. A suite that cannot be read is one line (a usage error for `--n17q-suite`, a
collection error for a collected file), never a traceback. docs/replay-in-ci.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .replay_suite import (
    Case,
    RecordedRun,
    SuiteError,
    check_branch_point,
    load_suite,
    read_recorded_run,
    read_scenario,
    run_case,
)

SUFFIXES = (".n17q.toml", ".n17q.json")
_SUITES = pytest.StashKey[set[Path]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("n17q", "N17Q: replays of an agent as tests (docs/replay-in-ci.md)")
    group.addoption(
        "--n17q-suite",
        action="append",
        default=[],
        metavar="PATH",
        help="a replay suite (TOML or JSON) to run; may be given more than once. Without other test paths, only "
        "the suites run",
    )
    group.addoption(
        "--n17q-keep",
        metavar="DIR",
        default=None,
        help="write each replay's run bundle into DIR (one folder per case and branch point), to import or read",
    )


def pytest_configure(config: pytest.Config) -> None:
    suites: list[str] = config.getoption("n17q_suite") or []
    resolved: set[Path] = set()
    for raw in suites:
        path = Path(raw)
        if not path.is_file():
            raise pytest.UsageError(f"--n17q-suite {raw}: no such file")
        try:
            load_suite(path)  # checked now: a bad suite is one line before anything runs
        except SuiteError as exc:
            raise pytest.UsageError(str(exc)) from None
        resolved.add(path.resolve())
    config.stash[_SUITES] = resolved
    if resolved:
        given = config.args_source == pytest.Config.ArgsSource.ARGS
        # Only the suites when no test path was given (pytest would otherwise collect testpaths or the folder too).
        config.args[:] = [*(config.args if given else []), *(str(p) for p in sorted(resolved))]


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    suites = parent.config.stash.get(_SUITES, set())
    if file_path.name.endswith(SUFFIXES) or file_path.resolve() in suites:
        return SuiteFile.from_parent(parent, path=file_path)
    return None


class SuiteFile(pytest.File):
    def collect(self) -> Any:
        cases = load_suite(self.path)
        for case in cases:
            run = read_recorded_run(case.run)
            read_scenario(case.scenario)  # refused here, in one line, rather than in every item
            for branch in case.branch_points:
                check_branch_point(run, branch, f"{case.suite}: case {case.name}")
                yield ReplayItem.from_parent(self, name=f"{case.name}[{branch}]", case=case, branch=branch, run=run)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, SuiteError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class ReplayFailed(AssertionError):
    """A replay that did not pass: its message is the whole verdict."""


class ReplayItem(pytest.Item):
    def __init__(self, *, case: Case, branch: str, run: RecordedRun, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.case = case
        self.branch = branch
        self.recorded = run

    def runtest(self) -> None:
        keep_opt = self.config.getoption("n17q_keep")
        keep = Path(keep_opt) if keep_opt else None
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
        outcome = run_case(self.case, self.branch, run=self.recorded, keep=keep)
        self.user_properties.append(("n17q.state", outcome.state or "none"))
        self.user_properties.append(("n17q.missing_fixtures", str(len(outcome.missing))))
        if outcome.divergence:
            self.user_properties.append(("n17q.first_divergence", outcome.divergence))
        if not outcome.passed:
            raise ReplayFailed(outcome.message())

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None) -> Any:
        if isinstance(excinfo.value, ReplayFailed | SuiteError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"n17q replay {self.case.name} from {self.branch}"
