# The two commands README gives: `make quickstart` (main job) and `make test` (tests).
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= -r requirements-torch.txt  # the image installs the same file
BIN     = $(VENV)/bin

.PHONY: setup quickstart test lint test-containers

$(BIN)/hpo: pyproject.toml requirements-torch.txt requirements-standin.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps -r requirements-standin.txt
	touch $(BIN)/hpo

setup: $(BIN)/hpo

quickstart: setup
	$(BIN)/hpo launch search_spaces/digits.yaml

lint: setup
	$(BIN)/ruff check hpo tests benchmarks
	$(BIN)/mypy

test: lint
	$(BIN)/python -m pytest -q

# The shipped Dockerfile and compose file built and run on a Docker engine of the test's own (root;
# about 15 minutes on 2 cores, most of it installing the CUDA torch into the image).
CONTAINER_TOOLS = dockerd docker-compose debootstrap
test-containers: setup
	@for t in $(CONTAINER_TOOLS); do command -v $$t >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -q --no-install-recommends docker.io docker-compose debootstrap; fi
	$(BIN)/python -m pytest -q -s -m containers tests/test_stack.py
