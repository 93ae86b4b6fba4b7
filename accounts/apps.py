from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "accounts"
    verbose_name = "Accounts and audit"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate, post_save

        from .signals import ensure_roles

        post_migrate.connect(ensure_roles, dispatch_uid="n17q-ensure-roles")

        from django.contrib.auth import signals as auth_signals

        from . import audit

        auth_signals.user_logged_in.connect(audit.on_user_logged_in, dispatch_uid="n17q-audit-sign-in")
        auth_signals.user_logged_out.connect(audit.on_user_logged_out, dispatch_uid="n17q-audit-sign-out")
        auth_signals.user_login_failed.connect(audit.on_user_login_failed, dispatch_uid="n17q-audit-sign-in-refused")

        from django.contrib.admin.models import LogEntry

        post_save.connect(audit.on_admin_log_entry, sender=LogEntry, dispatch_uid="n17q-audit-admin")
