# syntax=docker/dockerfile:1
# One image for every Evidentia service; docker-compose.yml picks the service with
# `command: python -m services.<name>`.
#
# Torch comes first, from the PyTorch CPU index, so pip never pulls the multi-GB CUDA build
# from PyPI. A GPU host builds the embedder with a CUDA index instead, e.g.
#   EMBEDDER_TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128 docker compose build embedder
FROM python:3.11-slim

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HUB_OFFLINE=1

WORKDIR /app

RUN pip install --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}"

# Dependencies change less often than the code: install them from pyproject.toml alone first
# so this layer stays cached across code edits.
COPY pyproject.toml README.md* ./
RUN mkdir -p shared services \
    && touch shared/__init__.py services/__init__.py \
    && pip install . \
    && pip uninstall -y evidentia \
    && rm -rf shared services build *.egg-info

COPY shared ./shared
COPY services ./services
# The `evidentia` operator CLI (db migrate, topics create, dlq ...) used by the Kubernetes jobs; the dev stack,
# docs generation and evaluation stay out of the image.
COPY cli ./cli
RUN pip install --no-deps . \
    && useradd --system --uid 10001 --home-dir /app evidentia

USER evidentia
EXPOSE 8000
CMD ["python", "-m", "services.gateway"]
