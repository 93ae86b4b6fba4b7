"""The span an event of a converted OpenTelemetry trace came from, shown beside the event (issue 17, point 2:
"unmapped attributes are kept, the raw span is viewable from the event").

A converted event names its span in its `otlp` field (n17q_engine.formats.otlp, docs/formats/otlp.md):
`{span, blob, bytes: [offset, length], resource_bytes?, scope_bytes?}` when the run keeps the protobuf original
(the span is read from those bytes of it, with the resource and scope it was sent under), or `{span, blob}` naming a
`source-trace` blob (JSON, a few dozen spans) that holds it. Either way only the span is read and shown, not a 26 MB
original or a 32 KiB chunk of neighbours. What cannot be shown says why (bytes expired, masked past decoding,
not held by the run), never nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from n17q_engine.formats import ConversionError
from n17q_engine.formats.otlp import parse_byte_range, source_span_from_bytes, source_span_from_chunk

from .blob_access import blob_for_run
from .blob_preview import JsonMember, _json_members
from .models import Run

# A span is read whole, up to this many bytes (the exporter's spans are kilobytes; a 4 MiB attribute is a blob's
# business): anything larger is a download.
MAX_SPAN_BYTES = 4 * 1024 * 1024
# A source-trace blob is about 32 KiB; one holding a single very large span may be bigger.
MAX_CHUNK_BYTES = 16 * 1024 * 1024


@dataclass
class SourceSpan:
    span_id: str
    digest: str  # the blob the span is read from
    form: str  # "original" (a byte range of the protobuf export) or "source-trace" (a JSON blob)
    value: dict[str, Any] | None = None  # {span, scope, resource} as read
    problem: str = ""  # why it is not shown, when it is not

    @property
    def members(self) -> list[JsonMember]:
        """The value's members rendered: the span always open, its scope and resource folded when long."""
        members = _json_members(self.value) if self.value is not None else []
        for member in members:
            member.folded = member.folded and member.key != "span"
        return members


def source_span_of(run: Run, body: dict[str, Any]) -> SourceSpan | None:
    """The event's source span, read from the run's blobs; None when the event names no span."""
    ref = body.get("otlp")
    if not isinstance(ref, dict) or not isinstance(ref.get("span"), str) or not isinstance(ref.get("blob"), str):
        return None
    span_id, digest = ref["span"][:64], ref["blob"][:71]
    span_at = parse_byte_range(ref.get("bytes"))
    shown = SourceSpan(span_id=span_id, digest=digest, form="original" if span_at else "source-trace")
    held = blob_for_run(run, digest)
    if held is None:
        shown.problem = "the run does not hold the blob this span is kept in"
        return shown
    run_blob, handle = held
    with handle:
        if run_blob.bytes_removed:
            shown.problem = "the retention sweep removed the bytes this span was kept in"
            return shown
        try:
            if span_at is not None:
                shown.value = _from_original(handle, run_blob.blob.size, span_at, ref, span_id)
            else:
                if run_blob.blob.size > MAX_CHUNK_BYTES:
                    shown.problem = f"the blob holding the span is larger than {MAX_CHUNK_BYTES} bytes: download it"
                    return shown
                found = source_span_from_chunk(handle.read(MAX_CHUNK_BYTES), span_id)
                if found is None:
                    shown.problem = f"the source-trace blob holds no span {span_id}"
                    return shown
                shown.value = found
        except ConversionError as exc:
            shown.problem = str(exc)
        except OSError:
            shown.problem = "the blob store could not be read"
    return shown


def _from_original(
    handle: Any, size: int, span_at: tuple[int, int], ref: dict[str, Any], span_id: str
) -> dict[str, Any]:
    def read(at: tuple[int, int] | None, what: str) -> bytes | None:
        if at is None:
            return None
        offset, length = at
        if length > MAX_SPAN_BYTES:
            raise ConversionError(f"the {what} is larger than {MAX_SPAN_BYTES} bytes: download the original")
        if offset + length > size:
            raise ConversionError(f"the {what}'s byte range lies outside the original ({size} bytes)")
        handle.seek(offset)
        return handle.read(length)

    span_bytes = read(span_at, "span")
    assert span_bytes is not None
    shown = source_span_from_bytes(
        span_bytes,
        read(parse_byte_range(ref.get("resource_bytes")), "resource"),
        read(parse_byte_range(ref.get("scope_bytes")), "scope"),
    )
    if shown["span"].get("span_id") != span_id:
        # The range does not hold this span: the secret scan overwrote bytes of the original that framed it.
        raise ConversionError(
            "the bytes at the span's range are not that span (the secret scan masked part of the original): "
            "download the original"
        )
    return shown
