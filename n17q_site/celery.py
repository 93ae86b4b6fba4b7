import os
from pathlib import Path

from celery import Celery
from celery.signals import import_modules

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "n17q_site.settings")

app = Celery("n17q")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def ensure_file_broker_folders() -> None:
    """The embedded file broker needs its folders before anything polls them (kombu does not make them)."""
    if str(app.conf.broker_url).startswith("filesystem://"):
        options = app.conf.broker_transport_options or {}
        for key in ("data_folder_in", "data_folder_out", "processed_folder", "control_folder"):
            if options.get(key):
                Path(options[key]).mkdir(parents=True, exist_ok=True)


@import_modules.connect
def _on_import_modules(**kwargs: object) -> None:
    ensure_file_broker_folders()
