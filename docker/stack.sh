#!/usr/bin/env bash
# `make stack`: N17Q in production shape under Docker Compose (docker/compose.yaml): PostgreSQL, Redis, the
# migrations, gunicorn and a Celery worker. Writes docker/.env with fresh secrets the first time (git-ignored).
set -euo pipefail
cd "$(dirname "$0")"
if ! docker compose version >/dev/null 2>&1; then
  echo "make stack needs Docker with the compose plugin (docker compose version)" >&2
  exit 1
fi
if [ ! -f .env ]; then
  umask 077
  {
    echo "COMPOSE_PROJECT_NAME=n17q"
    echo "N17Q_SECRET_KEY=$(python3 -c 'import secrets; print(secrets.token_urlsafe(50))')"
    echo "POSTGRES_PASSWORD=$(python3 -c 'import secrets; print(secrets.token_urlsafe(24))')"
  } > .env
  echo "wrote docker/.env with fresh secrets"
fi
docker compose --env-file .env up --build --detach --wait
PORT="$(grep -E '^N17Q_PORT=' .env | cut -d= -f2 || true)"
cat <<TXT

N17Q is at http://localhost:${PORT:-8000}/   (health: http://localhost:${PORT:-8000}/health/)

  docker compose -f docker/compose.yaml exec web python manage.py createsuperuser   # a first admin
  docker compose -f docker/compose.yaml exec web python manage.py load_demo         # or the demo's users and runs
  docker compose -f docker/compose.yaml up --detach --scale worker=3                # more workers on this machine
  docker compose -f docker/compose.yaml down                                        # stop (volumes are kept)
TXT
