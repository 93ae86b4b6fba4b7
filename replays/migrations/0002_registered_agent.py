"""Registered agents (issue 18): an admin's agent program as a replay decider (`agent:<name>`), and a replay's live
model connection (base URL and credential name only)."""

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("replays", "0001_initial"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.AddField(
            model_name="replay",
            name="model_connection",
            field=models.JSONField(blank=True, default=dict),
        ),
        migrations.CreateModel(
            name="RegisteredAgent",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(max_length=40, unique=True)),
                ("folder", models.CharField(max_length=1000)),
                ("command", models.JSONField()),
                ("digest", models.CharField(max_length=71)),
                ("requirements", models.TextField(blank=True, default="")),
                ("requirements_digest", models.CharField(blank=True, default="", max_length=71)),
                ("environment", models.CharField(blank=True, default="", max_length=1000)),
                ("installed", models.JSONField(default=list)),
                ("registered_at", models.DateTimeField(auto_now_add=True)),
                (
                    "registered_by",
                    models.ForeignKey(
                        blank=True,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
            options={"ordering": ["name"]},
        ),
    ]
