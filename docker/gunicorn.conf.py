"""gunicorn's settings for N17Q (docker/compose.yaml, the load benchmark). Environment variables override.

Sync workers: every request is short except a bundle upload, and an upload is streamed to a temporary file
and imported within its own request. `WEB_CONCURRENCY` is gunicorn's own variable for the number of workers.
"""

import multiprocessing
import os

bind = os.environ.get("N17Q_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("WEB_CONCURRENCY", min(2 * multiprocessing.cpu_count() + 1, 9)))
worker_class = "sync"
# An import of a large bundle (N17Q_MAX_BUNDLE_BYTES) runs inside its request.
timeout = int(os.environ.get("N17Q_WEB_TIMEOUT_S", "300"))
graceful_timeout = 30
# Restart a worker now and then, so that a slow leak cannot grow without bound.
max_requests = 2000
max_requests_jitter = 200
# The heartbeat files gunicorn's arbiter watches: on tmpfs, never on a slow or read-only disk.
worker_tmp_dir = "/dev/shm" if os.path.isdir("/dev/shm") else None
# Requests are logged by the application (one JSON line each, n17q_site/logs.py); gunicorn logs only its own events.
accesslog = None
errorlog = "-"
# Only a proxy named here may say the request came over HTTPS (X-Forwarded-Proto; Django's SECURE_PROXY_SSL_HEADER).
forwarded_allow_ips = os.environ.get("N17Q_FORWARDED_ALLOW_IPS", "127.0.0.1")
# gunicorn 27's runtime control socket: unused here, and its default path is under $HOME (read-only in the image,
# and shared between two gunicorns on one machine). Older gunicorns ignore the unknown name.
control_socket_disable = True
