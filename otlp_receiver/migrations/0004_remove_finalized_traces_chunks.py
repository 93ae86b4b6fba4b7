"""The chunks of traces finalized before their removal was part of finalising (issue 31, point 2; issue 32): each is a
second copy of spans its run holds (as events and as its `source-otlp` original), unmasked. Removed here as the
finalisation now removes them: not a refused trace's (its spans are read on its page), not a late addendum's, not
those of a trace whose run is gone. In steps of TRACE_STEP traces, each its own statement (the migration is not one
transaction), so that a large table is not held locked at once and an interrupted run goes on where it stopped.
SQLite keeps the freed pages in the file for its next writes; `VACUUM` gives them back (docs/otlp-receiver.md)."""

from django.db import migrations

TRACE_STEP = 500


def remove(apps, schema_editor):
    ReceivedTrace = apps.get_model("otlp_receiver", "ReceivedTrace")
    TraceChunk = apps.get_model("otlp_receiver", "TraceChunk")
    finalized = ReceivedTrace.objects.filter(state="finalized", run__isnull=False).order_by("pk")
    last_pk = 0
    while True:
        step = list(finalized.filter(pk__gt=last_pk).values_list("pk", flat=True)[:TRACE_STEP])
        if not step:
            return
        TraceChunk.objects.filter(trace_id__in=step, late=False).delete()
        last_pk = step[-1]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("otlp_receiver", "0003_chunk_trace_index_once"),
    ]

    operations = [migrations.RunPython(remove, migrations.RunPython.noop)]
