# ember developer commands. Everything runs inside .venv, built from PyPI alone; the browser
# tests also need Debian's chromium and Node.js (make e2e-deps installs them, as root).

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# ruff fails on a missing path, so lint only the folders that exist yet.
LINT_DIRS := $(wildcard core tests bench docs e2e)
TEST_DIRS := tests

.PHONY: venv test unit e2e e2e-deps site demo bench lint clean

venv: $(STAMP)

# Rebuilt whenever pyproject.toml changes (new dependency, new extra).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,e2e]'
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check $(LINT_DIRS)

# tests/ first, then the browser end-to-end tests of e2e/
test: lint
	$(BIN)/python -m pytest $(TEST_DIRS)
	@echo "core/ember size (lines of Python):"
	@find core/ember -name '*.py' -print0 | xargs -0 wc -l | tail -n 1
	$(MAKE) e2e

unit: $(STAMP)
	$(BIN)/python -m pytest $(TEST_DIRS)

# Debian's chromium (Playwright drives it; PLATFORM.md) and Node.js + npm (npm pack, Pyodide
# in Node): installed through apt when missing.
e2e-deps:
	@command -v chromium >/dev/null && command -v node >/dev/null && command -v npm >/dev/null || { \
	  echo "installing chromium, nodejs and npm from Debian (apt-get)"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
	    $$(command -v chromium >/dev/null || echo chromium) \
	    $$(command -v node >/dev/null || echo nodejs) $$(command -v npm >/dev/null || echo npm) \
	    >/dev/null; }

# Builds the site once (downloads cached in .cache/ember-site), serves it on 127.0.0.1, drives
# it in headless chromium; runs tests/ops inside Pyodide and compares with CPython.
e2e: $(STAMP) e2e-deps
	$(BIN)/python -m pytest e2e

site: $(STAMP)
	$(BIN)/ember site --out build/site

# Builds the site into build/site and serves it on http://127.0.0.1:8000/ (Ctrl-C stops it).
demo: $(STAMP)
	$(BIN)/ember demo

bench: $(STAMP)
	$(BIN)/ember bench

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .hypothesis e2e/screenshots
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
