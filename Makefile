# ember developer commands. Everything runs inside .venv, built from PyPI alone.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

# ruff fails on a missing path, so lint only the folders that exist yet.
LINT_DIRS := $(wildcard core tests bench docs)
TEST_DIRS := tests

.PHONY: venv test demo bench lint clean

venv: $(STAMP)

# Rebuilt whenever pyproject.toml changes (new dependency, new extra).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check $(LINT_DIRS)

test: lint
	$(BIN)/python -m pytest $(TEST_DIRS)
	@echo "core/ember size (lines of Python):"
	@find core/ember -name '*.py' -print0 | xargs -0 wc -l | tail -n 1

demo: $(STAMP)
	$(BIN)/python docs/quickstart.py

bench: $(STAMP)
	$(BIN)/ember bench

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .hypothesis .cache
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
