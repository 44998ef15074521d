"""Retriever handlers: ``chunks.embedded`` -> vector store; ``retrieval.requests`` -> search -> reply."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import asyncpg
import numpy as np
from aiokafka import ConsumerRecord
from faststream.kafka import KafkaBroker
from faststream.middlewares import AckPolicy

from services.retriever.engine import SearchEngine, SearchResult, UnservableRequest, serve
from services.retriever.engine.doc_values.follower import DocValuesFollower, follow_forever, prune_forever
from services.retriever.engine.lexical.compaction import compact_forever
from services.retriever.engine.lexical.postings_cache import PostingsCache
from services.retriever.engine.lexical.stats import CorpusStats
from services.retriever.engine.replica import watch_replica_lag
from services.retriever.engine.vector.ann_index import IvfflatProbes, maintain_forever
from services.retriever.engine.vector.tables import (
    IndexModelMismatch,
    VectorIndex,
    await_active_index,
    complete_documents,
    ensure_active_index,
    live_index_for,
    upsert_vectors,
)
from shared import metrics
from shared.db import create_pool, reachable
from shared.db.jobs import fail_documents_hook, set_stage
from shared.embedding import Embedder, get_embedder
from shared.events import ChunkEmbedded, ErrorInfo, RetrievalReply, RetrievalRequest
from shared.kafka.context import KafkaMessage
from shared.kafka.dead_letters import add_dead_letter_hook, publish_dead_letters
from shared.kafka.decoding import decode_records, undecoded_batch
from shared.kafka.errors import is_data_error, is_transient
from shared.kafka.messages import records_of
from shared.kafka.reply_server import RecentRequests, progress_while, reply, request_subscriber_options
from shared.kafka.topics import CHUNKS_EMBEDDED, RETRIEVAL_REQUESTS
from shared.llm import usage_scope
from shared.settings import Settings

log = logging.getLogger(__name__)
GROUP_ID = "evidentia-retriever"


class RetrieverState:
    """What one retriever holds. Its role (``EVIDENTIA_RETRIEVAL_ROLE``) decides what it starts: a storing
    retriever the primary's pool and the background jobs that write (vector index maintenance, lexical
    compaction, change-feed pruning); a searching one the search pool (``EVIDENTIA_DATABASE_SEARCH_URL``, a read
    replica or the primary), the query embedder and the doc values read from that same database."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._pool: asyncpg.Pool | None = None
        self._search_pool: asyncpg.Pool | None = None
        self._values_pool: asyncpg.Pool | None = None
        self._embedder: Embedder | None = None
        self._index: VectorIndex | None = None
        self._stats = CorpusStats()
        self._postings_cache = PostingsCache.from_settings(settings.retrieval)
        self._probes = IvfflatProbes(settings.database)
        self._tasks: list[asyncio.Task[None]] = []
        self._doc_values: DocValuesFollower | None = None

    @property
    def stores(self) -> bool:
        return self.settings.retrieval.role in ("all", "store")

    @property
    def searches(self) -> bool:
        return self.settings.retrieval.role in ("all", "search")

    async def start(self) -> None:
        db = self.settings.database
        embedder = get_embedder(self.settings.embedding)
        if self.stores:
            self._pool = await create_pool(db)
            add_dead_letter_hook(fail_documents_hook(self._pool))
            # Refuses to start against an index built by another model (IndexModelMismatch).
            self._index = await ensure_active_index(self._pool, embedder.name, embedder.dim, db)
        if self.searches:
            # Searches get their own pool: ingestion writes cannot starve them, and no search statement
            # runs longer than the caller waits for its reply (statement_timeout = the request timeout). Two
            # connections a request: a hybrid search's legs run at once. No migrations: a replica takes them
            # from the primary.
            self._search_pool = await create_pool(
                db,
                run_migrations=False,
                caller_timeout_s=self.settings.kafka.request_timeout_s,
                max_size=2 * self.settings.kafka.request_concurrency,
                url=db.search_url,
            )
            await asyncio.to_thread(embedder.warm_up)
            if self._index is None:
                self._index = await await_active_index(self._search_pool, embedder.name, embedder.dim)
            await self._probes.current(self._search_pool, self._index.table_name)
            # How stale the searched database is (a replica's replay lag; 0 on the primary).
            self._tasks.append(asyncio.create_task(watch_replica_lag(self._search_pool), name="replica-lag"))
        self._embedder = embedder
        assert self._index is not None
        log.info(
            "vector index ready",
            extra={
                "index": self._index.name,
                "model": self._index.model,
                "precision": self._index.precision,
                "role": self.settings.retrieval.role,
            },
        )
        if self._pool is not None:
            self._start_writing_jobs(self._pool, self._index)
        # Chunks' filter columns, read in the background from the database the searches read, and kept current
        # by the documents' change feed there.
        if self._search_pool is not None and self.settings.retrieval.doc_values:
            if self._pool is not None and db.search_url is None:
                self._values_pool = self._pool
            else:  # reading everything takes seconds: not on the search pool, whose statements the callers bound
                self._values_pool = await create_pool(db, run_migrations=False, max_size=2, url=db.search_url)
            self._doc_values = DocValuesFollower(self._values_pool)
            self._tasks.append(
                asyncio.create_task(
                    follow_forever(self._doc_values, self.settings.retrieval.doc_values_follow_every_s),
                    name="doc-values",
                )
            )

    def _start_writing_jobs(self, pool: asyncpg.Pool, index: VectorIndex) -> None:
        """The storing retriever's background jobs, each one replica at a time where it must be."""
        self._tasks += [
            # The lexical index's new small blocks are merged.
            asyncio.create_task(
                compact_forever(pool, self.settings.retrieval.bm25_compact_every_s), name="bm25-compaction"
            ),
            # The vector table gets the configured HNSW or IVFFlat index, trained for its size.
            asyncio.create_task(maintain_forever(pool, index, self.settings.database), name="vector-index-maintenance"),
            # The documents' change feed (doc values) loses rows older than any follower needs.
            asyncio.create_task(prune_forever(pool), name="change-feed-pruning"),
        ]

    async def stop(self) -> None:
        if self._doc_values is not None:
            await self._doc_values.stop()
        for task in self._tasks:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for pool in {id(p): p for p in (self._values_pool, self._search_pool, self._pool) if p is not None}.values():
            await pool.close()

    async def ready(self) -> bool:
        pools = [p for p in (self._pool, self._search_pool) if p is not None]
        return self._index is not None and bool(pools) and all([await reachable(p) for p in pools])

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "retriever not started"
        return self._pool

    @property
    def search_pool(self) -> asyncpg.Pool:
        assert self._search_pool is not None, "retriever not started"
        return self._search_pool

    @property
    def doc_values(self) -> DocValuesFollower | None:
        """The doc values a searching retriever holds (None when not held)."""
        return self._doc_values

    @property
    def embedder(self) -> Embedder:
        assert self._embedder is not None, "retriever not started"
        return self._embedder

    @property
    def index(self) -> VectorIndex:
        assert self._index is not None, "retriever not started"
        return self._index

    async def index_for(self, model: str, dim: int) -> VectorIndex | None:
        """Where vectors from ``model`` go: the active index, or a building one (reindexing)."""
        if model == self.index.model and dim == self.index.dim:
            return self.index
        return await live_index_for(self.pool, model, dim)

    async def current_searcher(self) -> SearchEngine:
        """:meth:`searcher`, its IVFFlat probes those of the live index's lists (read again every minute)."""
        await self._probes.current(self.search_pool, self.index.table_name)
        return self.searcher()

    def searcher(self) -> SearchEngine:
        return SearchEngine.from_settings(
            self.search_pool,
            self.index,
            self.settings.retrieval,
            ef_search=self.settings.database.hnsw_ef_search,
            stats=self._stats,
            postings_cache=self._postings_cache,
            ivfflat_probes=self._probes.value,
            doc_values=self._doc_values,
        )


