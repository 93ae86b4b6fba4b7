from django.apps import AppConfig


class ConsoleConfig(AppConfig):
    name = "console"
    verbose_name = "Console"

    def ready(self) -> None:
        from django.core import checks

        from .gated_fields import check_gated_columns

        # issue 32: every text, char and JSON column is gated or allowlisted with its reason (`manage.py check`).
        checks.register(check_gated_columns, "storage_gate")
