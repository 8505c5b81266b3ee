# The two commands of the README: `make run` and `make test`. Both build the virtual
# environment they need from pyproject.toml with nothing but python3 (3.11+).
PYTHON ?= python3
PORT ?= 8000
VENV := .venv
BIN := $(VENV)/bin
RUN_STAMP := $(VENV)/.run-deps
TEST_STAMP := $(VENV)/.test-deps
DATA_DIR ?= var
STATIC_STAMP := $(DATA_DIR)/staticfiles/.collected

.PHONY: run test lint pytest browser install apps clean

$(BIN)/python:
	$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "Quanta needs Python 3.11+"'
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# The `local` extra: JupyterLab and matplotlib, for the local backend's notebooks and the
# replay's plots (the web image goes without them; Dockerfile).
$(RUN_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[local]'
	touch $@

$(TEST_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev,local,torch]'
	touch $@ $(RUN_STAMP)

install: $(RUN_STAMP)

$(STATIC_STAMP): $(RUN_STAMP) $(shell find static -type f)
	DEBUG=false DATA_DIR=$(DATA_DIR) $(BIN)/python manage.py collectstatic --noinput --verbosity 0
	touch $@

# The browser apps beyond JupyterLab, from the registries only (scripts/install-apps.sh): VS Code
# (code-server from npm into .apps/), and as root with apt-get the Debian packages of the
# desktop (TigerVNC, openbox, noVNC, xterm), ripgrep and bubblewrap. What cannot be installed is
# reported and those apps are not offered; a stamp makes the second run instant.
apps:
	./scripts/install-apps.sh

# Embedded default: SQLite, in-process tasks, in-memory channel layer, local backend, demo data,
# with DEBUG off (`make run DEBUG=true` for Django's debug pages): whitenoise serves the static
# files, collected again whenever they or the dependencies change. Plain HTTP on 127.0.0.1:
# cookies without the Secure flag, mail printed to the console, and the demo's background
# load of simulated sessions and jobs on the simulated GPU farm (DEMO_LOAD=false: without).
run: export SECURE_COOKIES ?= false
run: export EMAIL_BACKEND ?= django.core.mail.backends.console.EmailBackend
run: export DEMO_LOAD ?= true
run: $(RUN_STAMP) $(STATIC_STAMP)
	-./scripts/install-apps.sh  # never fails the run: without them those apps are not offered
	$(BIN)/python manage.py migrate --noinput
	$(BIN)/python manage.py seed_demo --url http://127.0.0.1:$(PORT)/
	$(BIN)/python manage.py serve 127.0.0.1:$(PORT)

# The whole suite: lint, types, tests, then the browser tests. CI (.ci/run) calls exactly this
# with DATABASE_URL and REDIS_URL pointing at real PostgreSQL and Redis. pytest's exit code 5
# (no test ran) fails it.
test: export DEBUG ?= true
test: $(TEST_STAMP) lint pytest browser

lint: $(TEST_STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

pytest: export DEBUG ?= true
pytest: $(TEST_STAMP)
	$(BIN)/pytest --ignore=tests/browser $(PYTEST_ARGS)

# Playwright drives Debian's Chromium (/usr/bin/chromium) against a real `manage.py serve` with
# its own temporary SQLite database, in a pytest process of its own: Playwright's event loop
# breaks pytest-asyncio tests run after it, and these tests never use pytest-django's database.
# Without Chromium they are skipped with the reason. BROWSER_ARGS: more pytest arguments.
browser: $(TEST_STAMP)
	$(BIN)/pytest tests/browser -p no:django --confcutdir=tests/browser \
		-W ignore::pytest.PytestConfigWarning $(BROWSER_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
