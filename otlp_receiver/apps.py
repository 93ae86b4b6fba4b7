from django.apps import AppConfig


class OtlpReceiverConfig(AppConfig):
    """OTLP/HTTP in (issue 17, point 1): `POST /v1/traces` buffers spans per trace; a finished trace becomes a run."""

    default_auto_field = "django.db.models.BigAutoField"
    name = "otlp_receiver"
    verbose_name = "OTLP receiver"
