"""vcrpy's own test cassettes, all of them (tests/data/vcrpy-cassettes, ORIGIN.md: licence and commit), read by vcrpy's
loader and by N17Q's (issue 37, point 4). None is refused for a format vcrpy itself loads: Python 2's
`!!python/unicode` text, tornado's `!!python/tuple` header pairs and the httpx stub's old `status_code`/`content`
read as vcrpy reads them; a cassette from before vcrpy 1.0, which vcrpy itself reads only once migrated, is refused in
one line naming vcrpy's migration command. Before this, 5 of the 9 were refused here."""

from __future__ import annotations

from pathlib import Path

import pytest
import vcr.serializers.jsonserializer as vcr_json
import vcr.serializers.yamlserializer as vcr_yaml
from django.core.management import call_command
from django.core.management.base import CommandError
from vcr.serialize import deserialize

from fixtures_review import recordings
from fixtures_review.models import StagedRecording

DATA = Path(__file__).resolve().parents[1] / "data" / "vcrpy-cassettes"
CASSETTES = sorted(p for p in DATA.rglob("*") if p.suffix in (".json", ".yaml"))
FLAGS = ["--scenario", "docs-research", "--tool", "status.lookup", "--contract-revision", "2", "--effect-class", "read"]


def _vcrpy(path: Path):
    """What vcrpy's own loader makes of the cassette: its (requests, responses), or None when it refuses it."""
    try:
        return deserialize(path.read_text(), vcr_json if path.suffix == ".json" else vcr_yaml)
    except ValueError:
        return None


def test_all_of_vcrpys_cassettes_are_here():
    assert len(CASSETTES) == 9 and (DATA / "LICENSE.txt").exists() and (DATA / "ORIGIN.md").exists()


@pytest.mark.parametrize("path", CASSETTES, ids=[str(p.relative_to(DATA)) for p in CASSETTES])
def test_each_cassette_reads_as_vcrpy_reads_it_or_is_refused_with_the_migration_command(path):
    theirs = _vcrpy(path)
    if theirs is None:
        with pytest.raises(recordings.RecordingError) as refused:
            recordings.load(path.read_bytes())
        assert str(refused.value) == recordings.PRE_1_0_REFUSAL and "python -m vcr.migration" in str(refused.value)
        return
    source = recordings.load(path.read_bytes())
    assert source is not None and source.kind == "vcr", path
    ours = recordings.exchanges(source)
    requests, responses = theirs
    assert [(e.method, e.url) for e in ours] == [(r.method, r.uri) for r in requests]
    # (vcrpy's httpx stub reads the old format's `status_code` where the others have status.code)
    assert [e.status for e in ours] == [r["status"]["code"] if "status" in r else r["status_code"] for r in responses]


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["old_cassette.json", "old_cassette.yaml"])
def test_the_capture_door_refuses_a_pre_1_0_cassette_in_one_line_and_stages_nothing(name, seed_scenarios):
    with pytest.raises(CommandError) as refused:
        call_command("capture", str(DATA / "tests/fixtures/migration" / name), *FLAGS)
    assert recordings.PRE_1_0_REFUSAL in str(refused.value) and "\n" not in str(refused.value)
    assert StagedRecording.objects.count() == 0


def test_other_python_tags_stay_refused():
    """Only the tags vcrpy's own safe loader constructs are read; an object or a call is still refused."""
    for tag in (
        "!!python/object/apply:os.system ['true']",
        "!!python/object:vcr.request.Request {}",
        "!!python/name:os.system ''",
    ):
        text = f"interactions:\n- request: {tag}\n  response: {{status: {{code: 200}}}}\n".encode()
        with pytest.raises(recordings.RecordingError, match="not valid YAML"):
            recordings.load(text)


PRODUCERS = Path(__file__).resolve().parents[1] / "data" / "producers"


@pytest.mark.django_db
@pytest.mark.parametrize("name", ["mitmproxy.har", "playwright-chromium.har"])
def test_a_har_written_by_mitmproxy_or_chromium_goes_through_the_capture_door(
    name, seed_scenarios, reviewed_connections, capsys
):
    """HARs from real producers (tests/data/producers, ORIGIN.md: mitmdump 11's `hardump`, Playwright's Chromium
    `record_har_path`) go through the capture door like any recording: each exchange staged through intake and the
    record policy of the connection it went through (its host, reviewed here), never the file refused for its
    format."""
    import json
    from urllib.parse import urlsplit

    from tests.conftest import approve_test_connection

    har = json.loads((PRODUCERS / name).read_text())
    hosts = {urlsplit(e["request"]["url"]).netloc for e in har["log"]["entries"]}
    for host in hosts:
        approve_test_connection(host, reaches="sandbox", capabilities=["read", "mutation"])
    call_command("capture", str(PRODUCERS / name), *FLAGS, "--json")
    answer = json.loads(capsys.readouterr().out)
    staged = answer["recordings"] if isinstance(answer, dict) else answer
    assert len(staged) == len(har["log"]["entries"]), answer
    assert StagedRecording.objects.filter(state="staged").count() == len(har["log"]["entries"])
