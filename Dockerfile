# hpo worker / CLI image: CUDA PyTorch, the project's runtime dependencies, Inception weights baked in.
# Build: docker build -t hpo:latest .   (--build-arg FETCH_WEIGHTS=0 to skip the weights download)
FROM pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime

ARG FETCH_WEIGHTS=1
ENV PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HPO_FID_WEIGHTS=/opt/hpo/weights/inception-2015-12-05.pt \
    PYTHONPATH=/app/models

WORKDIR /app

# Dependencies first: this layer is rebuilt only when pyproject.toml changes.
COPY pyproject.toml README.md ./
COPY hpo/__init__.py hpo/__init__.py
# hadolint ignore=DL3013
RUN pip install ".[tensorboard,gpu]" && pip uninstall -y hpo

# Then the source.
COPY hpo/ hpo/
COPY search_spaces/ search_spaces/
RUN pip install --no-deps .

# Inception weights, SHA-256 checked, written atomically (clean-fid would fetch them mid-study);
# then a non-root user, and the artifact store, caches and reports as folders it can write.
RUN if [ "$FETCH_WEIGHTS" = "1" ]; then hpo fetch-weights --dest "$HPO_FID_WEIGHTS"; fi \
    && useradd --create-home --uid 1000 hpo \
    && mkdir -p /app/.hpo/artifacts /app/.hpo/cache /app/reports /app/data /app/models \
    && chown -R 1000:1000 /app/.hpo /app/reports
USER 1000:1000

ENTRYPOINT ["hpo"]
CMD ["worker", "--gpus", "all", "--artifacts", "/app/.hpo/artifacts", "--cache-dir", "/app/.hpo/cache"]
