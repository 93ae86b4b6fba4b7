"""The requests and names buffered before the receiver masked them on arrival (issue 32): every chunk still stored
(a receiving, refused or late trace's) masked as `otlp_receiver.services.batch_mask` masks a request now, byte for
byte so that it still parses, and every trace's root span name and service name masked as text. In steps of
CHUNK_STEP rows, each its own statement (not one transaction), so that a large table is not held locked at once and
an interrupted run goes on where it stopped; a chunk nothing is found in is not written."""

import zlib

from django.db import migrations

CHUNK_STEP = 200


def mask(apps, schema_editor):
    # Imported here, not at the top: a migration module is loaded for every migrate, the scanner's rules only when
    # this one runs.
    from n17q_secrets import scanning
    from runs.secret_scan import mask_otlp_protobuf

    TraceChunk = apps.get_model("otlp_receiver", "TraceChunk")
    ReceivedTrace = apps.get_model("otlp_receiver", "ReceivedTrace")
    last_pk = 0
    while True:
        step = list(TraceChunk.objects.filter(pk__gt=last_pk).order_by("pk").values_list("pk", "data")[:CHUNK_STEP])
        if not step:
            break
        for pk, data in step:
            found: list[dict[str, str]] = []
            stored = bytes(data)
            try:
                request = zlib.decompress(stored)
            except zlib.error:  # not what the receiver writes: its printable runs are masked as they are
                masked = scanning.mask_binary(stored, "chunk", found)
            else:
                masked = zlib.compress(mask_otlp_protobuf(request, "spans", found), 1)
            if found:
                TraceChunk.objects.filter(pk=pk).update(data=masked)
        last_pk = step[-1][0]
    named = ReceivedTrace.objects.exclude(root_name="", service_name="").order_by("pk")
    for pk, root_name, service_name in named.values_list("pk", "root_name", "service_name").iterator(chunk_size=500):
        found = []
        root = scanning.mask_text(root_name, "root span name", found)
        service = scanning.mask_text(service_name, "service.name", found)
        if found:
            ReceivedTrace.objects.filter(pk=pk).update(root_name=root[:200], service_name=service[:200])


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("otlp_receiver", "0004_remove_finalized_traces_chunks"),
    ]

    operations = [migrations.RunPython(mask, migrations.RunPython.noop)]
