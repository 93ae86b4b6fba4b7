"""What the receiver refuses, and how: the status OTLP/HTTP names, a google.rpc.Status of one line in the request's
encoding, and nothing stored. Bodies are the real exporter's encoding of SDK spans (its `encode_spans`), then cut,
mislabelled, inflated or sent without the right token.
"""

from __future__ import annotations

import gzip
import json

import pytest
from django.urls import reverse
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.trace.v1.trace_pb2 import Span

from accounts.models import HarnessToken
from otlp_receiver.models import ReceivedTrace, TraceChunk
from tests.runs.test_api import token_for

from .conftest import agent_turn

pytestmark = pytest.mark.django_db

PROTOBUF, JSON = "application/x-protobuf", "application/json"


@pytest.fixture
def body(recorder) -> bytes:
    agent_turn(recorder.tracer)
    return encode_spans(recorder.take()).SerializeToString()


def post(client, data: bytes, key: str | None, *, content_type: str = PROTOBUF, **headers):
    if key is not None:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    return client.post(reverse("otlp:export-traces"), data=data, content_type=content_type, **headers)


def status_of(response) -> tuple[int, str]:
    """google.rpc.Status fields 1 (code) and 2 (message), read from the protobuf bytes or the JSON."""
    if response["Content-Type"].startswith(JSON):
        value = response.json()
        return value["code"], value["message"]
    data = response.content
    assert data[0] == 0x08, data[:10]
    code, message_tag, length = data[1], data[2], data[3]
    assert message_tag == 0x12
    if length & 0x80:  # two-byte length
        length, start = (length & 0x7F) | (data[4] << 7), 5
    else:
        start = 4
    return code, data[start : start + length].decode()


def assert_nothing_stored() -> None:
    assert ReceivedTrace.objects.count() == 0 and TraceChunk.objects.count() == 0


