# Two commands set everything up: `make run` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
STATE ?= $(CURDIR)/.state
ORG ?= $(CURDIR)/examples/org
WORKER ?= ada
CHANNEL ?= general
# Twice the cores: much of the suite waits on daemons, sockets and PostgreSQL
# rather than computing, so one worker per core leaves the CPUs idle.
TEST_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(2 * (os.cpu_count() or 1))')
# The unit layer computes rather than waits: one worker per core is faster.
UNIT_WORKERS ?= $(shell $(PYTHON) -c 'import os; print(os.cpu_count() or 1)')

.PHONY: run test test-fast test-browser test-llama checks suite bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# The pip that venv bundles with Python >= 3.11 installs editable projects
# (PEP 660): upgrading it first would only cost another download.
$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# Starts the daemon on examples/org (echo engine, offline) and opens a chat;
# the daemon stops when the chat ends.
run: $(STAMP)
	@mkdir -p $(STATE)
	@$(BIN)/roster check --org $(ORG)
	@echo "daemon log: $(STATE)/rosterd.log"
	@$(BIN)/roster serve --org $(ORG) --state $(STATE) --socket $(STATE)/rosterd.sock \
	  2>>$(STATE)/rosterd.log & \
	  daemon=$$!; trap 'kill $$daemon 2>/dev/null; wait $$daemon 2>/dev/null' EXIT INT TERM; \
	  $(BIN)/roster chat --socket $(STATE)/rosterd.sock --wait 10 --worker $(WORKER) --channel $(CHANNEL)

# The checks and the suite side by side (the suite's workers often wait),
# then the tests that drive a browser and a llama.cpp server.
test: $(STAMP)
	@$(MAKE) --no-print-directory -j2 checks suite
	@$(MAKE) --no-print-directory test-browser test-llama

checks: $(STAMP)
	$(BIN)/ruff check rosterd tests bench examples
	$(BIN)/ruff format --check rosterd tests bench examples
	$(BIN)/mypy

suite: $(STAMP)
	@# One test at a time to whichever worker is free, in collection order (long tests
	@# first, see tests/conftest.py); an xdist_group stays on one worker.
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadgroup --no-loadscope-reorder

# The unit layer: the compiler, the org, the engines' request shapes and the
# docs' reference, each in this process, no daemon, database or browser.
UNIT = tests/test_compiler_*.py tests/test_org_*.py tests/test_engine_echo.py tests/test_engine_contract.py \
	tests/test_engine_factory.py tests/test_engine_schemas.py tests/test_bridge_lines.py \
	tests/test_docs_reference.py tests/test_public_api.py

test-fast: $(STAMP)
	$(BIN)/python -m pytest -n $(UNIT_WORKERS) --dist worksteal $(UNIT)

# The inspector in the system Chromium (apt-get install chromium), through Playwright.
test-browser: $(STAMP)
	$(BIN)/python -m pytest -m browser tests/browser

# Rollover keeps the cache, on a real llama.cpp llama-server that
# tests/llama/build.sh builds from PyPI's llama-cpp-python sdist (once, into .cache/).
test-llama: $(STAMP)
	tests/llama/build.sh
	$(BIN)/python -m pytest -m llama tests/llama

bench: $(STAMP)
	$(BIN)/python bench/compile.py
	$(BIN)/python bench/cache.py
	$(BIN)/python bench/load.py
	$(BIN)/python bench/limits.py
	$(BIN)/python bench/faults.py
	$(BIN)/python bench/cost.py
	$(BIN)/python bench/inspector.py
	$(BIN)/python bench/memory.py

clean:
	rm -rf $(VENV) $(STATE) build *.egg-info
