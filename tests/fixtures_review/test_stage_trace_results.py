"""Trace -> recordings (issue 37, point 1): the tool results of runs imported from real producers' files (spans
emitted with the OpenTelemetry SDK, an Inspect AI eval run in a child process) staged with the contract revision
given at staging, each result staged, skipped or refused on its own with the reason, selected by all, tool, event or
span subtree, through the command, the API and the run page."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode, Tracer

from fixtures_review.models import RequestObservation, StagedRecording
from fixtures_review.services import ReviewRefused, contract_revisions_parse
from runs.models import Event, Run
from tests.engine.inspect_logs import produce_once

pytestmark = pytest.mark.django_db

VIA = ("--connection", "docs-api")  # a reviewed live read connection (tests/conftest.py)


def _tool(tracer: Tracer, name: str, call: str, args: dict, result: str, **extra) -> None:
    attributes = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": name,
        "gen_ai.tool.call.id": call,
        "gen_ai.tool.call.arguments": json.dumps(args),
        "gen_ai.tool.call.result": result,
        **extra,
    }
    with tracer.start_as_current_span(f"execute_tool {name}", attributes=attributes):
        pass


def _emit(tracer: Tracer) -> None:
    """An agent span; below it a plan span no convention maps (it makes no event) holding two reads, then a fetch
    whose call records its own contract revision (2), then a fetch that times out."""
    with tracer.start_as_current_span("invoke_agent fixer", attributes={"gen_ai.operation.name": "invoke_agent"}):
        with tracer.start_as_current_span("plan step", attributes={"step.kind": "plan"}):
            _tool(tracer, "read_file", "call_1", {"path": "a.py"}, "print('a')")
            _tool(tracer, "read_file", "call_2", {"path": "b.py"}, "print('b')")
        _tool(tracer, "fetch_url", "call_3", {"url": "https://example.invalid/x"}, "<html>x</html>",
              **{"n17q.contract_revision": 2})  # fmt: skip
        with tracer.start_as_current_span(
            "execute_tool fetch_url",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "fetch_url",
                "gen_ai.tool.call.id": "call_4",
                "gen_ai.tool.call.arguments": json.dumps({"url": "https://example.invalid/y"}),
                "error.type": "TimeoutError",
            },
        ) as span:
            span.set_status(Status(StatusCode.ERROR, "no answer in 30 s"))


def _import(path: Path) -> list[str]:
    out = io.StringIO()
    call_command("import_run", str(path), "--json", stdout=out)
    return [r["run"] for r in json.loads(out.getvalue())["runs"]]


@pytest.fixture
def otlp_run(tmp_path) -> Run:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "fixer-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _emit(provider.get_tracer("n17q.tests", "1.0"))
    provider.shutdown()
    path = tmp_path / "trace.otlp"
    path.write_bytes(encode_spans(exporter.get_finished_spans()).SerializeToString())
    (run_id,) = _import(path)
    return Run.objects.get(run_id=run_id)


@pytest.fixture(scope="module")
def inspect_logs(tmp_path_factory) -> dict[str, Path]:
    return produce_once(tmp_path_factory)


def stage(capsys, run: str, *args: str) -> dict:
    capsys.readouterr()
    call_command("capture_from_run", run, *VIA, "--scenario", "fresh-world", "--effect-class", "read", *args, "--json")
    return json.loads(capsys.readouterr().out)


def _results(run: Run) -> dict[str, dict]:
    calls = {e.event_id: e.body for e in Event.objects.filter(run=run, kind="tool.call")}
    return {e.event_id: calls[e.body["call_id"]] for e in Event.objects.filter(run=run, kind="tool.result")}


# --- the bug measured on main: a converted run's calls record contract revision 0 --------------------------------


def test_every_tool_result_of_an_otlp_trace_stages_with_the_revision_given(otlp_run, capsys):
    results = _results(otlp_run)
    assert sorted(c["contract_revision"] for c in results.values()) == [0, 0, 0, 2]
    out = stage(capsys, otlp_run.run_id, "--contract-revision", "2")
    assert len(out["recordings"]) == 4 and out["refused"] == [] and out["skipped"] == []
    staged = StagedRecording.objects.filter(source_run=otlp_run.run_id)
    assert {r.contract_revision for r in staged} == {2}
    assert {(r.copied_from or {})["contract_revision"] for r in staged} == {2}
    assert sorted(r.outcome for r in staged)[:3] == ["ok", "ok", "ok"] and len({r.outcome for r in staged}) == 2


def test_without_a_revision_each_result_is_refused_naming_what_to_give(otlp_run, capsys):
    out = stage(capsys, otlp_run.run_id)
    # The call that records its own revision stages; the three that record none are refused one by one.
    assert [r["tool"] for r in out["recordings"]] == ["fetch_url"]
    assert out["recordings"][0]["staged"]
    assert sorted(r["tool"] for r in out["refused"]) == ["fetch_url", "read_file", "read_file"]
    assert all("records none" in r["reason"] and "--contract-revision" in r["reason"] for r in out["refused"])


def test_a_given_revision_that_disagrees_with_the_recorded_one_refuses_that_result_only(otlp_run, capsys):
    out = stage(capsys, otlp_run.run_id, "--contract-revision", "1")
    assert len(out["recordings"]) == 3
    (refused,) = out["refused"]
    assert (
        refused["tool"] == "fetch_url"
        and "records revision 2" in refused["reason"]
        and "1 was given" in refused["reason"]
    )
    # Given per tool, the same revision as the recorded one: it stages; the others are already staged.
    again = stage(capsys, otlp_run.run_id, "--contract-revision", "fetch_url=2")
    assert [a["event"] for a in again["already"]] and len(again["recordings"]) == 1
    assert StagedRecording.objects.get(public_id=again["recordings"][0]["staged"]).contract_revision == 2


def test_per_tool_revisions_and_the_tool_selection(otlp_run, capsys):
    out = stage(capsys, otlp_run.run_id, "--tool", "read_file", "--contract-revision", "read_file=3")
    assert len(out["recordings"]) == 2 and out["refused"] == []
    assert {StagedRecording.objects.get(public_id=r["staged"]).contract_revision for r in out["recordings"]} == {3}
    with pytest.raises(CommandError, match=r"contract_revision: no selected result of run .* is of tool 'nope'"):
        stage(capsys, otlp_run.run_id, "--contract-revision", "nope=1")


def test_a_span_subtree_selects_the_results_under_it(otlp_run, capsys):
    results = _results(otlp_run)
    reads = [e for e, c in results.items() if c["tool"] == "read_file"]
    plan = {Event.objects.get(run=otlp_run, event_id=e).body["otlp"]["parent"] for e in reads}
    assert len(plan) == 1  # both reads sit under the plan span, which made no event of its own
    (plan_span,) = plan
    assert not Event.objects.filter(run=otlp_run, body__otlp__span=plan_span).exists()
    out = stage(capsys, otlp_run.run_id, "--subtree", plan_span, "--contract-revision", "1")
    assert sorted(r["event"] for r in out["recordings"]) == sorted(reads)
    # The agent span (the root) holds every result; a tool.call's id selects its own result.
    fetch = next(e for e, c in results.items() if c["tool"] == "fetch_url" and c["contract_revision"] == 2)
    call_id = Event.objects.get(run=otlp_run, event_id=fetch).body["call_id"]
    out = stage(capsys, otlp_run.run_id, "--subtree", call_id)
    assert [r["event"] for r in out["recordings"]] == [fetch]
    root = Event.objects.get(run=otlp_run, event_id=fetch).body["otlp"]["ancestors"][-1]
    out = stage(capsys, otlp_run.run_id, "--subtree", root, "--contract-revision", "1")
    assert len(out["already"]) == 3 and len(out["recordings"]) == 1


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--subtree", "0123456789abcdef"], "subtree: run .* holds no event or span '0123456789abcdef'"),
        (["--contract-revision", "0"], "contract_revision: a positive integer, or TOOL=N"),
        (["--contract-revision", "x=y"], "contract_revision: a positive integer, or TOOL=N"),
        (["--contract-revision", "1", "--contract-revision", "2"], "given twice"),
    ],
)
def test_a_bad_selection_or_revision_is_one_line_and_stores_nothing(otlp_run, capsys, args, said):
    with pytest.raises(CommandError, match=said) as caught:
        stage(capsys, otlp_run.run_id, *args)
    assert "\n" not in str(caught.value) and not StagedRecording.objects.exists()


def test_the_record_policy_refuses_one_result_and_the_others_stage(otlp_run, capsys, monkeypatch):
    from fixtures_review import connections, record_policy

    admit = record_policy.admit

    def refuse_one(capture, policy):
        if capture["request"]["args"].get("path") == "b.py":
            raise record_policy.RecordRefused("this read reaches an account the connection may not record")
        return admit(capture, policy)

    monkeypatch.setattr(connections.record_policy, "admit", refuse_one)
    out = stage(capsys, otlp_run.run_id, "--contract-revision", "2")
    assert len(out["recordings"]) == 3
    (refused,) = out["refused"]
    assert refused["reason"].startswith("refused by the record policy: this read reaches an account")
    assert RequestObservation.objects.filter(public_id=refused["observation"]).exists()


def test_contract_revisions_parse_reads_what_the_doors_take():
    parsed = contract_revisions_parse(["2", "read_file=3, fetch_url=4", 5 - 3])
    assert parsed.default == 2 and dict(parsed.by_tool) == {"read_file": 3, "fetch_url": 4}
    assert parsed.given("read_file") == 3 and parsed.given("other") == 2
    for bad in (["-1"], [True], ["=3"], [2.5], ["1 2"]):
        with pytest.raises(ReviewRefused, match="contract_revision"):
            contract_revisions_parse(bad)


# --- Inspect AI ----------------------------------------------------------------------------------------------------


def test_every_tool_result_of_inspect_runs_stages_and_a_span_subtree_selects(inspect_logs, capsys):
    runs = [Run.objects.get(run_id=r) for r in _import(inspect_logs["eval"])]
    total = 0
    for run in runs:
        results = _results(run)
        assert {c["contract_revision"] for c in results.values()} <= {0}
        if not results:
            continue
        body = Event.objects.get(run=run, event_id=next(iter(results))).body
        span = body["inspect"]["span"]
        under = [
            e
            for e in results
            if Event.objects.get(run=run, event_id=e).body["inspect"]["span"] == span
            or span in Event.objects.get(run=run, event_id=e).body["inspect"]["ancestors"]
        ]
        out = stage(capsys, run.run_id, "--subtree", span, "--contract-revision", "1")
        assert sorted(r["event"] for r in out["recordings"]) == sorted(under)
        out = stage(capsys, run.run_id, "--contract-revision", "1")
        assert out["refused"] == [] and out["skipped"] == []
        assert len(out["recordings"]) + len(out["already"]) == len(results)
        total += len(results)
    assert total >= 4 and StagedRecording.objects.filter(origin="run-result").count() == total


# --- the API and the run page ---------------------------------------------------------------------------------------


def test_the_api_takes_the_revision_and_the_subtree_and_answers_each_result(otlp_run, client, role_user):
    client.force_login(role_user("operator"))
    url = reverse("api-run-captures", args=[otlp_run.run_id])
    base = {"connection": "docs-api", "scenario": "fresh-world", "effect_class": "read"}
    response = client.post(url, data=base, content_type="application/json")
    assert response.status_code == 201 and len(response.json()["refused"]) == 3  # only the call that records 2
    response = client.post(url, data={**base, "contract_revision": ["read_file=1"]}, content_type="application/json")
    body = response.json()
    assert response.status_code == 201 and len(body["recordings"]) == 2 and len(body["refused"]) == 1
    response = client.post(url, data={**base, "contract_revision": 4}, content_type="application/json")
    assert response.status_code == 201 and len(response.json()["recordings"]) == 1
    response = client.post(url, data={**base, "contract_revision": 4}, content_type="application/json")
    assert response.status_code == 200 and len(response.json()["already"]) == 4  # nothing new: 200
    for data, said in (
        ({**base, "contract_revision": "zero"}, "contract_revision: a positive integer"),
        ({**base, "contract_revision": {"a": 1}}, "contract_revision: a positive integer"),
        ({**base, "subtree": 3}, "subtree: a string"),
        ({**base, "subtree": "ffffffffffffffff"}, "holds no event or span"),
    ):
        response = client.post(url, data=data, content_type="application/json")
        assert response.status_code == 400 and said in response.json()["error"], response.content


def test_the_run_page_form_stages_a_selection_and_tells_each_outcome(otlp_run, client, role_user):
    client.force_login(role_user("operator"))
    page = client.get(reverse("runs:run-detail", args=[otlp_run.run_id])).content.decode()
    assert 'name="contract_revision"' in page and 'name="subtree"' in page and 'value="subtree"' in page
    url = reverse("fixtures:run-results-stage", args=[otlp_run.run_id])
    base = {"connection": "docs-api", "scenario": "fresh-world", "effect_class": "read"}
    response = client.post(url, data={**base, "selection": "tool", "tool": "fetch_url"}, follow=True)
    text = response.content.decode()
    assert "Staged 1 recording from run" in text and "1 refused" in text
    assert "fetch_url) refused: contract revision: its call records none for fetch_url" in text
    response = client.post(url, data={**base, "selection": "tool", "tool": ""}, follow=True)
    assert "Staging the results refused: tool: say which" in response.content.decode()
    response = client.post(url, data={**base, "contract_revision": "fetch_url=1 read_file=1"}, follow=True)
    assert "Staged 3 recordings" in response.content.decode()
    assert StagedRecording.objects.filter(source_run=otlp_run.run_id).count() == 4


def test_a_result_staged_by_another_request_at_the_same_moment_is_listed_as_already(otlp_run, capsys, monkeypatch):
    from fixtures_review import run_results

    real = run_results._stage_all
    winners: list[StagedRecording] = []

    def race(items, **kwargs):
        # Another request stores the same result between this one's check and its write (the unique constraint on
        # the recording's source run and event is the last guard).
        if not winners:
            winners.extend(real([dict(items[0])], **kwargs))
        return real(items, **kwargs)

    monkeypatch.setattr(run_results, "_stage_all", race)
    out = stage(capsys, otlp_run.run_id, "--tool", "read_file", "--contract-revision", "1")
    (winner,) = winners
    assert [a["recording"] for a in out["already"]] == [winner.public_id]
    assert len(out["recordings"]) == 1 and out["refused"] == []
    assert StagedRecording.objects.filter(source_run=otlp_run.run_id).count() == 2
