"""Fetcher handlers: ``ingest.requests`` -> ``pmids.discovered`` -> efetch -> ``documents.fetched``;
``ncbi.requests`` (request/reply): PubMed hit counts for the gateway's workflows.

Besides PubMed records, an ``IngestRequested`` may ask for
- ``full_text``: after a batch of PMIDs is fetched, the PMIDs are mapped to PMC ids and the open-access
  JATS articles are published too (``jats-xml``, id ``pmc:PMCnnn``), attached to the job;
- ``bookshelf_publisher``: every Bookshelf Open Access package of that publisher is downloaded and
  each NXML part published (``bookshelf-nxml``), attached to the job.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

import asyncpg
from faststream.kafka import KafkaBroker, KafkaMessage
from faststream.middlewares import AckPolicy
from lxml import etree

from services.fetcher.bookshelf import BookshelfClient, nxml_events
from services.fetcher.eutils import EutilsClient, EutilsError, EutilsQueryError
from services.fetcher.ingest import discover, fetch_pmc, fetch_pubmed
from services.fetcher.tracking import filter_new_pmids
from shared import bookshelf, metrics
from shared.broker import add_dead_letter_hook, decode_batch, publish_dead_letters, reply, request_subscriber_options
from shared.db import create_pool
from shared.db.jobs import add_job_documents, create_job, fail_documents_hook, mark_job, set_stage
from shared.events import (
    DocumentDeleted,
    DocumentFetched,
    ErrorInfo,
    IngestRequested,
    NcbiCountReply,
    NcbiCountRequest,
    PmidDiscovered,
)
from shared.models import document_id
from shared.settings import Settings
from shared.topics import DOCUMENTS_FETCHED, INGEST_REQUESTS, NCBI_REQUESTS, PMIDS_DISCOVERED

log = logging.getLogger(__name__)
GROUP_ID = "evidentia-fetcher"
BOOKSHELF_PUBLISH_BATCH = 50


class FetcherState:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._pool: asyncpg.Pool | None = None
        self._client: EutilsClient | None = None
        self._bookshelf: BookshelfClient | None = None

    async def start(self) -> None:
        self._pool = await create_pool(self.settings.database)
        add_dead_letter_hook(fail_documents_hook(self._pool))
        self._client = EutilsClient(self.settings.ncbi)
        self._bookshelf = BookshelfClient(self.settings.ncbi)

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        if self._bookshelf is not None:
            await self._bookshelf.aclose()
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

    @property
    def bookshelf(self) -> BookshelfClient:
        assert self._bookshelf is not None, "fetcher not started"
        return self._bookshelf


def bookshelf_document_ids(event: DocumentFetched) -> list[str]:
    """The ids of the documents the parser makes of a Bookshelf NXML file: one per (kept) book part.

    A package file may hold a whole book; the parser stores each ``book-part`` as its own document, so a
    job must count those, not the file. A file that does not parse keeps its own id (the parser will
    dead-letter it and mark that id failed).
    """
    try:
        return [document_id("bookshelf", sid) for sid in bookshelf.source_ids(event.content or "")]
    except (ValueError, etree.LxmlError) as exc:
        log.info("Bookshelf file not parsable here", extra={"document_id": event.document_id, "error": str(exc)})
        return [event.document_id]


def register(broker: KafkaBroker, state: FetcherState) -> None:
    discovered_out = broker.publisher(PMIDS_DISCOVERED, title="pmids.discovered", schema=PmidDiscovered)
    fetched_out = broker.publisher(DOCUMENTS_FETCHED, title="documents.fetched", schema=DocumentFetched)

    @broker.subscriber(
        INGEST_REQUESTS,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        title="ingest.requests:fetcher",
        description=(
            "An IngestRequested (query or PMID list) -> one PmidDiscovered per new PMID; "
            "a Bookshelf publisher -> one DocumentFetched (bookshelf-nxml) per NXML part."
        ),
    )
    async def on_ingest(request: IngestRequested) -> None:
        if request.bookshelf_publisher:
            await create_job(
                state.pool,
                request.job_id,
                "bookshelf",
                {"bookshelf_publisher": request.bookshelf_publisher, "refresh": request.refresh},
            )
            if not await ingest_bookshelf(request):
                return
            if not (request.query or request.pmids):
                await mark_job(state.pool, request.job_id, "discovered")
                return
        try:
            pmids = await discover(request, state.client, state.pool, state.settings)
        except ValueError as exc:  # a bad query (NCBI error list): the job fails with the reason
            await mark_job(state.pool, request.job_id, "failed", str(exc))
            log.warning("ingest request failed", extra={"job_id": request.job_id, "error": str(exc)})
            return
        await asyncio.gather(
            *(
                discovered_out.publish(
                    PmidDiscovered(
                        trace_id=request.trace_id,
                        pmid=p,
                        job_id=request.job_id,
                        refresh=request.refresh,
                        full_text=request.full_text,
                    ),
                    key=f"pubmed:{p}".encode(),
                )
                for p in pmids
            )
        )
        await mark_job(state.pool, request.job_id, "discovered")

    async def ingest_bookshelf(request: IngestRequested) -> bool:
        """Publish every NXML part of the publisher's packages, attached to the job; False if it failed.

        The job stays ``running`` until the last part is attached, so it cannot look done early.
        """
        publisher = request.bookshelf_publisher or ""
        published = 0
        batch: list[DocumentFetched] = []

        async def flush() -> None:
            # The job follows the documents the parser will store: one per book part.
            ids = [i for d in batch for i in await asyncio.to_thread(bookshelf_document_ids, d)]
            await add_job_documents(state.pool, request.job_id, ids)
            await set_stage(state.pool, ids, "fetched", force=request.refresh)
            await asyncio.gather(*(fetched_out.publish(d, key=d.document_id.encode()) for d in batch))
            batch.clear()

        try:
            async for item in state.bookshelf.iter_publisher(publisher):
                for doc in nxml_events([item], job_id=request.job_id, trace_id=request.trace_id):
                    batch.append(doc)
                    published += 1
                if len(batch) >= BOOKSHELF_PUBLISH_BATCH:
                    await flush()
            if batch:
                await flush()
        except EutilsError as exc:  # BookshelfError included: the list or a package could not be had
            await mark_job(state.pool, request.job_id, "failed", f"Bookshelf: {exc}")
            log.warning("Bookshelf ingest failed", extra={"job_id": request.job_id, "error": str(exc)})
            return False
        if not published:
            log.warning("no Bookshelf parts found", extra={"job_id": request.job_id, "publisher": publisher})
        log.info(
            "Bookshelf parts published", extra={"job_id": request.job_id, "publisher": publisher, "parts": published}
        )
        return True

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
        pending: list[Awaitable[Any]] = []
        async for doc in fetch_pubmed(wanted, state.client):
            origin = by_pmid.get(doc.source_id)
            if origin is not None:
                doc.trace_id = origin.trace_id
                doc.job_id = origin.job_id
            seen.add(doc.source_id)
            pending.append(fetched_out.publish(doc, key=doc.document_id.encode()))
        # Full text before the PubMed records are published: the PMC documents are attached to their
        # job first, so the job cannot look done while they are still to come.
        full_text = [p for p in wanted if p in seen and by_pmid.get(p) is not None and by_pmid[p].full_text]
        if full_text:
            pending += await full_text_events(full_text, by_pmid)
        await asyncio.gather(*pending)
        fetched = [f"pubmed:{p}" for p in wanted if p in seen]
        missing = [f"pubmed:{p}" for p in wanted if p not in seen]
        await set_stage(state.pool, fetched, "fetched")
        if missing:
            await set_stage(state.pool, missing, "failed", "PMID not returned by efetch", force=True)

    async def full_text_events(pmids: list[str], by_pmid: dict[str, PmidDiscovered]) -> list[Awaitable[Any]]:
        """Open-access PMC articles of ``pmids``, attached to their jobs; their publish calls, to await."""
        by_job: dict[str | None, list[str]] = {}
        for p in pmids:
            by_job.setdefault(by_pmid[p].job_id, []).append(p)
        pending: list[Awaitable[Any]] = []
        for job_id, group in by_job.items():
            trace_id = by_pmid[group[0]].trace_id
            docs: list[DocumentFetched] = []
            try:
                async for doc in fetch_pmc(group, state.client, job_id=job_id, trace_id=trace_id):
                    docs.append(doc)
            except EutilsError as exc:  # the PubMed records still go on; the job records nothing for PMC
                log.warning("PMC full text not fetched", extra={"job_id": job_id, "error": str(exc)})
                continue
            ids = [d.document_id for d in docs]
            if job_id:
                await add_job_documents(state.pool, job_id, ids)
            await set_stage(state.pool, ids, "fetched", force=any(by_pmid[p].refresh for p in group))
            pending += [fetched_out.publish(d, key=d.document_id.encode()) for d in docs]
            log.info("PMC full text", extra={"job_id": job_id, "pmids": len(group), "articles": len(docs)})
        return pending

    @broker.subscriber(
        NCBI_REQUESTS,
        group_id=GROUP_ID,
        **request_subscriber_options(state.settings.kafka),
        title="ncbi.requests:fetcher",
        description="An NcbiCountRequest; the NcbiCountReply (esearch count) goes to the reply_to topic.",
    )
    async def on_count(request: NcbiCountRequest, msg: KafkaMessage) -> None:
        try:
            count = await state.client.count(request.term, request.database)
            answer = NcbiCountReply(trace_id=request.trace_id, term=request.term, count=count)
        except EutilsQueryError as exc:  # NCBI refused the term: the caller's fault, not a retry
            answer = NcbiCountReply(
                trace_id=request.trace_id,
                term=request.term,
                error=ErrorInfo(type="EutilsQueryError", message=str(exc), status=422),
            )
        except EutilsError as exc:
            log.warning("count failed", extra={"term": request.term, "error": str(exc)})
            answer = NcbiCountReply(
                trace_id=request.trace_id,
                term=request.term,
                error=ErrorInfo(type=type(exc).__name__, message=str(exc), status=502),
            )
        await reply(broker, msg, answer)


__all__ = ["DocumentDeleted", "FetcherState", "register"]
