import os
from pathlib import Path

from celery import Celery
from celery.signals import before_task_publish, import_modules, worker_ready, worker_shutdown

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


@before_task_publish.connect
def _on_before_task_publish(**kwargs: object) -> None:
    ensure_file_broker_folders()  # the embedded broker's folders, in whichever process sends first


# Worker heartbeats for the health endpoint (replays/heartbeat.py): started once the worker is ready to consume.
@worker_ready.connect
def _on_worker_ready(sender: object = None, **kwargs: object) -> None:
    from replays.heartbeat import on_worker_ready

    on_worker_ready(sender)


@worker_shutdown.connect
def _on_worker_shutdown(sender: object = None, **kwargs: object) -> None:
    from replays.heartbeat import on_worker_shutdown

    on_worker_shutdown(sender)
