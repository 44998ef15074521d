"""Fetcher handlers: ``ingest.requests`` -> ``pmids.discovered`` -> efetch -> ``documents.fetched``;
``ncbi.requests`` (request/reply): PubMed hit counts for the gateway's workflows.

Besides PubMed records, an ``IngestRequested`` may ask for
- ``full_text``: after a batch of PMIDs is fetched, the PMIDs are mapped to PMC ids and the open-access
  JATS articles are published too (``jats-xml``, id ``pmc:PMCnnn``), attached to the job;
- ``bookshelf_publisher``: the publisher's Bookshelf Open Access packages (exact name, at most
  ``bookshelf_max_packages``) become one ``bookshelf.packages`` event each; each is downloaded by its own
  handler call (bounded by ``bookshelf_package_timeout_s``, under the poll interval) and its NXML parts
  published (``bookshelf-nxml``), attached to the job. The job is ``discovered`` once every package is read.

Documents larger than ``claim_check_bytes`` travel by reference (:mod:`shared.claimcheck`); one that still
cannot be published is marked failed with the reason. NCBI being down (:class:`EutilsUnavailable`) is
transient: the event is retried with its partitions paused, never dead-lettered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncpg
from faststream.kafka import KafkaBroker, KafkaMessage
from faststream.middlewares import AckPolicy
from lxml import etree

from services.fetcher.bookshelf import BookshelfClient, BookshelfPackage, nxml_events, publisher_packages
from services.fetcher.eutils import EutilsClient, EutilsError, EutilsQueryError, EutilsUnavailable
from services.fetcher.ingest import discover, fetch_pmc, fetch_pubmed
from services.fetcher.ratelimit import make_limiter, rate_for
from services.fetcher.store import filter_new_pmids
from shared import bookshelf, metrics
from shared.claimcheck import check_in, oversized_reason
from shared.db import create_pool, reachable
from shared.db.jobs import (
    add_job_documents,
    add_tasks,
    create_job,
    fail_documents_hook,
    fail_running_job,
    finish_task,
    mark_job,
    set_stage,
    task_state,
)
from shared.events import (
    BookshelfPackageRequested,
    DocumentDeleted,
    DocumentFetched,
    ErrorInfo,
    IngestRequested,
    NcbiCountReply,
    NcbiCountRequest,
    PmidDiscovered,
)
from shared.kafka.dead_letters import add_dead_letter_hook, publish_dead_letters
from shared.kafka.decoding import decode_batch
from shared.kafka.reply_server import reply, request_subscriber_options
from shared.kafka.topics import BOOKSHELF_PACKAGES, DOCUMENTS_FETCHED, INGEST_REQUESTS, NCBI_REQUESTS, PMIDS_DISCOVERED
from shared.models import document_id
from shared.settings import Settings

log = logging.getLogger(__name__)
GROUP_ID = "evidentia-fetcher"
BOOKSHELF_PUBLISH_BATCH = 50
SEARCH_TASK = "pubmed-search"


def package_task(accession: str) -> str:
    """The job task of one Bookshelf package."""
    return f"bookshelf:{accession}"


def package_key(job_id: str, accession: str) -> str:
    """Kafka key of a ``bookshelf.packages`` event (no ``:``, so it is never taken for a document id)."""
    return f"{job_id}/{accession}"


def fail_jobs_hook(pool: asyncpg.Pool) -> Callable[[list[str], BaseException], Awaitable[None]]:
    """A dead-letter hook for the fetcher's own topics: a dead-lettered ingest request fails its job, a
    dead-lettered package fails its task (so the job still completes), each with the reason."""

    async def hook(keys: list[str], exc: BaseException) -> None:
        reason = f"{type(exc).__name__}: {exc}"[:2000]
        for key in keys:
            if ":" in key:
                continue  # a document id: fail_documents_hook
            if "/" in key:
                job_id, _, accession = key.partition("/")
                await finish_task(pool, job_id, package_task(accession), f"Bookshelf {accession}: {reason}")
            else:
                await fail_running_job(pool, key, reason)

    return hook


class FetcherState:
    def __init__(self, settings: Settings):
        package_ms = settings.ncbi.bookshelf_package_timeout_s * 1000
        if package_ms >= settings.kafka.max_poll_interval_ms:
            raise ValueError(
                f"EVIDENTIA_BOOKSHELF_PACKAGE_TIMEOUT_S ({settings.ncbi.bookshelf_package_timeout_s:g} s) must be "
                f"under EVIDENTIA_KAFKA_MAX_POLL_INTERVAL_MS ({settings.kafka.max_poll_interval_ms} ms), or a slow "
                "package would lose its partition and be read twice"
            )
        self.settings = settings
        self._pool: asyncpg.Pool | None = None
        self._client: EutilsClient | None = None
        self._bookshelf: BookshelfClient | None = None

    async def start(self) -> None:
        self._pool = await create_pool(self.settings.database)
        add_dead_letter_hook(fail_documents_hook(self._pool))
        add_dead_letter_hook(fail_jobs_hook(self._pool))
        ncbi = self.settings.ncbi
        api_key = ncbi.ncbi_api_key.get_secret_value() if ncbi.ncbi_api_key else None
        limiter = make_limiter(ncbi.ncbi_rate_scope, rate_for(api_key, ncbi.ncbi_rate_per_s), self._pool)
        self._client = EutilsClient(ncbi, limiter=limiter)
        self._bookshelf = BookshelfClient(ncbi)

    async def stop(self) -> None:
        if self._client is not None:
            await self._client.aclose()
        if self._bookshelf is not None:
            await self._bookshelf.aclose()
        if self._pool is not None:
            await self._pool.close()

    async def ready(self) -> bool:
        return self._client is not None and await reachable(self.pool)

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

    packages_out = broker.publisher(BOOKSHELF_PACKAGES, title="bookshelf.packages", schema=BookshelfPackageRequested)
    poll_ms = state.settings.kafka.max_poll_interval_ms

    async def publish_documents(docs: Sequence[DocumentFetched], *, force: bool = False) -> list[str]:
        """Publish fetched documents (large ones through the claim check); the ids published.

        A document that still cannot travel (over the message limit even so) is marked failed with the
        reason instead of failing its batch or job. Stages are set before publishing, so a parser that is
        quick cannot have its ``parsed`` overwritten by ``fetched``.
        """
        k = state.settings.kafka
        ready: list[tuple[DocumentFetched, bytes]] = []
        for doc in docs:
            checked = await check_in(state.pool, doc, k.claim_check_bytes)
            body = checked.model_dump_json().encode()
            reason = oversized_reason(len(body), k.max_request_size)
            if reason is not None:
                await set_stage(state.pool, [doc.document_id], "failed", reason, force=True)
                log.warning("document too large to publish", extra={"document_id": doc.document_id, "error": reason})
                continue
            ready.append((checked, body))
        await asyncio.gather(*(fetched_out.publish(d, key=d.document_id.encode()) for d, _ in ready))
        return [d.document_id for d, _ in ready]

    @broker.subscriber(
        INGEST_REQUESTS,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        max_poll_interval_ms=poll_ms,
        title="ingest.requests:fetcher",
        description=(
            "An IngestRequested (query or PMID list) -> one PmidDiscovered per new PMID; "
            "a Bookshelf publisher -> one BookshelfPackageRequested per package of that publisher."
        ),
    )
    async def on_ingest(request: IngestRequested) -> None:
        search = bool(request.query or request.pmids)
        if request.bookshelf_publisher:
            await create_job(
                state.pool,
                request.job_id,
                "bookshelf",
                {"bookshelf_publisher": request.bookshelf_publisher, "refresh": request.refresh},
            )
            if not await request_packages(request, also_search=search):
                return
            if not search:
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
        if request.bookshelf_publisher:
            await finish_task(state.pool, request.job_id, SEARCH_TASK)

    async def request_packages(request: IngestRequested, *, also_search: bool) -> bool:
        """One ``bookshelf.packages`` event per package of the publisher; False if the job failed.

        The packages (and the PubMed search, when the request has one too) become the job's tasks: it
        stays ``running`` until each is finished, so it cannot look done while a package is unread.
        """
        publisher = request.bookshelf_publisher or ""
        try:
            found = publisher_packages(
                await state.bookshelf.file_list(), publisher, state.settings.ncbi.bookshelf_max_packages
            )
        except EutilsUnavailable:
            raise  # the list could not be had now: retried (transient)
        except EutilsError as exc:  # no such publisher, too many packages, a list that cannot be read
            await mark_job(state.pool, request.job_id, "failed", f"Bookshelf: {exc}")
            log.warning("Bookshelf ingest refused", extra={"job_id": request.job_id, "error": str(exc)})
            return False
        tasks = [package_task(p.accession) for p in found] + ([SEARCH_TASK] if also_search else [])
        await add_tasks(state.pool, request.job_id, tasks)
        await asyncio.gather(
            *(
                packages_out.publish(
                    BookshelfPackageRequested(
                        trace_id=request.trace_id,
                        job_id=request.job_id,
                        accession=p.accession,
                        path=p.path,
                        title=p.title,
                        publisher=p.publisher,
                        year=p.year,
                        last_updated=p.last_updated,
                        refresh=request.refresh,
                    ),
                    key=package_key(request.job_id, p.accession).encode(),
                )
                for p in found
            )
        )
        log.info(
            "Bookshelf packages requested",
            extra={"job_id": request.job_id, "publisher": publisher, "packages": len(found)},
        )
        return True

    @broker.subscriber(
        BOOKSHELF_PACKAGES,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        max_poll_interval_ms=poll_ms,
        title="bookshelf.packages:fetcher",
        description="One Bookshelf package: downloaded, its NXML parts published as DocumentFetched (bookshelf-nxml).",
    )
    async def on_package(request: BookshelfPackageRequested) -> None:
        task = package_task(request.accession)
        if await task_state(state.pool, request.job_id, task) in ("done", "failed"):
            return  # a redelivery after the work was finished
        package = BookshelfPackage(
            request.path, request.title, request.publisher, request.year, request.accession, request.last_updated
        )
        timeout = state.settings.ncbi.bookshelf_package_timeout_s
        try:
            async with asyncio.timeout(timeout):
                parts = await read_package(request, package)
        except EutilsUnavailable:
            raise  # the server is down: retried later, the partition paused meanwhile
        except (EutilsError, TimeoutError) as exc:
            reason = str(exc) if isinstance(exc, EutilsError) else f"took longer than {timeout:g} s"
            await finish_task(state.pool, request.job_id, task, f"Bookshelf {request.accession}: {reason}")
            log.warning("Bookshelf package failed", extra={"job_id": request.job_id, "error": reason})
            return
        await finish_task(state.pool, request.job_id, task)
        log.info(
            "Bookshelf package read", extra={"job_id": request.job_id, "package": request.accession, "parts": parts}
        )

    async def read_package(request: BookshelfPackageRequested, package: BookshelfPackage) -> int:
        """Download one package and publish its parts in batches, attached to the job; the part count."""
        published = 0
        batch: list[DocumentFetched] = []

        async def flush() -> None:
            # The job follows the documents the parser will store: one per book part.
            ids = [i for d in batch for i in await asyncio.to_thread(bookshelf_document_ids, d)]
            await add_job_documents(state.pool, request.job_id, ids)
            await set_stage(state.pool, ids, "fetched", force=request.refresh)
            await publish_documents(batch)
            batch.clear()

        async for item in state.bookshelf.iter_nxml(package):
            for doc in nxml_events([item], job_id=request.job_id, trace_id=request.trace_id):
                batch.append(doc)
                published += 1
            if len(batch) >= BOOKSHELF_PUBLISH_BATCH:
                await flush()
        if batch:
            await flush()
        return published

    @broker.subscriber(
        PMIDS_DISCOVERED,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        batch=True,
        max_records=state.settings.ncbi.efetch_batch,
        batch_timeout_ms=500,
        max_poll_interval_ms=poll_ms,
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
        fetched_docs: list[DocumentFetched] = []
        pending: list[Awaitable[Any]] = []
        async for doc in fetch_pubmed(wanted, state.client):
            origin = by_pmid.get(doc.source_id)
            if origin is not None:
                doc.trace_id = origin.trace_id
                doc.job_id = origin.job_id
            seen.add(doc.source_id)
            if isinstance(doc, DocumentFetched):
                fetched_docs.append(doc)
            else:
                pending.append(fetched_out.publish(doc, key=doc.document_id.encode()))
        # Full text before the PubMed records are published: the PMC documents are attached to their
        # job first, so the job cannot look done while they are still to come.
        full_text = [p for p in wanted if p in seen and by_pmid.get(p) is not None and by_pmid[p].full_text]
        if full_text:
            pending += await full_text_events(full_text, by_pmid)
        pending.append(publish_documents(fetched_docs))
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
            except EutilsUnavailable:
                raise  # NCBI down: the whole batch is retried later (publishing is idempotent)
            except EutilsError as exc:  # the PubMed records still go on; the job records nothing for PMC
                log.warning("PMC full text not fetched", extra={"job_id": job_id, "error": str(exc)})
                continue
            ids = [d.document_id for d in docs]
            if job_id:
                await add_job_documents(state.pool, job_id, ids)
            await set_stage(state.pool, ids, "fetched", force=any(by_pmid[p].refresh for p in group))
            pending.append(publish_documents(docs))
            log.info("PMC full text", extra={"job_id": job_id, "pmids": len(group), "articles": len(docs)})
        return pending

    @broker.subscriber(
        NCBI_REQUESTS,
        group_id=GROUP_ID,
        **request_subscriber_options(state.settings.kafka, NCBI_REQUESTS),
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
