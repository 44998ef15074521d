"""Fetcher handlers: ``ingest.requests`` -> ``pmids.discovered`` -> efetch -> ``documents.fetched``;
``ncbi.requests`` (request/reply): PubMed hit counts for the gateway's workflows."""

from __future__ import annotations

import asyncio
import logging

import asyncpg
from faststream.kafka import KafkaBroker, KafkaMessage
from faststream.middlewares import AckPolicy

from services.fetcher.eutils import EutilsClient, EutilsError, EutilsQueryError
from services.fetcher.ingest import discover, fetch_pubmed
from services.fetcher.tracking import filter_new_pmids
from shared import metrics
from shared.broker import add_dead_letter_hook, decode_batch, publish_dead_letters, reply
from shared.db import create_pool
from shared.db.jobs import fail_documents_hook, mark_job, set_stage
from shared.events import (
    DocumentDeleted,
    DocumentFetched,
    ErrorInfo,
    IngestRequested,
    NcbiCountReply,
    NcbiCountRequest,
    PmidDiscovered,
)
from shared.settings import Settings
from shared.topics import DOCUMENTS_FETCHED, INGEST_REQUESTS, NCBI_REQUESTS, PMIDS_DISCOVERED

log = logging.getLogger(__name__)
GROUP_ID = "evidentia-fetcher"


class FetcherState:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._pool: asyncpg.Pool | None = None
        self._client: EutilsClient | None = None

    async def start(self) -> None:
        self._pool = await create_pool(self.settings.database)
        add_dead_letter_hook(fail_documents_hook(self._pool))
        self._client = EutilsClient(self.settings.ncbi)

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        if self._pool is not None:
            await self._pool.close()

    async def ready(self) -> bool:
        return self._client is not None and bool(await self.pool.fetchval("SELECT 1"))

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "fetcher not started"
        return self._pool

    @property
    def client(self) -> EutilsClient:
        assert self._client is not None, "fetcher not started"
        return self._client


def register(broker: KafkaBroker, state: FetcherState) -> None:
    discovered_out = broker.publisher(PMIDS_DISCOVERED, title="pmids.discovered", schema=PmidDiscovered)
    fetched_out = broker.publisher(DOCUMENTS_FETCHED, title="documents.fetched", schema=DocumentFetched)

    @broker.subscriber(
        INGEST_REQUESTS,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        title="ingest.requests:fetcher",
        description="An IngestRequested (query or PMID list) -> one PmidDiscovered per new PMID.",
    )
    async def on_ingest(request: IngestRequested) -> None:
        try:
            pmids = await discover(request, state.client, state.pool, state.settings)
        except ValueError as exc:  # a bad query (NCBI error list): the job fails with the reason
            await mark_job(state.pool, request.job_id, "failed", str(exc))
            log.warning("ingest request failed", extra={"job_id": request.job_id, "error": str(exc)})
            return
        await asyncio.gather(
            *(
                discovered_out.publish(
                    PmidDiscovered(trace_id=request.trace_id, pmid=p, job_id=request.job_id, refresh=request.refresh),
                    key=f"pubmed:{p}".encode(),
                )
                for p in pmids
            )
        )
        await mark_job(state.pool, request.job_id, "discovered")

    @broker.subscriber(
        PMIDS_DISCOVERED,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        batch=True,
        max_records=state.settings.ncbi.efetch_batch,
        batch_timeout_ms=500,
        title="pmids.discovered:fetcher",
        description="PmidDiscovered events, fetched with efetch in batches.",
    )
    async def on_pmids(msg: KafkaMessage) -> None:
        events, poison = decode_batch(PmidDiscovered, msg)
        for record, exc in poison:
            await publish_dead_letters(broker, "fetcher", [record], exc, 1)
        if not events:
            return
        metrics.BATCH_SIZE.labels("fetcher", PMIDS_DISCOVERED).observe(len(events))
        refresh = {e.pmid for e in events if e.refresh}
        wanted = await filter_new_pmids(state.pool, [e.pmid for e in events if e.pmid not in refresh], False)
        wanted += [p for p in dict.fromkeys(e.pmid for e in events) if p in refresh]
        if not wanted:
            return
        by_pmid = {e.pmid: e for e in events}
        seen: set[str] = set()
        pending = []
        async for doc in fetch_pubmed(wanted, state.client):
            origin = by_pmid.get(doc.source_id)
            if origin is not None:
                doc.trace_id = origin.trace_id
                doc.job_id = origin.job_id
            seen.add(doc.source_id)
            pending.append(fetched_out.publish(doc, key=doc.document_id.encode()))
        await asyncio.gather(*pending)
        fetched = [f"pubmed:{p}" for p in wanted if p in seen]
        missing = [f"pubmed:{p}" for p in wanted if p not in seen]
        await set_stage(state.pool, fetched, "fetched")
        if missing:
            await set_stage(state.pool, missing, "failed", "PMID not returned by efetch", force=True)

    @broker.subscriber(
        NCBI_REQUESTS,
        group_id=GROUP_ID,
        auto_offset_reset="latest",
        # Concurrent, acknowledged on receipt: a caller waits at most its timeout, so a request is never redelivered.
        ack_policy=AckPolicy.ACK_FIRST,
        max_workers=state.settings.kafka.request_concurrency,
        title="ncbi.requests:fetcher",
        description="An NcbiCountRequest; the NcbiCountReply (esearch count) goes to the reply_to topic.",
    )
    async def on_count(request: NcbiCountRequest, msg: KafkaMessage) -> None:
        try:
            count = await state.client.count(request.term, request.database)
            answer = NcbiCountReply(trace_id=request.trace_id, term=request.term, count=count)
        except EutilsQueryError as exc:  # NCBI refused the term: the caller's fault, not a retry
            answer = NcbiCountReply(trace_id=request.trace_id, term=request.term,
                                    error=ErrorInfo(type="EutilsQueryError", message=str(exc), status=422))
        except EutilsError as exc:
            log.warning("count failed", extra={"term": request.term, "error": str(exc)})
            answer = NcbiCountReply(trace_id=request.trace_id, term=request.term,
                                    error=ErrorInfo(type=type(exc).__name__, message=str(exc), status=502))
        await reply(broker, msg, answer)


__all__ = ["DocumentDeleted", "FetcherState", "register"]
