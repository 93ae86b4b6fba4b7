from django.apps import AppConfig


class ReplaysConfig(AppConfig):
    name = "replays"
    verbose_name = "Replays"
    default_auto_field = "django.db.models.BigAutoField"
