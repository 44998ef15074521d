"""Searches on a streaming read replica (issue 14, scaling past one PostgreSQL): a real PostgreSQL 18 standby
cloned from the module's primary with ``pg_basebackup -R`` (``LocalPostgres.clone_from``), as CloudNativePG's
replicas are. Doc values read on the replica follow the primary's transactions through the replayed change feed
(an older transaction that commits last included); a retriever with ``EVIDENTIA_RETRIEVAL_ROLE=search`` and
``EVIDENTIA_DATABASE_SEARCH_URL`` on the replica answers what the primary answers once the replica has replayed,
answers from the replica (not the primary) while its replay is paused, and never tries to write there."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, cast

import asyncpg
import pytest
from faststream.kafka import KafkaBroker

from devstack.postgres import LocalPostgres
from services.parser.store import store_document
from services.retriever.engine.doc_values.follower import DocValuesFollower
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.pipeline import SearchEngine
from services.retriever.engine.replica import replica_lag_s
from services.retriever.engine.vector.tables import upsert_vectors
from services.retriever.handlers import RetrieverState, register
from shared.kafka.topics import CHUNKS_EMBEDDED, RETRIEVAL_REQUESTS
from shared.models import SearchFilters
from shared.settings import Settings
from tests.integration.conftest import throwaway_postgres
from tests.integration.doc_values_data import filtered_doc, may_pass, sql_passing

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def replica(private_postgres: LocalPostgres, migrated_postgres_url: str) -> Iterator[LocalPostgres]:
    """A streaming replica of the module's (migrated) primary, on its own port and folder."""
    with throwaway_postgres("evidentia-replica-pg-", replica_of=private_postgres) as server:
        assert server.is_standby()
        yield server


@pytest.fixture
async def replica_pool(replica: LocalPostgres) -> AsyncIterator[asyncpg.Pool]:
    pool = await asyncpg.create_pool(replica.url, min_size=1, max_size=4)
    assert pool is not None
    assert await pool.fetchval("SELECT pg_is_in_recovery()")
    try:
        yield pool
    finally:
        await pool.close()


async def caught_up(
    primary: asyncpg.Pool, replica: asyncpg.Pool, timeout_s: float = 30.0, *, what: str = "replay"
) -> None:
    """Wait until the replica has replayed (or, with ``what="receive"``, received) everything the primary has
    written so far."""
    lsn = await primary.fetchval("SELECT pg_current_wal_lsn()::text")
    deadline = time.monotonic() + timeout_s
    while not await replica.fetchval(f"SELECT pg_last_wal_{what}_lsn() >= $1::text::pg_lsn", lsn):
        assert time.monotonic() < deadline, f"the replica did not {what} the primary's WAL"
        await asyncio.sleep(0.05)


async def lag_falls_to_zero(replica: asyncpg.Pool, timeout_s: float = 15.0) -> None:
    """Wait for the replica's lag to read 0: the primary's own background writes (compaction, pruning) keep
    WAL in flight now and then, received a moment before it is replayed, so a single reading may catch one."""
    deadline = time.monotonic() + timeout_s
    while (lag := await replica_lag_s(replica)) != 0.0:
        assert time.monotonic() < deadline, f"the replica's lag stayed at {lag} s"
        await asyncio.sleep(0.05)


async def replay(replica: LocalPostgres, action: str) -> None:
    """Pause or resume the replica's WAL replay (superuser, over its administration socket)."""
    conn = await asyncpg.connect(host=str(replica.socket_dir), port=replica.port, user="postgres", database="postgres")
    try:
        await conn.execute(f"SELECT pg_wal_replay_{action}()")
    finally:
        await conn.close()


