"""A staged recording's token is the accounts app's model now; same table, same column, same constraint: state only.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_initial'),
        ('fixtures_review', '0004_history_names_its_people'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='stagedrecording',
                    name='token',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='accounts.harnesstoken'),
                ),
    
            ],
            database_operations=[],
        ),
    ]
