"""A kept OTLP protobuf original passes the secret scan as the texts it holds (issue 17): gitleaks' own labelled
true positives, each the value of a span attribute written by the real OpenTelemetry SDK and encoded by its OTLP
exporter, are masked in the stored bytes, and the masked original still parses with every span where its events
say it is (runs/secret_scan.py, n17q_engine.formats.otlp.otlp_strings, n17q_secrets.scanning.mask_binary).

In the raw protobuf a value sits between a length byte and the next field's tag, either of which may be a letter or
a digit: scanned as printable runs (a generic binary), a token glued to them fails the boundaries its rule asks for,
and a mask widened over "its token" overwrites the framing. Both are measured here against the corpus.
"""

from __future__ import annotations

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from n17q_engine.formats.otlp import span_byte_ranges
from n17q_secrets import scanning
from n17q_secrets.reference import reference_rules
from runs.secret_scan import _mask_blob_bytes
from tests.fixtures_review import corpus, gitleaks_corpus
from tests.fixtures_review.test_gitleaks_corpus import _public_prefix


@pytest.fixture(scope="module")
def samples() -> list[tuple[str, str, set[str], tuple[str, ...]]]:
    """(rule, true positive, the secrets its rule takes from it, the rule's keywords) for every labelled sample."""
    rules = reference_rules()
    by_id = {r.id: r for r in rules.rules}
    out = []
    for labelled in gitleaks_corpus.load().rules:
        rule = by_id.get(labelled.rule)
        if rule is None:
            continue
        for tp in labelled.tps:
            secrets = {
                h.secret if len(h.secret) >= scanning._SHORTEST_REFERENCE_SECRET else h.match
                for h in rules.find_by(rule, tp)
            }
            out.append((labelled.rule, tp, secrets, rule.keywords))
    return out


def _original(values: list[str]) -> bytes:
    """One export: a span per value, the value alone in an attribute (as a harness records a tool's output)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "corpus-agent"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("n17q-tests")
    with tracer.start_as_current_span("invoke_agent corpus", attributes={"gen_ai.operation.name": "invoke_agent"}):
        for n, value in enumerate(values):
            with tracer.start_as_current_span(
                "execute_tool fetch",
                attributes={"gen_ai.operation.name": "execute_tool", "app.value": value, "app.n": n},
            ):
                pass
    provider.shutdown()
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def _leaked(samples, original: bytes, stored: bytes) -> list[str]:
    """The rules whose sample left its secret, or an 8-character piece of it past its public prefix, in the stored
    bytes of its own span (read at the span's range in the original: masking never moves bytes)."""
    request = ExportTraceServiceRequest.FromString(original)
    ranges = span_byte_ranges(original)
    assert ranges is not None
    text = stored.decode("latin-1")
    leaks = []
    for span in request.resource_spans[0].scope_spans[0].spans:
        n = {kv.key: kv.value for kv in span.attributes}.get("app.n")
        if n is None:
            continue  # the root
        rule, tp, secrets, keywords = samples[n.int_value]
        offset, length = ranges[(span.trace_id.hex(), span.span_id.hex())].span
        held = text[offset : offset + length]
        for secret in secrets:
            context = tp.replace(secret, "")  # what the sample says besides its secret
            pieces = (secret[i : i + 8] for i in range(_public_prefix(secret, keywords), len(secret) - 7))
            if secret in held or any(p in held and p not in context for p in pieces):
                leaks.append(rule)
    return leaks


def test_every_corpus_secret_in_a_span_attribute_is_masked_and_every_span_stays_where_it_was(samples):
    original = _original([tp for _rule, tp, _s, _k in samples])
    ranges = span_byte_ranges(original)
    found: list[dict[str, str]] = []
    masked = _mask_blob_bytes(original, "application/x-protobuf", found)
    leaks = _leaked(samples, original, masked)
    # The same bytes scanned as a generic binary (printable runs, masks widened over tokens): the way an original
    # was scanned before, for the figure beside ours.
    generic = scanning.mask_binary(original, "blob", [])
    generic_leaks = _leaked(samples, original, generic)
    print(
        f"\n{len(samples)} corpus secrets in span attributes: {len(leaks)} left in the stored original "
        f"(scanned as a generic binary: {len(generic_leaks)}); generic masking leaves it parseable: "
        f"{_parses(generic)}"
    )
    assert leaks == [], sorted(set(leaks))[:20]
    assert len(masked) == len(original) and found
    # Masked byte for byte, never past a value: it still parses, and every span is where its events say.
    assert _parses(masked) and span_byte_ranges(masked) == ranges


def _parses(data: bytes) -> bool:
    try:
        ExportTraceServiceRequest.FromString(data)
    except Exception:
        return False
    return True


def test_a_utf16_secret_in_a_string_or_bytes_value_is_masked_where_it_sits():
    """Text written as UTF-16 (a NUL after every character) inside a span: in a string attribute (the SDK keeps what
    decodes as UTF-8) and in a bytes value (built on the exporter's own message). Found in the texts and overwritten
    where it sits in the raw bytes; the request still parses and every span stays where it was."""
    in_string, in_bytes = "ghp_" + corpus.rnd(36), "ghp_" + corpus.rnd(36)
    request = ExportTraceServiceRequest.FromString(
        _original([f"note {in_string} end".encode("utf-16-le").decode("utf-8"), "plain"])
    )
    span = request.resource_spans[0].scope_spans[0].spans[-1]
    held = span.attributes.add()
    held.key = "app.blob"
    held.value.bytes_value = f"note {in_bytes} end".encode("utf-16-le")
    original = request.SerializeToString()
    found: list[dict[str, str]] = []
    masked = _mask_blob_bytes(original, "application/x-protobuf", found)
    for token in (in_string, in_bytes):
        assert token.encode("utf-16-le") in original and token.encode("utf-16-le") not in masked
    assert {f["rule"] for f in found} and len(masked) == len(original)
    assert _parses(masked) and span_byte_ranges(masked) == span_byte_ranges(original)
