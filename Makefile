# The two commands of the README: `make demo` and `make test`. Each creates
# .venv when it is missing and installs the pins from pyproject.toml first.
# `make lint` is what CI runs beside the tests: ruff and mypy, as pyproject.toml configures them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Pins live in pyproject.toml; these read them from there.
TORCH_PIN := $(shell grep -o '"torch==[^"]*"' pyproject.toml | tr -d '"')
LPIPS_PIN := $(shell grep -o '"lpips==[^"]*"' pyproject.toml | tr -d '"')

.PHONY: demo test lint install clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	# torch first, so pip takes the local CPU build rather than a CUDA one
	$(BIN)/pip install -q --disable-pip-version-check $(TORCH_PIN)
	$(BIN)/pip install -q --disable-pip-version-check -e '.[test]'
	$(BIN)/pip install -q --disable-pip-version-check --no-deps $(LPIPS_PIN)
	# the digest manifest `registry verify --install` compares with (docs/kernels.md); note the digest it prints
	$(BIN)/registry install-manifest
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/registry demo --fresh --check
	$(BIN)/registry --db sqlite:///demo.db replay --verify

test: $(STAMP)
	bash scripts/run_tests.sh

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

# demo.db goes only when the demo created it (it marks its database); any other file of that name stays.
clean:
	test ! -x $(BIN)/python || $(BIN)/python -c 'from registry.app.demo_registry import remove_if_demo; remove_if_demo("demo.db")'
	rm -rf $(VENV) demo-out
