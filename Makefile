# The two commands README gives: `make quickstart` (main job) and `make test` (tests).
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.14.1 torchvision==0.29.1
BIN     = $(VENV)/bin

.PHONY: setup quickstart test lint

$(BIN)/hpo: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[test]'
	touch $(BIN)/hpo

setup: $(BIN)/hpo

quickstart: setup
	$(BIN)/hpo launch search_spaces/digits.yaml

lint: setup
	$(BIN)/ruff check hpo tests benchmarks
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q
