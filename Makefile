# tflaunch — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: help
help: ## Show this help
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(BIN)/tflaunch: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,trainer]'
	@touch $@

.PHONY: install
install: $(BIN)/tflaunch ## Create .venv and install tflaunch with the dev and trainer extras

.PHONY: test
test: install ## Run the test suite
	$(BIN)/pytest

.PHONY: lint
lint: install ## ruff, mypy and the import contracts
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

.PHONY: render
render: install ## Regenerate manifests/ from examples/
	$(BIN)/python scripts/render_manifests.py

.PHONY: run-local
run-local: install ## Train MNIST on 2 local workers (no cluster needed)
	$(BIN)/tflaunch local examples/mnist.yaml --workers 2
