from django.apps import AppConfig


class FixturesReviewConfig(AppConfig):
    name = "fixtures_review"
    verbose_name = "Fixture review"
    default_auto_field = "django.db.models.BigAutoField"
