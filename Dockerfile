# hpo worker / CLI image: the project's pinned torch (requirements-torch.txt, the same file `make setup`
# installs: PyPI's wheels carry the CUDA 13.0 runtime, so the host needs only the NVIDIA driver >= 580 and
# the NVIDIA Container Toolkit), the runtime dependencies, and the Inception weights baked in.
#   docker build -t hpo:latest .
#   --build-arg FETCH_WEIGHTS=0     skip the weights download (classifier-feature specs need none)
#   --build-arg BASE_IMAGE=NAME     any Debian-like image with python3 (3.11) and python3-venv
ARG BASE_IMAGE=python:3.11-slim-bookworm
FROM ${BASE_IMAGE}

ARG FETCH_WEIGHTS=1
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:$PATH \
    HPO_FID_WEIGHTS=/opt/hpo/weights/inception-2015-12-05.pt \
    PYTHONPATH=/app/models

WORKDIR /app

# torch first (the largest layers, rebuilt only when its pin changes), then the dependencies (rebuilt
# only when pyproject.toml changes), then the source. torch's CUDA libraries (3.2 GB, the versions pip
# resolves for the pin) get a layer of their own: Docker's classic builder holds a layer twice while
# it commits it, so one 5.8 GB layer needed 11.8 GB free to build and two need about 8.
COPY requirements-torch.txt ./
RUN python3 -m venv /opt/venv \
    && pip install --dry-run --ignore-installed --quiet --report /tmp/torch.json -r requirements-torch.txt \
    && python3 -c "import json; print(*(f\"{p['metadata']['name']}=={p['metadata']['version']}\" \
         for p in json.load(open('/tmp/torch.json'))['install'] \
         if p['metadata']['name'].lower().startswith('nvidia-')), sep='\n')" > /tmp/cuda.txt \
    && pip install --no-deps -r /tmp/cuda.txt \
    && rm /tmp/torch.json /tmp/cuda.txt
RUN pip install -r requirements-torch.txt
COPY pyproject.toml README.md ./
COPY hpo/__init__.py hpo/__init__.py
# hadolint ignore=DL3013
RUN pip install -c requirements-torch.txt ".[tensorboard,gpu]" && pip uninstall -y hpo
COPY hpo/ hpo/
COPY search_spaces/ search_spaces/
RUN pip install --no-deps .

# Inception weights, SHA-256 checked, written atomically (clean-fid would fetch them mid-study);
# then a non-root user, and the artifact store, caches, reports and runs (the doctor's files) as folders it can write.
RUN if [ "$FETCH_WEIGHTS" = "1" ]; then hpo fetch-weights --dest "$HPO_FID_WEIGHTS"; fi \
    && useradd --create-home --uid 1000 hpo \
    && mkdir -p /app/.hpo/artifacts /app/.hpo/cache /app/reports /app/runs /app/data /app/models \
    && chown -R 1000:1000 /app/.hpo /app/reports /app/runs
USER 1000:1000

ENTRYPOINT ["hpo"]
CMD ["worker", "--gpus", "all", "--artifacts", "/app/.hpo/artifacts", "--cache-dir", "/app/.hpo/cache"]
