#!/usr/bin/env bash
# `make demo`: the console on one machine with nothing else running. SQLite, the file-based Celery
# broker, a real worker process, the demo loaded, then the URL and the logins printed.
#
#   demo.sh [PORT]           start (keeps the data of the last start)
#   demo.sh --reset [PORT]   remove the demo's data folder first, then start afresh (`make demo-reset`)
#   demo.sh --data-dir       print the data folder the demo and the CLI share, and nothing else
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
RESET=0
case "${1:-}" in
  --reset) RESET=1; shift ;;
  --data-dir) ;;
esac
unset DATABASE_URL REDIS_URL

# The data folder is the settings' (N17Q_DATA_DIR, else ./var), the one `python manage.py …` uses from this
# checkout: the README's commands after `make demo` read the demo's database, not another one.
DATA_DIR="$(N17Q_DEBUG=1 $BIN/python -c 'import os
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "n17q_site.settings")
from django.conf import settings
print(settings.DATA_DIR)')"
if [ "${1:-}" = "--data-dir" ]; then
  echo "$DATA_DIR"
  exit 0
fi
PORT="${1:-8017}"
export N17Q_DATA_DIR="$DATA_DIR"

if [ "$RESET" = 1 ] && [ -e "$DATA_DIR" ]; then
  # Only a folder that is the demo's (or empty): a mistyped N17Q_DATA_DIR must not remove someone's files.
  if [ -e "$DATA_DIR/n17q.sqlite3" ] || [ -e "$DATA_DIR/demo.json" ] || [ -z "$(ls -A "$DATA_DIR")" ]; then
    echo "Removing the demo's data folder $DATA_DIR"
    rm -rf "$DATA_DIR"
  else
    echo "Not removing $DATA_DIR: it holds no demo database (n17q.sqlite3); remove it yourself if you mean to" >&2
    exit 1
  fi
fi
mkdir -p "$DATA_DIR"
if [ -e "$DATA_DIR/n17q.sqlite3" ]; then
  echo "Keeping the data of the last start in $DATA_DIR (runs, reviews, replays); \`make demo-reset\` starts afresh"
else
  echo "Starting a fresh demo in $DATA_DIR"
fi

# Not debug: people see the console's own 404 and 500 pages, not Django's debug pages. What production adds
# on top (HTTPS redirect, secure cookies, HSTS) would lock a browser out of http://127.0.0.1, so it is off here.
# The key is generated once into the data folder; commands run against that folder read it too (settings.py).
if [ ! -s "$DATA_DIR/secret_key" ]; then
  (umask 077 && $BIN/python -c 'import secrets; print(secrets.token_urlsafe(50))' >"$DATA_DIR/secret_key")
fi
# The demo prices its models from an EXAMPLE table (docs/examples/model-prices.json: illustrative numbers, not any
# provider's current prices) so a person sees what the cost view does; set N17Q_MODEL_PRICES(_FILE) to use your own.
if [ -z "${N17Q_MODEL_PRICES:-}" ] && [ -z "${N17Q_MODEL_PRICES_FILE:-}" ]; then
  export N17Q_MODEL_PRICES_FILE="$PWD/docs/examples/model-prices.json"
fi
export N17Q_DEBUG=0 N17Q_SSL_REDIRECT=0 N17Q_SECURE_COOKIES=0 N17Q_HSTS_SECONDS=0
export N17Q_LOG_FORMAT="${N17Q_LOG_FORMAT:-plain}"
export N17Q_ALLOWED_HOSTS="${N17Q_ALLOWED_HOSTS:-127.0.0.1,localhost,[::1]}"
# Static files are served by WhiteNoise from the collected copy, as in production.
export N17Q_STATIC_ROOT="$DATA_DIR/static"
$BIN/python manage.py collectstatic --noinput >/dev/null

$BIN/python manage.py migrate --noinput >/dev/null
$BIN/python manage.py load_demo --json > "$DATA_DIR/demo.json"

# -B: the worker also runs the beat scheduler (the retention sweep); one worker, so one scheduler.
$BIN/celery -A n17q_site worker -B --loglevel=INFO --concurrency=1 --hostname="demo@%h" \
  >"$DATA_DIR/worker.log" 2>&1 &
WORKER=$!
trap 'kill $WORKER 2>/dev/null || true' EXIT INT TERM

$BIN/python - "$DATA_DIR/demo.json" "$PORT" <<'PY'
import json, sys
demo = json.load(open(sys.argv[1]))
print(f"\nN17Q is at http://127.0.0.1:{sys.argv[2]}/\n")
print("Logins (fresh passwords on every start):")
for u in demo["users"]:
    print(f"  {u['username']:<9} {u['password']}")
print("\nDemo runs:")
for r in demo["runs"]:
    print(f"  {r['id']:<28} {r['title']}")
folder = sys.argv[1].rsplit('/', 1)[0]
print(f"\nData folder: {folder} (`python manage.py …` from this checkout uses it too)")
print(f"Worker log: {folder}/worker.log   (Ctrl-C stops both)\n")
PY
# Not exec: the shell stays to stop the worker when the server ends (Ctrl-C or a signal).
$BIN/python manage.py runserver "127.0.0.1:$PORT" --noreload
