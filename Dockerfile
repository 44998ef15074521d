# syntax=docker/dockerfile:1
# One Dockerfile, one image per service: the SERVICE build-arg (fetcher, parser, embedder, retriever,
# synthesizer, gateway) picks the pinned dependencies that service imports (requirements/SERVICE.lock, the
# pyproject extra of that name) and the command (python -m services.SERVICE):
#   docker build --build-arg SERVICE=gateway -t evidentia-gateway .
# The services that embed get torch, as a CPU build from PyTorch's index. The embedder's GPU build picks another
# lock (LOCK, default SERVICE): onnxruntime-gpu with the CUDA 13 and cuDNN 9 libraries as PyPI wheels (only the
# NVIDIA driver is needed on the host), which runs the default ONNX model on CUDA, in FP16 made at build time:
#   docker build --build-arg SERVICE=embedder --build-arg LOCK=embedder-gpu -t evidentia-embedder-gpu .
# (run it with EVIDENTIA_EMBEDDING_DEVICE=cuda to have it stop at start rather than run on the CPU without a GPU;
# a torch model such as all-MiniLM-L6-v2 on the GPU also needs TORCH_INDEX_URL= a PyTorch CUDA 13 index, e.g. .../whl/cu130)
# No service image carries the CLI, the dev stack (embedded PostgreSQL) or the test tools. Every image can run
# the one-shot set-up: python -m shared.setup (migrations, topics).
#
# The embedding model (EMBEDDING_MODEL, default bge-small-en-v1.5: the held-out winner, docs/benchmarks.md #17)
# is fetched in its own stage from Maven Central and refused unless its jar's SHA-256 is the pinned one
# (shared/embedding/fetch.py). Only the services that tokenise or embed with it (parser, embedder, retriever)
# carry its folder (~130 MB, /opt/evidentia/models); the others copy an empty folder (BuildKit builds only the
# stages a service's image uses). A PyPI-packaged model (all-MiniLM-L6-v2) needs no fetching.
ARG SERVICE=gateway
ARG EMBEDDING_MODEL=bge-small-en-v1.5

FROM python:3.11-slim AS models-fetched
ARG EMBEDDING_MODEL
WORKDIR /src
RUN pip install --no-cache-dir "httpx>=0.27" "numpy>=1.26"
COPY shared/__init__.py ./shared/__init__.py
COPY shared/embedding ./shared/embedding
RUN mkdir -p /opt/evidentia/models \
    && python -m shared.embedding "${EMBEDDING_MODEL}" --models-dir /opt/evidentia/models --maven-repo /tmp/m2 \
    && rm -rf /tmp/m2

FROM python:3.11-slim AS models-none
RUN mkdir -p /opt/evidentia/models

FROM models-fetched AS models-parser
FROM models-fetched AS models-embedder
FROM models-fetched AS models-retriever
FROM models-none AS models-fetcher
FROM models-none AS models-synthesizer
FROM models-none AS models-gateway
FROM models-${SERVICE} AS service-models

FROM python:3.11-slim

ARG SERVICE
ARG LOCK=${SERVICE}
ARG EMBEDDING_MODEL
ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1 \
    SERVICE=${SERVICE} \
    EVIDENTIA_EMBEDDING_MODEL=${EMBEDDING_MODEL} \
    EVIDENTIA_EMBEDDING_MODELS_DIR=/opt/evidentia/models

WORKDIR /app

# Dependencies change less often than the code: this layer stays cached across code edits. The lock is
# complete (every transitive pin, torch's own dependencies included), hence --no-deps; torch first, alone, for
# the services whose lock needs it.
COPY requirements/${LOCK}.lock /tmp/requirements.lock
RUN if grep -q '^sentence-transformers==' /tmp/requirements.lock; then \
        pip install --no-deps --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"; \
    fi \
    && pip install --no-deps -r /tmp/requirements.lock

COPY --from=service-models /opt/evidentia/models /opt/evidentia/models

COPY pyproject.toml README.md LICENSE ./
COPY shared ./shared
COPY services ./services
RUN pip install --no-deps . \
    && python -c "import importlib, os; importlib.import_module('services.' + os.environ['SERVICE'] + '.app')" \
    && if grep -q '^onnxruntime-gpu==' /tmp/requirements.lock; then python -m shared.embedding.fp16 "${EMBEDDING_MODEL}"; fi \
    && useradd --system --uid 10001 --home-dir /app evidentia

USER evidentia
EXPOSE 8000
CMD ["sh", "-c", "exec python -m services.${SERVICE}"]
