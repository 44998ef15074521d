"""Model switch through the running pipeline: `evidentia reindex --model bge-small-en-v1.5` (issue 8).

Its own Kafka and PostgreSQL (the switch changes the active index, which the shared stack must not
see): chunks are stored and embedded with all-MiniLM-L6-v2 by the real embedder and retriever; the
reindex command builds bge-small-en-v1.5's index through ``chunks.reindex`` -> a reindex embedder ->
``chunks.embedded`` -> the running retriever, switches when complete, and a retriever restarted with
the new model runs while one with the old model refuses to start.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from devstack.common import free_port
from devstack.kafka import LocalKafka
from devstack.postgres import LocalPostgres
from devstack.processes import ServiceProcess, ServiceStack

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "pubmed"
OLD, NEW = "all-MiniLM-L6-v2", "bge-small-en-v1.5"


@dataclass
class Env:
    kafka: LocalKafka
    postgres: LocalPostgres
    root: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def reindex_env(bge_folder: Path) -> Iterator[Env]:
    """Real Kafka + Postgres of its own; bge-small-en-v1.5 fetched from Maven Central when missing."""
    root = Path(tempfile.mkdtemp(prefix="evidentia-reindex-"))
    os.chmod(root, 0o755)  # PostgreSQL may run as another user: it must enter every parent folder
    kafka = LocalKafka(root / "kafka", port=free_port(), controller_port=free_port())
    postgres = LocalPostgres(root / "postgres", port=free_port())
    kafka.ensure_libs()
    kafka.start(timeout=180)
    postgres.start()
    from shared.db import migrate
    from shared.kafka.topic_admin import ensure_topics
    from shared.kafka.topics import standard_topics

    asyncio.run(migrate(postgres.url))
    asyncio.run(ensure_topics(kafka.bootstrap, standard_topics(2)))
    env = dict(os.environ)
    env.update(
        {
            "EVIDENTIA_KAFKA_BOOTSTRAP": kafka.bootstrap,
            "EVIDENTIA_DATABASE_URL": postgres.url,
            "EVIDENTIA_EMBEDDING_MODEL": OLD,
            "EVIDENTIA_EMBEDDING_DEVICE": "cpu",
            "HF_HUB_OFFLINE": "1",
            "PYTHONPATH": str(REPO),
        }
    )
    try:
        yield Env(kafka, postgres, root, env)
    finally:
        kafka.stop()
        postgres.stop()
        shutil.rmtree(root, ignore_errors=True)


async def _store_and_publish(env: Env) -> int:
    """Parse the fixtures, store them, publish their chunks as the parser does; return the chunk count."""
    from cli._common import producer, publish_all
    from services.parser.chunking import build_chunker
    from services.parser.core import parse_content
    from services.parser.handlers import token_id_maker
    from services.parser.store import store_document
    from shared.db import create_pool
    from shared.events import ChunkCreated, Event
    from shared.kafka.topics import CHUNKS_CREATED
    from shared.settings import DatabaseSettings, KafkaSettings, Settings

    settings = Settings(
        database=DatabaseSettings.model_validate({"EVIDENTIA_DATABASE_URL": env.postgres.url}),
        kafka=KafkaSettings(bootstrap=env.kafka.bootstrap),  # type: ignore[call-arg]
    )
    chunker = build_chunker(settings)
    tok = token_id_maker(settings)
    assert tok is not None and tok.model == "sentence-transformers/all-MiniLM-L6-v2"
    pool = await create_pool(settings.database)
    events: list[tuple[Event, str]] = []
    try:
        for name in ("pubmed1.xml", "pubmed2.xml", "efetch.pubmed.xml"):
            for doc in parse_content("pubmed-xml", (FIXTURES / name).read_bytes(), chunker=chunker):
                result = await store_document(pool, doc)
                ids = tok([c.embedding_text for c in result.chunks])
                events += [
                    (
                        ChunkCreated(
                            chunk_id=c.chunk_id,
                            document_id=doc.document_id,
                            ordinal=c.ordinal,
                            text=c.embedding_text,
                            token_count=c.token_count,
                            token_ids=i,
                            token_model=tok.model,
                        ),
                        doc.document_id,
                    )
                    for c, i in zip(result.chunks, ids, strict=True)
                ]
        count = int(await pool.fetchval("SELECT count(*) FROM chunks"))
    finally:
        await pool.close()
    async with producer(settings) as broker:
        await publish_all(broker, {ChunkCreated: CHUNKS_CREATED}, events)
    return count


def _query(env: Env, sql: str) -> list[tuple[object, ...]]:
    import asyncpg

    async def run() -> list[tuple[object, ...]]:
        conn = await asyncpg.connect(env.postgres.url)
        try:
            from pgvector.asyncpg import register_vector

            await register_vector(conn)
            return [tuple(r) for r in await conn.fetch(sql)]
        finally:
            await conn.close()

    return asyncio.run(run())


def _wait(what: str, check: object, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(1.0)


def test_reindex_switches_models_through_the_running_pipeline(reindex_env: Env) -> None:
    env = reindex_env
    stack = ServiceStack(
        log_dir=env.root / "logs",
        env=env.env,
        services=("embedder", "retriever"),
        ports={"embedder": free_port(), "retriever": free_port()},
    )
    stack.start(timeout=300)
    try:
        total = asyncio.run(_store_and_publish(env))
        assert total >= 8

        def old_index_full() -> bool:
            rows = _query(env, "SELECT table_name FROM vector_indexes WHERE state = 'active'")
            return bool(rows) and _query(env, f"SELECT count(*) FROM {rows[0][0]}")[0][0] == total

        _wait("all-MiniLM-L6-v2 vectors of every chunk", old_index_full, 300)

        cli = subprocess.run(
            [
                sys.executable,
                "-m",
                "cli.main",
                "reindex",
                "--model",
                NEW,
                "--spawn-embedder",
                "--timeout",
                "900",
                "--poll-s",
                "1",
                "--stall-s",
                "240",
            ],
            env=env.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=1000,
        )
        assert cli.returncode == 0, cli.stdout + cli.stderr
        assert "switched" in cli.stdout

        indexes = {r[0]: (r[1], r[2]) for r in _query(env, "SELECT model, state, table_name FROM vector_indexes")}
        assert indexes["BAAI/bge-small-en-v1.5"][0] == "active"
        assert indexes["sentence-transformers/all-MiniLM-L6-v2"][0] == "retired"
        new_table = indexes["BAAI/bge-small-en-v1.5"][1]
        assert _query(env, f"SELECT count(*) FROM {new_table}")[0][0] == total

        # The vectors really are bge-small-en-v1.5's (not MiniLM's relabelled).
        from shared.embedding import get_embedder
        from shared.settings import EmbeddingSettings

        rows = _query(
            env,
            f"SELECT c.embedding_text, v.embedding FROM chunks c JOIN {new_table} v USING (chunk_id) "
            "ORDER BY c.chunk_id LIMIT 3",
        )
        bge = get_embedder(EmbeddingSettings(model=NEW, device="cpu"))
        expected = bge.encode_passages([str(r[0]) for r in rows])
        stored = np.asarray([np.asarray(r[1].to_numpy(), dtype=np.float32) for r in rows])  # type: ignore[attr-defined]
        assert float((expected * stored).sum(axis=1).min()) > 0.999

        # Restarted with the new model, the retriever runs; with the old one it refuses to start.
        stack.processes["retriever"].stop()
        port = free_port()
        new_env = dict(
            stack.processes["retriever"].env, EVIDENTIA_EMBEDDING_MODEL=NEW, EVIDENTIA_METRICS_PORT=str(port)
        )
        new_retriever = ServiceProcess("retriever", port, env.root / "logs" / "retriever-new.log", new_env)
        new_retriever.start()
        try:
            _wait("the retriever with the new model", new_retriever.ready, 180)
            old_port = free_port()
            old = ServiceProcess(
                "retriever",
                old_port,
                env.root / "logs" / "retriever-old.log",
                dict(new_env, EVIDENTIA_EMBEDDING_MODEL=OLD, EVIDENTIA_METRICS_PORT=str(old_port)),
            )
            old.start()
            try:
                _wait(
                    "the retriever with the old model to give up",
                    lambda: not old.alive() or "evidentia reindex --model" in old.tail(200),
                    180,
                )
                assert not old.ready()
                assert "evidentia reindex --model" in old.tail(200)
            finally:
                old.stop()
        finally:
            new_retriever.stop()
    finally:
        stack.stop()
