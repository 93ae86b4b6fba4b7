"""Original digests are keyed now (`intake.original_digest`): the plain `sha256:` digests kept before are dropped
from staged recordings, where they were an offline oracle for a low-entropy secret the capture held. (A review
event that quoted one is history and stays as written.)"""

from django.db import migrations


def drop_plain_digests(apps, schema_editor):
    StagedRecording = apps.get_model("fixtures_review", "StagedRecording")
    StagedRecording.objects.filter(original_digest__startswith="sha256:").update(original_digest="")


class Migration(migrations.Migration):
    dependencies = [("fixtures_review", "0005_token_is_an_accounts_model")]

    operations = [migrations.RunPython(drop_plain_digests, migrations.RunPython.noop)]