def test_it_refuses_a_truncated_protobuf_with_400(client, body, operator_key):
    response = post(client, body[: len(body) // 2], operator_key)
    assert response.status_code == 400 and response["Content-Type"] == PROTOBUF
    code, message = status_of(response)
    assert code == 3 and "not an OTLP ExportTraceServiceRequest in protobuf" in message and "\n" not in message
    assert_nothing_stored()


def test_it_refuses_json_that_is_not_otlp_with_400_in_json(client, operator_key):
    response = post(client, b'{"resourceSpans": "many"}', operator_key, content_type=JSON)
    assert response.status_code == 400 and response["Content-Type"] == JSON
    assert (
        response.json()["code"] == 3 and "not an OTLP ExportTraceServiceRequest in JSON" in response.json()["message"]
    )
    assert post(client, b"{not json", operator_key, content_type=JSON).status_code == 400
    assert_nothing_stored()


@pytest.mark.parametrize("content_type", ["text/plain", "application/grpc", "application/x-www-form-urlencoded"])
def test_it_refuses_a_content_type_it_does_not_read_with_415(client, body, operator_key, content_type):
    response = post(client, body, operator_key, content_type=content_type)
    assert response.status_code == 415
    assert "is not OTLP" in status_of(response)[1]
    assert_nothing_stored()


def test_it_refuses_an_unknown_content_encoding_with_415(client, body, operator_key):
    response = post(client, body, operator_key, HTTP_CONTENT_ENCODING="br")
    assert response.status_code == 415 and "Content-Encoding 'br'" in status_of(response)[1]
    assert_nothing_stored()


def test_it_refuses_a_gzip_bomb_with_413_without_unpacking_it(client, operator_key, settings):
    settings.N17Q_OTLP_MAX_DECODED_BYTES = 1024 * 1024
    bomb = gzip.compress(bytes(64 * 1024 * 1024))  # 64 MiB of zeros in about 64 KiB
    assert len(bomb) < settings.N17Q_OTLP_MAX_BODY_BYTES
    response = post(client, bomb, operator_key, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 413 and "decompresses to more than 1048576 bytes" in status_of(response)[1]
    assert_nothing_stored()


def test_it_refuses_an_oversized_body_with_413(client, body, operator_key, settings):
    settings.N17Q_OTLP_MAX_BODY_BYTES = 1024
    assert len(body) > 1024
    response = post(client, body, operator_key)
    assert response.status_code == 413 and "larger than 1024 bytes" in status_of(response)[1]
    assert_nothing_stored()


def test_it_refuses_a_cut_gzip_body_with_400(client, body, operator_key):
    packed = gzip.compress(body)
    response = post(client, packed[:-12], operator_key, HTTP_CONTENT_ENCODING="gzip")
    assert response.status_code == 400 and "gzip body" in status_of(response)[1]
    assert_nothing_stored()


def test_it_answers_401_without_a_token_and_403_with_the_wrong_scope(client, body, role_user):
    missing = post(client, body, None)
    assert missing.status_code == 401 and missing["WWW-Authenticate"] == "Token"
    assert status_of(missing)[0] == 16
    assert post(client, body, "n17q_unknown").status_code == 401
    capture_only = token_for(role_user("operator", "capturer"), HarnessToken.Scope.CAPTURE)
    wrong_scope = post(client, body, capture_only)
    assert wrong_scope.status_code == 403 and status_of(wrong_scope) == (
        7,
        "this token's scopes do not allow this request",
    )
    viewer = token_for(role_user("viewer", "reader"), HarnessToken.Scope.IMPORT_RUNS)
    assert post(client, body, viewer).status_code == 403
    assert_nothing_stored()


def test_it_stores_the_valid_spans_and_answers_partial_success_for_the_rest(client, recorder, operator_key):
    agent_turn(recorder.tracer)
    request = encode_spans(recorder.take())
    spans = request.resource_spans[0].scope_spans[0].spans
    broken = Span()
    broken.CopyFrom(spans[0])
    broken.trace_id = b"\x00" * 16
    spans.append(broken)
    response = post(client, request.SerializeToString(), operator_key)
    assert response.status_code == 200 and response["Content-Type"] == PROTOBUF
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert answer.partial_success.rejected_spans == 1
    assert "valid 16-byte trace id" in answer.partial_success.error_message
    assert ReceivedTrace.objects.get().span_count == 3


def test_it_reads_otlp_json_with_hex_ids_and_answers_in_json(client, recorder, operator_key):
    from google.protobuf import json_format

    root = agent_turn(recorder.tracer)
    value = json_format.MessageToDict(encode_spans(recorder.take()))
    # OTLP JSON: ids in hex (proto3 JSON would write base64).
    import base64

    for rs in value["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for span in ss["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if key in span:
                        span[key] = base64.b64decode(span[key]).hex()
    response = post(client, json.dumps(value).encode(), operator_key, content_type=JSON)
    assert response.status_code == 200 and response["Content-Type"] == JSON and response.json() == {}
    trace = ReceivedTrace.objects.get()
    assert trace.trace_id == format(root.context.trace_id, "032x") and trace.span_count == 3 and trace.root_ended


def test_a_batch_of_several_traces_costs_queries_per_trace_not_per_span(
    client, recorder, operator_key, django_assert_num_queries
):
    for _ in range(3):
        agent_turn(recorder.tracer, tool_calls=20)  # 41 spans per trace
    data = encode_spans(recorder.take()).SerializeToString()
    # 4 for the token (look-up, last use) and the user's permissions (user, groups); 2 for the savepoint; per
    # request: create the new traces, lock them, insert the chunks; per trace: one update (3); the sweep for due
    # traces (once per half quiet period: the cache says when). 13 for 123 spans.
    with django_assert_num_queries(13):
        assert post(client, data, operator_key).status_code == 200
    assert sorted(ReceivedTrace.objects.values_list("span_count", flat=True)) == [41, 41, 41]
    assert TraceChunk.objects.count() == 3
    agent_turn(recorder.tracer, tool_calls=200)
    with django_assert_num_queries(10):  # one trace of 401 spans, no sweep this time
        assert post(client, encode_spans(recorder.take()).SerializeToString(), operator_key).status_code == 200
