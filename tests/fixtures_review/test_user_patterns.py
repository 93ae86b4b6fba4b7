"""A mapping's patterns run on RE2 (issue 35, point 1): through the `capture` command and `POST /api/v1/captures/`,
a catastrophic-backtracking `url` rule answers at once, and a pattern RE2 cannot run is refused when the mapping is
read, in one line naming the rule, the key and RE2's reason, with nothing stored.

Measured on main 534a3a5: `^https://status\\.example/(a+)+$` in Python `re` against such a URL gave no answer in
30 s. The hang guard below is a generous alarm (the test fails, it does not wait forever); no timing is asserted.
"""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.urls import reverse

from fixtures_review.models import StagedRecording
from fixtures_review.recordings import RecordingError, parse_mapping

pytestmark = pytest.mark.django_db

HANG_GUARD_SECONDS = 120  # generous: a busy two-core machine answers in well under a second
CATASTROPHIC = r"^https://status\.example/(a+)+$"
HOSTILE_URL = "https://status.example/" + "a" * 33 + "!"  # 2^33 ways to split the run, none of which matches

MAPPING = json.dumps(
    {
        "defaults": {"scenario": "docs-research", "contract_revision": 2, "effect_class": "read"},
        "rules": [
            {"url": CATASTROPHIC, "tool": "status.never"},
            {"method": "GET", "host": "status.example", "tool": "status.lookup"},
        ],
    }
)


class Hung(Exception):
    pass


@contextlib.contextmanager
def hang_guard(seconds: int = HANG_GUARD_SECONDS) -> Iterator[None]:
    """Fail (rather than wait for ever) if the block has not finished after `seconds`."""

    def alarm(signum, frame):
        raise Hung(f"no answer after {seconds} s: the pattern backtracks")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def har(*urls: str) -> bytes:
    entries = [
        {
            "startedDateTime": "2026-07-01T09:00:05Z",
            "request": {"method": "GET", "url": url, "headers": []},
            "response": {
                "status": 200,
                "headers": [{"name": "Content-Type", "value": "application/json"}],
                "content": {"mimeType": "application/json", "text": json.dumps({"state": "open"})},
            },
        }
        for url in urls
    ]
    return json.dumps({"log": {"version": "1.2", "creator": {"name": "test"}, "entries": entries}}).encode()


def test_a_catastrophic_url_rule_answers_at_once_through_the_command(tmp_path: Path, capsys, seed_scenarios) -> None:
    recording = tmp_path / "status.har"
    recording.write_bytes(har(HOSTILE_URL))
    mapping = tmp_path / "mapping.json"
    mapping.write_text(MAPPING)
    with hang_guard():
        call_command("capture", str(recording), "--mapping", str(mapping), "--json")
    answer = json.loads(capsys.readouterr().out)
    # The hostile URL does not match the first rule (it ends in "!"): the second one takes it.
    assert [(r["url"], r["tool"], r["rule"]) for r in answer["recordings"]] == [(HOSTILE_URL, "status.lookup", 2)]
    assert StagedRecording.objects.count() == 1


def test_a_catastrophic_url_rule_answers_at_once_through_the_api(client, role_user, seed_scenarios) -> None:
    client.force_login(role_user("operator"))
    data = {"file": SimpleUploadedFile("status.har", har(HOSTILE_URL)), "mapping": MAPPING}
    with hang_guard():
        response = client.post(reverse("api-captures"), data=data)
    assert response.status_code == 201, response.content
    assert [(r["tool"], r["rule"]) for r in response.json()["recordings"]] == [("status.lookup", 2)]


# Patterns RE2 cannot run, and the reason the one line gives.
REFUSED = [
    (r"^https://status\.example/(a+)\1$", "invalid escape sequence: \\1"),  # a backreference
    (r"^https://status\.example/(?=admin)", "invalid perl operator: (?="),  # lookahead
    (r"^https://status\.example/(?<!x)y", "invalid perl operator: (?<!"),  # lookbehind
    (r"^https://status\.example/a++$", "bad repetition operator: ++"),  # possessive
    (r"^https://status\.example/(?:a{1000}){1000}$", "invalid repetition size"),  # more than RE2 repeats
    (r"^https://status\.example/(?:\pL|\pN){1000}$", "pattern too large"),  # more than its memory budget
    (r"^https://status\.example/[a-", "missing ]"),
]


@pytest.mark.parametrize(("pattern", "reason"), REFUSED)
def test_a_pattern_re2_cannot_run_is_refused_when_the_mapping_is_read(pattern: str, reason: str) -> None:
    text = json.dumps({"rules": [{"method": "GET"}, {"url": pattern, "tool": "x"}]})
    with pytest.raises(RecordingError) as refused:
        parse_mapping(text)
    said = str(refused.value)
    assert said.startswith("mapping rule 2: url: RE2 cannot run this pattern"), said
    assert reason in said and "\n" not in said
    assert "no backreferences or lookaround" in said


