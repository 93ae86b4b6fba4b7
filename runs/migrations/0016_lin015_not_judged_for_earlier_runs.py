"""LIN015 (claim contradicted on the artifact lineage) is newer than the runs already imported: their stored findings
were made without it. Saying nothing would read as "LIN015: no findings", so each such run lists LIN015 under
`unevaluated` with the reason, until it is imported again (DESIGN §10: a check that had no chance to judge is "not
evaluated", never clean). `lineage RUN` judges such a run with today's checker at any time."""

from django.db import migrations

REASON = "the run was imported before this check existed; `lineage RUN` judges it with today's checker"
RUN_CHUNK = 500


def mark(apps, schema_editor):
    Run = apps.get_model("runs", "Run")
    last_pk = 0
    while True:
        chunk = list(Run.objects.filter(pk__gt=last_pk).order_by("pk").values_list("pk", "unevaluated")[:RUN_CHUNK])
        if not chunk:
            return
        for pk, unevaluated in chunk:
            entries = [e for e in (unevaluated or []) if isinstance(e, dict)]
            if any(e.get("code") == "LIN015" for e in entries):
                continue
            entries.append({"code": "LIN015", "reason": REASON})
            entries.sort(key=lambda e: str(e.get("code", "")))
            Run.objects.filter(pk=pk).update(unevaluated=entries)
        last_pk = chunk[-1][0]


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0015_blob_retention"),
    ]

    operations = [migrations.RunPython(mark, migrations.RunPython.noop)]
