# One command runs the product (make demo), one runs every check CI runs (make test).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PG_URL ?= postgres://postgres@127.0.0.1:5432/test
REDIS_TEST_URL ?= redis://127.0.0.1:6379/15
DEMO_PORT ?= 8017

.PHONY: install check lint test test-sqlite test-postgres bench demo demo-data stack clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check n17q_engine
	$(BIN)/lint-imports
	$(BIN)/mypy

check: lint
	N17Q_DATA_DIR=$$(mktemp -d) $(BIN)/python manage.py check
	N17Q_DATA_DIR=$$(mktemp -d) $(BIN)/python manage.py makemigrations --check --dry-run

# Every test on the embedded database (SQLite), then again on PostgreSQL: both are supported.
test: check test-sqlite test-postgres

test-sqlite: $(STAMP)
	N17Q_DATA_DIR=$$(mktemp -d) REDIS_TEST_URL=$(REDIS_TEST_URL) $(BIN)/pytest -q

test-postgres: $(STAMP)
	N17Q_DATA_DIR=$$(mktemp -d) DATABASE_URL=$(PG_URL) N17Q_TEST_POSTGRES=1 REDIS_TEST_URL=$(REDIS_TEST_URL) \
	  N17Q_TEST_DATABASE_NAME=test_n17q_$$$$ $(BIN)/pytest -q -m "not browser"

# Performance budgets (DESIGN §9); see docs/benchmarks.md. Not part of make test: they measure, not assert.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

demo-data: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py load_demo

demo: $(STAMP)
	bash docker/demo.sh $(DEMO_PORT)

# Production shape under Docker Compose: PostgreSQL, Redis (noeviction), gunicorn, a Celery worker (docker/).
stack:
	bash docker/stack.sh

clean:
	rm -rf $(VENV) var staticfiles .pytest_cache .ruff_cache .mypy_cache