@pytest.mark.parametrize(("pattern", "reason"), REFUSED[:2])
def test_the_command_refuses_it_in_one_line_storing_nothing(pattern, reason, tmp_path: Path, seed_scenarios) -> None:
    recording = tmp_path / "status.har"
    recording.write_bytes(har("https://status.example/admin"))
    mapping = tmp_path / "mapping.yaml"
    mapping.write_text(json.dumps({"rules": [{"url": pattern, "tool": "status.lookup"}]}))
    with pytest.raises(CommandError) as refused:
        call_command("capture", str(recording), "--mapping", str(mapping), "--scenario", "docs-research")
    said = str(refused.value)  # read when given: it names the mapping file, not the recording
    assert said.startswith(f"{mapping}: mapping rule 1: url: RE2 cannot run this pattern") and reason in said
    assert "\n" not in said and StagedRecording.objects.count() == 0


@pytest.mark.parametrize(("pattern", "reason"), REFUSED[:2])
def test_the_api_refuses_it_with_a_400_in_one_line(pattern, reason, client, role_user, seed_scenarios) -> None:
    client.force_login(role_user("operator"))
    mapping = json.dumps({"rules": [{"url": pattern, "tool": "status.lookup"}]})
    data = {"file": SimpleUploadedFile("s.har", har("https://status.example/admin")), "mapping": mapping}
    response = client.post(reverse("api-captures"), data=data)
    assert response.status_code == 400, response.content
    said = response.json()["error"]
    assert said.startswith("mapping rule 1: url: RE2 cannot run this pattern") and reason in said
    assert "\n" not in said and StagedRecording.objects.count() == 0


def test_a_path_template_runs_on_re2_too() -> None:
    letters = "abcdefghijkl"
    template = "/api/" + "".join(f"{{{k}}}" for k in letters) + "/x"
    mapping = parse_mapping(json.dumps({"rules": [{"path": template, "tool": "t"}]}))
    # Twelve adjacent captures over a 60-character segment that never ends in /x: a backtracking engine tries every
    # way to split it (on main, eight of them took 48 s); RE2 answers in one pass.
    with hang_guard():
        assert mapping.rule_for("GET", "https://h.example/api/" + "a" * 60 + "/y") is None
    found = mapping.rule_for("GET", "https://h.example/api/abcdefghijklmn/x")
    assert found is not None and "".join(found[1][k] for k in letters) == "abcdefghijklmn"


def test_a_url_rule_still_captures_its_named_groups() -> None:
    mapping = parse_mapping(
        json.dumps({"rules": [{"url": r"^https://status\.example/requests/(?P<request_id>[^/?]+)", "tool": "t"}]})
    )
    found = mapping.rule_for("GET", "https://status.example/requests/req-é7781?x=1")
    assert found is not None and found[1] == {"request_id": "req-é7781"}
    assert mapping.rule_for("GET", "https://other.example/requests/req-1") is None


def test_a_repeated_template_name_is_refused_in_one_line() -> None:
    with pytest.raises(RecordingError, match=r"^mapping rule 1: path: \{id\} appears twice in the template$"):
        parse_mapping(json.dumps({"rules": [{"path": "/a/{id}/b/{id}", "tool": "t"}]}))


def test_a_mapping_holds_at_most_max_url_patterns_rules_with_a_url() -> None:
    """Each url pattern may hold RE2's memory budget while it runs: their number bounds a mapping's memory."""
    from fixtures_review.recordings import MAX_URL_PATTERNS

    rules = [{"url": rf"^https://h{i}\.example/", "tool": "t"} for i in range(MAX_URL_PATTERNS)]
    assert len(parse_mapping(json.dumps({"rules": rules})).rules) == MAX_URL_PATTERNS
    with pytest.raises(RecordingError, match=rf"^mapping rules: at most {MAX_URL_PATTERNS} with a url pattern, got"):
        parse_mapping(json.dumps({"rules": [*rules, {"url": "^x", "tool": "t"}]}))


PEAK_CHILD = """
import json, random
from pathlib import Path
from fixtures_review.recordings import MAX_URL_PATTERNS, parse_mapping


def peak_kib():  # this process's own high-water mark (ru_maxrss would carry the forking parent's across exec)
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))


before = peak_kib()
# Each rule's automaton has a state per position of the last 21 characters: its DFA cache fills its whole budget.
rules = [{"url": r"(?:a|b)*a(?:a|b){20}c%d" % i, "tool": "t"} for i in range(MAX_URL_PATTERNS)]
mapping = parse_mapping(json.dumps({"rules": rules}))
rng = random.Random(35)
for _ in range(20):
    assert mapping.rule_for("GET", "https://h.example/" + "".join(rng.choice("ab") for _ in range(2000))) is None
print((peak_kib() - before) // 1024)
"""


@pytest.mark.skipif(not Path("/proc/self/status").is_file(), reason="reads the peak from /proc (Linux)")
def test_a_mapping_s_patterns_stay_within_their_memory_budget() -> None:
    """The most a mapping's patterns can hold: MAX_URL_PATTERNS rules, each filling its RE2 budget (1 MiB) over long
    URLs. Measured in a child process (its peak RSS): about 20 MB; 500 such rules took 166 MB. The bound is the
    budget (64 MiB) and half again, so nothing but the patterns' own memory can move it."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", PEAK_CHILD], cwd=root, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) <= 96, f"the mapping's patterns peaked at {done.stdout.strip()} MiB"