async def test_doc_values_read_on_a_replica_follow_the_primarys_commits(
    private_pool: asyncpg.Pool, replica_pool: asyncpg.Pool
) -> None:
    rng = random.Random(21)
    for i in range(80):
        await store_document(private_pool, filtered_doc(i, rng))
    await caught_up(private_pool, replica_pool)
    follower = DocValuesFollower(replica_pool)
    await follower.start_loading()
    values = await follower.current()
    assert values is not None
    for filters in (SearchFilters(year_from=2015, year_to=2016), SearchFilters(study_types=["cohort"])):
        assert await may_pass(replica_pool, values, filters) == await sql_passing(replica_pool, filters) != set()

    first, second = [
        r[0] for r in await private_pool.fetch("SELECT document_id FROM documents ORDER BY document_id LIMIT 2")
    ]
    recent = SearchFilters(year_from=2030)
    async with private_pool.acquire() as a:
        older = a.transaction()
        await older.start()
        # the older transaction writes first and commits last; the replica learns of it from the WAL
        await a.execute(
            "UPDATE documents SET year = 2031, retracted = false, priority = 50 WHERE document_id = $1", first
        )
        await private_pool.execute(
            "UPDATE documents SET year = 2032, retracted = false, priority = 50 WHERE document_id = $1", second
        )
        await caught_up(private_pool, replica_pool)
        values = await follower.current()
        assert values is not None
        seen = await may_pass(replica_pool, values, recent)
        assert seen == await sql_passing(replica_pool, recent) != set()  # the second document's chunks only
        await older.commit()
    await caught_up(private_pool, replica_pool)
    values = await follower.current()
    assert values is not None
    # the horizon read on the replica stayed below the older transaction, so its change is read now
    after = await may_pass(replica_pool, values, recent)
    assert after == await sql_passing(replica_pool, recent) and len(after) > len(seen)
    await follower.stop()


