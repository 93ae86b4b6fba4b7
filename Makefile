# One command runs the product (make demo), one runs every check CI runs (make test).
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PG_URL ?= postgres://postgres@127.0.0.1:5432/test
REDIS_TEST_URL ?= redis://127.0.0.1:6379/15
DEMO_PORT ?= 8017

.PHONY: install check lint test test-deep test-sqlite test-postgres bench demo demo-reset demo-data stack clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(BIN)/python scripts/check_storage_gate.py
	N17Q_DATA_DIR=$$(mktemp -d) $(BIN)/mypy

check: lint
	N17Q_DATA_DIR=$$(mktemp -d) $(BIN)/python manage.py check
	N17Q_DATA_DIR=$$(mktemp -d) $(BIN)/python manage.py makemigrations --check --dry-run

# Every check CI runs: lint, format, import contracts, types, Django checks, the tests on the embedded database
# (SQLite, browser tests included) and again on PostgreSQL. Each step runs even when an earlier one failed; one
# summary at the end; non-zero exit when any failed (scripts/run_checks.py).
test: $(STAMP)
	PG_URL=$(PG_URL) REDIS_TEST_URL=$(REDIS_TEST_URL) VENV=$(VENV) $(BIN)/python scripts/run_checks.py

# make test with every property test at the example count its author asked for, and at least 500
# (tests/hypothesis_budget.py); make test runs them bounded.
test-deep: $(STAMP)
	HYPOTHESIS_PROFILE=deep PG_URL=$(PG_URL) REDIS_TEST_URL=$(REDIS_TEST_URL) VENV=$(VENV) $(BIN)/python scripts/run_checks.py

TEST_WORKERS ?= 3
test-sqlite: $(STAMP)
	N17Q_DATA_DIR=$$(mktemp -d) REDIS_TEST_URL=$(REDIS_TEST_URL) $(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal

test-postgres: $(STAMP)
	N17Q_DATA_DIR=$$(mktemp -d) DATABASE_URL=$(PG_URL) N17Q_TEST_POSTGRES=1 N17Q_TEST_DATABASE_ONLY=1 \
	  REDIS_TEST_URL=$(REDIS_TEST_URL) N17Q_TEST_DATABASE_NAME=test_n17q_$$$$ \
	  $(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal -m "not browser" --ignore=tests/engine

# Performance budgets (DESIGN §9); see docs/benchmarks.md. Not part of make test: they measure, not assert.
bench: $(STAMP)
	$(BIN)/python -m benchmarks.run

demo-data: $(STAMP)
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py load_demo

# The demo keeps its data folder (./var, or N17Q_DATA_DIR) from one start to the next; demo-reset removes that
# folder, and only it, and starts afresh.
demo: $(STAMP)
	bash docker/demo.sh $(DEMO_PORT)

demo-reset: $(STAMP)
	bash docker/demo.sh --reset $(DEMO_PORT)

# Production shape under Docker Compose: PostgreSQL, Redis (noeviction), gunicorn, a Celery worker (docker/).
stack:
	bash docker/stack.sh

clean:
	rm -rf $(VENV) var staticfiles .pytest_cache .ruff_cache .mypy_cache
