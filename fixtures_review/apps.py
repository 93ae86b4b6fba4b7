from django.apps import AppConfig


class FixturesReviewConfig(AppConfig):
    name = "fixtures_review"
    verbose_name = "Fixture review"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # The retention sweep (runs.retention) learns which recordings hold a digest and drops their inline copies.
        from .retention import connect

        connect()
