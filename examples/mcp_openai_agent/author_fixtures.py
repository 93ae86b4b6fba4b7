"""Regenerate this example's stories: the recorded runs, the scenario packages and the agent's model fixtures.

    python examples/mcp_openai_agent/author_fixtures.py [EXAMPLE_DIR]   (the console's environment)

EXAMPLE_DIR (default: this script's folder) holds `replays.n17q.toml` and `agent/`; its `stories/` is rewritten.

What it writes under examples/mcp_openai_agent/stories/ (committed, so a CI job needs nothing but the files):

- `<story>/run.zip`: the recorded run as a run bundle (manifest.json, events.jsonl, blobs/sha256/<hex>), the same
  format `manage.py export_run RUN OUT.zip` writes, built from the demo's story sources (`n17q_demo.stories`, what
  `manage.py load_demo` imports): run-001-recorded and run-003-review-request;
- `<story>/scenario/`: the scenario package (as `manage.py export_package` writes it) of the demo's seed scenario
  (`n17q_demo.seed_scenarios`: email-delivery, coding-review-request) with the `model.chat` contract and this
  agent's model fixtures added;
- `001-email-delivery/scenario-no-answers/`: the same scenario with the `model.chat` contract and no answer, for the
  suite's fixture-miss canary (the agent's first model request must stop the run as a missing fixture).

The model fixtures are authored the way a reviewer would (docs/agents.md, "Model fixtures"): replay the case in the
sandbox (`n17q_engine.replay_suite.run_case`, exactly what the pytest plugin runs), read the model request it stopped
on (the `model.chat` `tool.call` before the `fixture.missing`), answer it with the next scripted decision, replay
again, until the agent stops asking. The scripted decisions make the agent do what the recorded run did: for story
001 create the draft, fix its window and send it (the recorded audience narrowing and approval are the harness's and
replay as recorded); for story 003 from the checkpoint before the broad suite, run the broad suite, apply the patch
in workspace two, rerun it there, see the failure and stop without a review request.

Needs the sandbox's kernel boundary (Linux namespaces), like every agent replay.
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1]))  # the repository: n17q_demo and n17q_engine

from n17q_demo import seed_scenarios, stories  # noqa: E402
from n17q_engine.agent.model import MODEL_TOOL, completion, model_fixture  # noqa: E402
from n17q_engine.agent.names import openai_name  # noqa: E402
from n17q_engine.canonical import canonical_json  # noqa: E402
from n17q_engine.package import Package  # noqa: E402
from n17q_engine.replay_suite import (  # noqa: E402
    Case,
    load_suite,
    read_recorded_run,
    run_case,
    scenario_with_fixtures,
)

RECORDED_AT = "2026-12-01T00:00:00Z"
# story folder -> (recorded run id, seed scenario name)
SOURCES = {
    "001-email-delivery": ("run-001-recorded", "email-delivery"),
    "003-review-request": ("run-003-review-request", "coding-review-request"),
}


def fn(tool: str, example: Path) -> str:
    """The function name the agent offers its model for an MCP tool: the OpenAI name the server gives each tool
    (`n17q_engine.agent.names`, docs/agents.md), which agent.py takes from the tool's `_meta`."""
    return openai_name(tool)


def offered(request: dict[str, Any], name: str) -> str:
    """`name` as one of the functions the agent offered in this model request (a clear stop if it is not: the tool
    names the MCP server serves, or the agent's mapping of them, changed; update the script's tools)."""
    names = [str((t.get("function") or {}).get("name")) for t in request.get("tools") or []]
    if name not in names:
        raise SystemExit(f"the agent offers no function {name!r} (it offers {', '.join(names)})")
    return name


def recorded(run: Any, call_id: str) -> dict[str, Any]:
    return dict(next(e for e in run.events if e["id"] == call_id)["request"])


