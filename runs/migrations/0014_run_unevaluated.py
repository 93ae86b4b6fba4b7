"""Run.unevaluated (DESIGN §10): the lineage checks that had nothing to judge in a run, kept at import.

Runs imported before this migration are filled in from what they hold: their events per kind (Run.kind_counts) and
their account claims (the (run, kind, seq) index). This calls the engine's own rule (`unevaluated_checks`) rather
than a frozen copy: the field states what today's checker could not judge, and a run re-checked later (the lineage
command) is answered by the same rule."""

from django.db import migrations, models

from n17q_engine.lineage import claim_is_judged, unevaluated_checks

RUN_CHUNK = 100


def backfill(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    Event = apps.get_model("runs", "Event")
    last_pk = 0
    while True:
        chunk = list(Run.objects.filter(pk__gt=last_pk).order_by("pk").values_list("pk", "kind_counts")[:RUN_CHUNK])
        if not chunk:
            return
        for pk, kind_counts in chunk:
            kinds = {k: v for k, v in (kind_counts or {}).items() if isinstance(v, int)}
            judged, unevaluated_claims = 0, {}
            claims = Event.objects.filter(run_id=pk, kind="account.claim").order_by("seq")
            for event_id, body in claims.values_list("event_id", "body").iterator(chunk_size=2000):
                body = body if isinstance(body, dict) else {}
                if claim_is_judged(body):
                    judged += 1
                elif isinstance(body.get("unevaluated"), dict) and body.get("claim_kind") in (
                    "validation",
                    "completion",
                ):
                    tools = body["unevaluated"].get("tools")
                    unevaluated_claims[event_id] = (
                        tuple(t for t in tools if isinstance(t, str))
                        if isinstance(tools, list)
                        else ("an excluded tool",)
                    )
            kinds["account.claim"] = judged
            Run.objects.filter(pk=pk).update(unevaluated=unevaluated_checks(kinds, unevaluated_claims))
        last_pk = chunk[-1][0]


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0013_run_title_and_search"),
    ]

    operations = [
        migrations.AddField(
            model_name="run",
            name="unevaluated",
            field=models.JSONField(default=list),
        ),
        migrations.RunPython(backfill, migrations.RunPython.noop),
    ]