def register(broker: KafkaBroker, state: RetrieverState) -> None:
    """Subscribe what the retriever's role does: storing ``chunks.embedded``, answering ``retrieval.requests``."""
    if state.stores:
        register_store(broker, state)
    if state.searches:
        register_search(broker, state)


def register_store(broker: KafkaBroker, state: RetrieverState) -> None:
    @broker.subscriber(
        CHUNKS_EMBEDDED,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        batch=True,
        max_records=512,
        batch_timeout_ms=100,
        decoder=undecoded_batch,
        max_poll_interval_ms=state.settings.kafka.max_poll_interval_ms,
        title="chunks.embedded:retriever",
        description="ChunkEmbedded events, stored in the vector index of their model.",
    )
    async def on_embedded(msg: KafkaMessage) -> None:
        by_model: dict[tuple[str, int], list[tuple[ConsumerRecord[Any, Any], ChunkEmbedded]]] = {}
        count = 0
        for record, e, exc in decode_records(ChunkEmbedded, records_of(msg)):  # vectors checked one by one
            if e is None:
                assert exc is not None
                await publish_dead_letters(broker, "retriever", [record], exc, 1)
                continue
            by_model.setdefault((e.model, e.dim), []).append((record, e))
            count += 1
        metrics.BATCH_SIZE.labels("retriever", CHUNKS_EMBEDDED).observe(count)
        for (model, dim), pairs in by_model.items():
            index = await state.index_for(model, dim)
            if index is None:
                await publish_dead_letters(
                    broker,
                    "retriever",
                    [r for r, _ in pairs],
                    IndexModelMismatch(f"no vector index for {model} ({dim}-d)"),
                    1,
                )
                continue
            stored = await store_isolating(index, pairs)
            if index.state == "active" and stored:
                done = await complete_documents(state.pool, index, list({e.document_id for e in stored}))
                await set_stage(state.pool, done, "embedded", force=True)

    async def store_isolating(
        index: VectorIndex, pairs: list[tuple[ConsumerRecord[Any, Any], ChunkEmbedded]]
    ) -> list[ChunkEmbedded]:
        """Upsert the vectors; if the database refuses the group for a reason in the data (:func:`is_data_error`),
        bisect it so only the records it refuses alone are dead-lettered. Any other error (an outage, a
        statement timeout, a dropped table, a bug) is raised: the dead-letter policy retries the whole batch,
        never dead-letters each of its records at once for a fault that is not in them."""
        group = [e for _, e in pairs]
        try:
            written = await upsert_vectors(
                state.pool,
                index,
                [e.chunk_id for e in group],
                [e.document_id for e in group],
                np.stack([e.vector() for e in group]),
                concurrency=state.settings.database.vector_write_concurrency,
            )
        except Exception as exc:
            if not is_data_error(exc):
                raise
            if len(pairs) == 1:
                await publish_dead_letters(broker, "retriever", [pairs[0][0]], exc, 1)
                return []
            log.warning("storing %d vectors failed (%r); bisecting", len(pairs), exc)
            mid = len(pairs) // 2
            return await store_isolating(index, pairs[:mid]) + await store_isolating(index, pairs[mid:])
        metrics.CHUNKS_STORED.labels("retriever").inc(written)
        return group


