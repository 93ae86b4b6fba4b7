"""One resolver of fixture bodies held by digest, not fifteen doors (seed 001: "Promoted fixture bodies follow
retention").

A promoted fixture holds its body by digest (`response.body_digest`); the bytes are in the blob store under the
fixture's hold, or gone with a deletion record. A stored scenario version loaded without them is refused by the
engine, and a reader that took the fixture's `body` key would read an expired body as an empty one. So every load of
a stored version goes through `fixtures_review.scenarios.loaded_scenario` (or passes the bodies `fixture_bodies`
resolved), and the replay worker hands them to `build_replay`. This walks the console's code and holds it to that:
a new `load_scenario(scenario_package(…))` elsewhere fails here.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# The console's code (the engine, n17q_engine, is the other side of the line: it takes the bodies it is given).
APPS = ("accounts", "console", "fixtures_review", "replays", "runs", "otlp_receiver", "n17q_site", "n17q_demo")

RESOLVER = "fixtures_review/scenarios.py"
# Where a scenario package is built from files without bodies, and why that cannot drop one.
BUILT_WITHOUT_BODIES = {
    "replays/trace_scenarios.py": "a scenario proposed from a trace holds no fixtures (an empty fixtures.json)",
    "n17q_demo/seed_scenarios.py": "the demo's own seed packages, whose fixtures hold their bodies inline",
}
# Who may read a stored version's package without loading it, and why (none of them reads a body's content).
PACKAGE_READERS = {
    RESOLVER: "the resolver itself",
    "fixtures_review/minting.py": "copies the base's files into the next version; the mint loads them with bodies",
    "fixtures_review/contract_migration.py": "copies the files; bodies are read inline through scenario_bodies",
    "fixtures_review/management/commands/export_package.py": "exports the package as held (digests, not bytes)",
    "replays/services.py": "the replay package: build_replay gets fixture_bodies= and expired_fixture_bodies=",
}


def _calls(name: str) -> list[tuple[str, ast.Call]]:
    found = []
    for app in APPS:
        for path in sorted((ROOT / app).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if isinstance(node, ast.Call):
                    func = node.func
                    called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
                    if called == name:
                        found.append((str(path.relative_to(ROOT)), node))
    return found


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_a_stored_scenario_version_is_loaded_only_through_the_one_resolver():
    loads = _calls("load_scenario")
    outside = sorted({where for where, _ in loads if where != RESOLVER})
    assert not outside, f"load_scenario outside {RESOLVER} (use loaded_scenario(version)): {outside}"
    # The resolver's own loads pass the bodies it resolved; the walk sees them (a walk that saw nothing proves nothing).
    assert loads and all({"bodies", "expired_bodies"} <= {k.arg for k in call.keywords} for _, call in loads)


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_every_package_built_from_stored_files_gets_its_bodies():
    builds = _calls("build_scenario")
    assert builds
    for where, call in builds:
        if where in BUILT_WITHOUT_BODIES:
            continue
        keywords = {k.arg for k in call.keywords}
        assert {"bodies", "expired_bodies"} <= keywords, f"{where}:{call.lineno}: build_scenario without its bodies"


@pytest.mark.seed("001", "Retention preserved the failure, not every byte forever")
def test_the_replay_worker_hands_the_bodies_to_the_package_and_only_known_readers_read_a_stored_package():
    (worker,) = [(where, call) for where, call in _calls("build_replay") if where == "replays/services.py"]
    assert {"fixture_bodies", "expired_fixture_bodies"} <= {k.arg for k in worker[1].keywords}
    readers = sorted({where for where, _ in _calls("scenario_package")} - set(PACKAGE_READERS))
    assert not readers, f"scenario_package read outside the known readers (use loaded_scenario): {readers}"
