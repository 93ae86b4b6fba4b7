#!/usr/bin/env bash
# `make demo`: the console on one machine with nothing else running. SQLite, the file-based Celery
# broker, a real worker process, the demo loaded, then the URL and the logins printed.
set -euo pipefail
cd "$(dirname "$0")/.."
PORT="${1:-8017}"
BIN=.venv/bin
export N17Q_DATA_DIR="${N17Q_DATA_DIR:-$PWD/var/demo}"
mkdir -p "$N17Q_DATA_DIR"
unset DATABASE_URL REDIS_URL

$BIN/python manage.py migrate --noinput >/dev/null
$BIN/python manage.py load_demo --json > "$N17Q_DATA_DIR/demo.json"

$BIN/celery -A n17q_site worker --loglevel=INFO --concurrency=1 --hostname="demo@%h" \
  >"$N17Q_DATA_DIR/worker.log" 2>&1 &
WORKER=$!
trap 'kill $WORKER 2>/dev/null || true' EXIT INT TERM

$BIN/python - "$N17Q_DATA_DIR/demo.json" "$PORT" <<'PY'
import json, sys
demo = json.load(open(sys.argv[1]))
print(f"\nN17Q is at http://127.0.0.1:{sys.argv[2]}/\n")
print("Logins (fresh passwords on every start):")
for u in demo["users"]:
    print(f"  {u['username']:<9} {u['password']}")
print("\nDemo runs:")
for r in demo["runs"]:
    print(f"  {r['id']:<28} {r['title']}")
print(f"\nWorker log: {sys.argv[1].rsplit('/', 1)[0]}/worker.log   (Ctrl-C stops both)\n")
PY
# Not exec: the shell stays to stop the worker when the server ends (Ctrl-C or a signal).
$BIN/python manage.py runserver "127.0.0.1:$PORT" --noreload