class SpreadPool:
    """A pool whose connections go round the servers behind it, one acquisition after another, as a service over
    two replicas hands them out (``EVIDENTIA_DATABASE_SEARCH_URL`` on such a service, docs/scaling.md)."""

    def __init__(self, *pools: asyncpg.Pool) -> None:
        self.pools = pools
        self.acquired = 0

    def acquire(self) -> Any:
        pool = self.pools[self.acquired % len(self.pools)]
        self.acquired += 1
        return pool.acquire()

    async def fetchrow(self, query: str, *args: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.fetchrow(query, *args)

    async def fetch(self, query: str, *args: Any) -> Any:
        async with self.acquire() as conn:
            return await conn.fetch(query, *args)


async def test_doc_values_read_through_replicas_at_different_points_never_keep_a_stale_column(
    private_pool: asyncpg.Pool, replica: LocalPostgres, replica_pool: asyncpg.Pool
) -> None:
    """Issue 40 (9): the change and its columns come from one replica; a replica behind the other costs a re-read,
    never a filter that stays wrong."""
    rng = random.Random(23)
    for i in range(40):
        await store_document(private_pool, filtered_doc(i, rng))
    await caught_up(private_pool, replica_pool)
    follower = DocValuesFollower(replica_pool)
    await follower.start_loading()
    assert await follower.current() is not None
    # the primary stands for a replica that has replayed everything, the paused replica for one behind it
    spread = SpreadPool(private_pool, replica_pool)
    moved = str(await private_pool.fetchval("SELECT document_id FROM documents ORDER BY document_id LIMIT 1"))
    target = SearchFilters(year_from=2088)
    await lag_falls_to_zero(replica_pool)
    await replay(replica, "pause")
    try:
        await private_pool.execute(
            "UPDATE documents SET year = 2088, retracted = false, priority = 50 WHERE document_id = $1", moved
        )
        # two searches while one replica is behind: each of them reads one replica or the other
        for _ in range(2):
            await follower.current(cast("asyncpg.Pool", spread))
    finally:
        await replay(replica, "resume")
    assert spread.acquired >= 2
    await caught_up(private_pool, replica_pool)
    for _ in range(2):  # a read on either replica, both now caught up
        values = await follower.current(cast("asyncpg.Pool", spread))
        assert values is not None
        assert await may_pass(replica_pool, values, target) == await sql_passing(replica_pool, target) != set()
    await follower.stop()


async def test_a_search_only_retriever_answers_from_the_replica_and_writes_nothing(
    private_pool: asyncpg.Pool,
    replica: LocalPostgres,
    replica_pool: asyncpg.Pool,
    migrated_postgres_url: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("EVIDENTIA_DATABASE_URL", migrated_postgres_url)
    monkeypatch.setenv("EVIDENTIA_DATABASE_SEARCH_URL", replica.url)
    monkeypatch.setenv("EVIDENTIA_RETRIEVAL_ROLE", "store")
    storing = RetrieverState(Settings())
    monkeypatch.setenv("EVIDENTIA_RETRIEVAL_ROLE", "search")
    searching = RetrieverState(Settings())
    for state, topic in ((storing, CHUNKS_EMBEDDED), (searching, RETRIEVAL_REQUESTS)):
        broker = KafkaBroker()
        register(broker, state)
        assert [t.name for s in broker.subscribers for t in s.topics] == [topic]  # each role consumes its topic

    log_before = replica.log_file.stat().st_size
    await storing.start()  # creates the active vector index on the primary
    try:
        rng = random.Random(5)
        for i in range(60):
            await store_document(private_pool, filtered_doc(i, rng))
        rows = await private_pool.fetch("SELECT chunk_id, document_id, embedding_text FROM chunks ORDER BY chunk_id")
        vectors = storing.embedder.encode_passages([r["embedding_text"] for r in rows])
        ids, documents = [r["chunk_id"] for r in rows], [r["document_id"] for r in rows]
        await upsert_vectors(storing.pool, storing.index, ids, documents, vectors)
        await caught_up(private_pool, replica_pool)

        await searching.start()
        try:
            follower = searching.doc_values
            assert follower is not None and await follower.pool.fetchval("SELECT pg_is_in_recovery()")
            primary = SearchEngine.from_settings(
                storing.pool, storing.index, storing.settings.retrieval, stats=CorpusStats()
            )
            query = "statins and dementia outcomes"
            vector = searching.embedder.encode_queries([query])[0]

            async def both(filters: SearchFilters) -> tuple[list[tuple[str, float]], list[tuple[str, float]]]:
                found = []
                for searcher in (primary, searching.searcher()):
                    result = await searcher.search(query, vector, mode="hybrid", top_k=20, top_n=10, filters=filters)
                    found.append([(h.chunk_id, round(h.score, 6)) for h in result.hits])
                return found[0], found[1]

            for filters in (SearchFilters(), SearchFilters(year_from=2015, year_to=2016)):
                on_primary, on_replica = await both(filters)
                assert on_replica == on_primary != []

            # Replay paused: a year moved on the primary is not yet on the replica, and the search-only retriever
            # (doc values included) answers as the replica stands; resumed, as the primary does.
            target = SearchFilters(year_from=2077)
            assert await replica_lag_s(private_pool) == 0.0  # the primary is never behind
            await lag_falls_to_zero(replica_pool)
            await replay(replica, "pause")
            try:
                await private_pool.execute("UPDATE documents SET year = 2077 WHERE document_id = $1", documents[0])
                await caught_up(private_pool, replica_pool, what="receive")
                await asyncio.sleep(0.2)
                assert await replica_lag_s(replica_pool) >= 0.2  # received, not replayed: the metric shows it
                on_primary, on_replica = await both(target)
                assert {h for h, _ in on_primary} == {
                    c for c, d in zip(ids, documents, strict=True) if d == documents[0]
                }
                assert on_replica == []
            finally:
                await replay(replica, "resume")
            await caught_up(private_pool, replica_pool)
            await lag_falls_to_zero(replica_pool)
            on_primary, on_replica = await both(target)
            assert on_replica == on_primary != []
        finally:
            await searching.stop()
    finally:
        await storing.stop()
    with replica.log_file.open() as log:
        log.seek(log_before)
        assert "read-only transaction" not in log.read()  # nothing tried to write on the replica
