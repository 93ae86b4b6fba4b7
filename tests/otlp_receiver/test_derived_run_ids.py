"""Only the OTLP converter names a run `otlp-<trace id>` (issue 33), and the receiver adopts no run it did not make.

The attack, as demonstrated before: an operator imported a bundle named `otlp-<trace id>` (trace ids are listed on
/traces/) and the receiver adopted it as that trace's run when the trace was finalized, so the real spans never
became a run. The OTLP file door runs the converter, so it still makes `otlp-` runs (docs/decisions.md, issue 33).
"""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from n17q_engine.bundle import BundleError
from n17q_engine.identifiers import OTLP_MAKER
from otlp_receiver import services
from otlp_receiver.models import ReceivedTrace, TraceChunk
from runs.import_formats import runs_import_from_path
from runs.importer import _import_root, run_import_from_path
from runs.models import Event, Run
from tests import bundles
from tests.runs.test_api import upload

from .conftest import agent_turn, opened_trace, post

pytestmark = pytest.mark.django_db


def bundle_named(tmp_path, run_id: str):
    manifest, events, blobs = bundles.example_parts()
    manifest["run"]["id"] = run_id
    return bundles.write_folder(tmp_path / run_id, manifest, events, blobs)


# ---- someone else decides what a trace becomes


def test_a_bundle_named_after_a_received_trace_is_refused_and_the_trace_becomes_its_own_run(
    client, recorder, victim, attacker, tmp_path
):
    root, trace_id = opened_trace(client, recorder, victim[1])
    folder = bundle_named(tmp_path, f"otlp-{trace_id}")
    archive = bundles.zip_folder(folder, tmp_path / "forged.zip").read_bytes()
    response = upload(client, archive, HTTP_AUTHORIZATION=f"Token {attacker[1]}")
    assert response.status_code == 400, response.content[:300]
    assert "reserved for the runs the OTLP converter" in response.json()["error"]
    with pytest.raises(BundleError, match="reserved"):
        run_import_from_path(folder)
    assert not Run.objects.filter(run_id=f"otlp-{trace_id}").exists()

    # Positive control: the owner's spans become the run.
    root.end()
    assert post(client, recorder.take(), victim[1]).status_code == 200
    trace = services.trace_finalize(trace_pk=ReceivedTrace.objects.get(trace_id=trace_id).pk, force=True)
    assert trace.state == "finalized" and trace.run.run_id == f"otlp-{trace_id}"
    tools = set(Event.objects.filter(run=trace.run, kind="tool.call").values_list("body__tool", flat=True))
    assert tools == {"lookup_order"}


def test_a_run_under_a_traces_name_that_the_receiver_did_not_make_is_never_adopted(client, recorder, victim, tmp_path):
    root, trace_id = opened_trace(client, recorder, victim[1])
    root.end()
    assert post(client, recorder.take(), victim[1]).status_code == 200
    # As if imported before the namespace was reserved (or by the OTLP file door, which may name it): not this trace's.
    forged = _import_root(bundle_named(tmp_path, f"otlp-{trace_id}"), user=None, made_by=OTLP_MAKER).run
    trace = services.trace_finalize(trace_pk=ReceivedTrace.objects.get(trace_id=trace_id).pk, force=True)
    assert trace.state == "refused" and trace.run is None
    assert f"otlp-{trace_id}" in trace.error and "not made from" in trace.error
    assert TraceChunk.objects.filter(trace=trace).exists()  # its spans are kept, readable on its page
    assert Run.objects.get(run_id=f"otlp-{trace_id}") == forged


def test_a_trace_cannot_name_its_run_in_another_traces_namespace(client, recorder, victim, attacker):
    _root, trace_id = opened_trace(client, recorder, victim[1])
    with recorder.tracer.start_as_current_span(
        "invoke_agent other", attributes={"n17q.run.id": f"otlp-{trace_id}"}
    ) as other:
        pass
    assert post(client, recorder.take(), attacker[1]).status_code == 200
    other_id = format(other.get_span_context().trace_id, "032x")
    refused = services.trace_finalize(trace_pk=ReceivedTrace.objects.get(trace_id=other_id).pk, force=True)
    assert refused.state == "refused" and "reserved" in refused.error
    assert not Run.objects.filter(run_id=f"otlp-{trace_id}").exists()


def test_an_otlp_file_still_imports_as_runs_named_by_the_converter(recorder, tmp_path, victim):
    agent_turn(recorder.tracer)
    spans = recorder.take()
    path = tmp_path / "trace.pb"
    path.write_bytes(encode_spans(spans).SerializeToString())
    done = runs_import_from_path(path, user=victim[0])
    trace_id = format(spans[0].context.trace_id, "032x")
    assert done.first.run.run_id == f"otlp-{trace_id}" and done.first.events > 0
