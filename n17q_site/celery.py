import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "n17q_site.settings")

app = Celery("n17q")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