def register_search(broker: KafkaBroker, state: RetrieverState) -> None:
    kafka = state.settings.kafka
    # As for the synthesizer (shared.kafka): progress while a search works, so the gateway does not resend a
    # slow one (kafka.request_resend_after_s), and a copy reaching this process while it works on (or has just
    # answered) the first is dropped: one search, one LLM rerank, under the very overload that made it slow.
    taken = RecentRequests(ttl_s=kafka.request_timeout_s * 2)

    @broker.subscriber(
        RETRIEVAL_REQUESTS,
        group_id=GROUP_ID,
        **request_subscriber_options(kafka, RETRIEVAL_REQUESTS),
        no_reply=True,  # the reply is published explicitly, after any progress; no empty extra one
        title="retrieval.requests:retriever",
        description="A RetrievalRequest; RequestProgress while it works, then the RetrievalReply, to reply_to.",
    )
    async def on_request(request: RetrievalRequest, msg: KafkaMessage) -> None:
        if not taken.claim(msg.correlation_id):
            log.info("copy of a search already taken here; dropped", extra={"correlation_id": msg.correlation_id})
            return
        # The caller (the gateway) waits request_timeout_s from publishing; past that nobody reads the
        # reply, so the search (and its SQL, cancelled with the task) stops there too.
        budget_s = remaining_budget_s(msg, kafka.request_timeout_s)
        try:
            with usage_scope() as ledger:  # the LLM reranker's calls, sent back with the hits
                async with progress_while(broker, msg, kafka.request_progress_every_s, request.trace_id):
                    async with asyncio.timeout(budget_s):
                        result, rendered = await _search(state, request)
            answer = RetrievalReply(
                trace_id=request.trace_id,
                hits=result.hits,
                model=state.index.model,
                took_ms=result.took_ms,
                llm_calls=ledger.calls,
                rendered_query=rendered,
            )
        except UnservableRequest as exc:
            answer = RetrievalReply(
                trace_id=request.trace_id, error=ErrorInfo(type="BadRequest", message=str(exc), status=400)
            )
        except TimeoutError:
            metrics.REQUESTS_ABANDONED.labels(RETRIEVAL_REQUESTS).inc()
            log.warning("search abandoned: its caller stopped waiting", extra={"budget_s": round(budget_s, 3)})
            answer = RetrievalReply(
                trace_id=request.trace_id,
                error=ErrorInfo(
                    type="Timeout", message=f"search cancelled after the caller's {budget_s:.1f}s budget", status=504
                ),
            )
        except Exception as exc:  # the caller gets the error instead of a timeout
            log.exception("search failed")
            answer = RetrievalReply(trace_id=request.trace_id, error=search_failure(exc))
        await reply(broker, msg, answer)


def search_failure(exc: Exception) -> ErrorInfo:
    """What the caller is told of a search that failed: 503 for an outage of the database or the broker
    (:func:`shared.kafka.errors.is_transient`: try again shortly), 500 for anything else (a bug)."""
    return ErrorInfo(type=type(exc).__name__, message=str(exc), status=503 if is_transient(exc) else 500)


def remaining_budget_s(msg: KafkaMessage, timeout_s: float) -> float:
    """What is left of the caller's ``timeout_s`` (counted from the request's Kafka timestamp); at least 0."""
    records = records_of(msg)
    if not records or records[0].timestamp is None:
        return timeout_s
    age_s = time.time() - float(records[0].timestamp) / 1000
    return max(0.0, timeout_s - max(0.0, age_s))


async def _search(state: RetrieverState, request: RetrievalRequest) -> tuple[SearchResult, str]:
    """Takes a request; returns its result and the query as searched (the engine's :func:`serve`)."""
    return await serve(await state.current_searcher(), state.embedder, request, state.settings)
