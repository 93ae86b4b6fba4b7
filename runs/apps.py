from django.apps import AppConfig


class RunsConfig(AppConfig):
    name = "runs"
    verbose_name = "Runs"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from .signals import ensure_roles

        post_migrate.connect(ensure_roles, dispatch_uid="n17q-ensure-roles")