def scripts(runs: dict[str, Any]) -> dict[tuple[str, str], list[tuple[str | None, str | None, dict | None]]]:
    """(case, branch point) -> one (content, tool, arguments) per model turn."""
    r1, r3 = runs["001-email-delivery"], runs["003-review-request"]
    return {
        ("story-001", "start"): [
            (None, "email.draft_create", recorded(r1, "e-001-call-draft-create")),
            (None, "email.draft_update", recorded(r1, "e-001-call-draft-update")),
            (None, "email.send", {"draft_id": "dr-5501"}),
            ("Sent the maintenance notice once to the narrowed audience.", None, None),
        ],
        ("story-003", "e-003-a1-checkpoint"): [
            (None, "shell.run", {**recorded(r3, "e-003-a1-call-broad"), "workspace": "ws-1"}),
            (None, "repo.apply_patch", {**recorded(r3, "e-003-a2-call-apply-patch"), "workspace": "ws-2"}),
            (None, "shell.run", {**recorded(r3, "e-003-a1-call-broad"), "workspace": "ws-2"}),
            ("The broad suite fails in ws-2 (test_adapter_roundtrip_preserves_cursor): no review request.", None, None),
        ],
    }


def write_run_zip(bundle: Any, out: Path) -> None:
    """A run bundle as a .zip, members in a fixed order with a fixed time (the same run: the same bytes)."""
    members = [("manifest.json", canonical_json(bundle.manifest) + b"\n")]
    members.append(("events.jsonl", b"".join(canonical_json(e) + b"\n" for e in bundle.events)))
    members += [(f"blobs/sha256/{d.removeprefix('sha256:')}", data) for d, data in sorted(bundle.blobs.items())]
    with zipfile.ZipFile(out, "w") as zf:
        for name, data in members:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            zf.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED)


def author(case: Case, branch: str, base: Package, run: Any, script: list) -> list[dict[str, Any]]:
    fixtures: list[dict[str, Any]] = []
    for turn in range(len(script) + 1):
        outcome = run_case(case, branch, run=run, scenario=scenario_with_fixtures(base, fixtures))
        missing = outcome.missing
        if outcome.state != "incomplete_test_world" or not missing or missing[0].tool != MODEL_TOOL:
            print(f"{case.name} [{branch}]: {outcome.state}: {outcome.reason}", file=sys.stderr)
            return fixtures
        if turn >= len(script):
            raise SystemExit(f"{case.name}: the agent asked its model more than the script holds: {outcome.reason}")
        request = missing[0].request
        content, tool, arguments = script[turn]
        name = offered(request, fn(tool, case.agent.folder.parent)) if tool else None
        calls = [(f"call-{turn}", name, json.dumps(arguments, sort_keys=True))] if name else None
        fixtures.append(
            model_fixture(
                f"model-{case.name}-{turn}",
                request,
                completion(content, calls, model=request["model"], number=turn),
                recorded_at=RECORDED_AT,
                synthetic=True,
                fidelity_note="scripted model answers for the example agent (examples/mcp_openai_agent)",
            )
        )
    raise SystemExit(f"{case.name}: the agent kept asking its model after the script ended")


def main(argv: list[str]) -> int:
    example = Path(argv[0]).resolve() if argv else HERE
    stories_dir = example / "stories"
    seeds = {p.manifest["scenario"]["name"]: p for p in seed_scenarios.seed_packages()}
    bundles = {b.manifest["run"]["id"]: b for b in stories.demo_bundles()}
    runs: dict[str, Any] = {}
    bases: dict[str, Package] = {}
    for folder, (run_id, scenario) in SOURCES.items():
        target = stories_dir / folder
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        write_run_zip(bundles[run_id], target / "run.zip")
        runs[folder] = read_recorded_run(target / "run.zip")
        bases[folder] = scenario_with_fixtures(seeds[scenario], [])
        bases[folder].write_dir(target / "scenario")  # the suite must load while the fixtures are authored
        if folder == "001-email-delivery":  # the canary's scenario: the model.chat contract, no answer
            bases[folder].write_dir(target / "scenario-no-answers")
    cases = {c.name: c for c in load_suite(example / "replays.n17q.toml")}
    for (name, branch), script in scripts(runs).items():
        case = cases[name]
        folder = case.run.parent.name
        fixtures = author(case, branch, bases[folder], runs[folder], script)
        if len(fixtures) != len(script):
            raise SystemExit(f"{name}: authored {len(fixtures)} answers for a script of {len(script)}")
        shutil.rmtree(stories_dir / folder / "scenario")
        scenario_with_fixtures(bases[folder], fixtures).write_dir(stories_dir / folder / "scenario")
        print(f"{name} [{branch}]: {len(fixtures)} model fixtures", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
