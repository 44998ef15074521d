"""``ingest.requests`` -> discovery: each source request of an ``IngestRequested`` goes to its source.

How a source's units travel on is the registry's (:class:`services.fetcher.sources.FetcherSources`): PMIDs go on
``pmids.discovered`` (one ``PmidDiscovered`` per new PMID), Bookshelf packages on ``bookshelf.packages`` (one
event per package; the job is ``discovered`` once every package is read), and the units of any other source
are fetched here and published on ``documents.fetched``. A request with packages beside other work gives its job
one task for that work (:data:`services.fetcher.jobs.SEARCH_TASK`).
"""

from __future__ import annotations

import asyncio
import logging

from faststream.kafka import KafkaRouter
from faststream.middlewares import AckPolicy

from services.fetcher.discovery import discover
from services.fetcher.eutils import EutilsError, EutilsUnavailable
from services.fetcher.jobs import SEARCH_TASK, package_key, package_task
from services.fetcher.outlets import Outlets, OutletsDep, publish_documents
from services.fetcher.state import GROUP_ID, FetcherState, StateDep
from shared.db.jobs import add_job_documents, add_tasks, create_job, finish_task, mark_job, set_stage
from shared.events import (
    FULL_TEXT_OPTION,
    PUBLISHER_OPTION,
    BookshelfPackageRequested,
    DocumentFetched,
    IngestRequested,
    PmidDiscovered,
    SourceRequest,
)
from shared.kafka.topics import INGEST_REQUESTS
from shared.models import document_id
from shared.settings import Settings
from shared.sources.pubmed import PUBMED

log = logging.getLogger(__name__)


def _job_params(request: IngestRequested) -> dict[str, object]:
    return request.model_dump(mode="json", include={"sources", "max_results", "refresh"})


async def on_ingest(request: IngestRequested, state: StateDep, outlets: OutletsDep) -> None:
    sources = state.sources
    packages = [p for p in request.sources if p.source == sources.packages.rule.name]
    by_pmid = [p for p in request.sources if p.source in sources.by_pmid]
    inline = [p for p in request.sources if p.source in sources.inline]
    others = bool(by_pmid or inline)
    if packages:
        publisher = str(packages[0].options.get(PUBLISHER_OPTION) or "")
        await create_job(
            state.pool,
            request.job_id,
            sources.packages.rule.name,
            {"bookshelf_publisher": publisher, "refresh": request.refresh},
        )
        if not await request_packages(state, outlets, request, packages[0], also_search=others):
            return
        if not others:
            return
    try:
        for part in inline:
            await fetch_inline(state, outlets, request, part)
        if by_pmid or not inline:
            await discover_pmids(state, outlets, request)
    except ValueError as exc:  # a bad query (the source's error list): the job fails with the reason
        await mark_job(state.pool, request.job_id, "failed", str(exc))
        log.warning("ingest request failed", extra={"job_id": request.job_id, "error": str(exc)})
        return
    await mark_job(state.pool, request.job_id, "discovered")
    if packages:
        await finish_task(state.pool, request.job_id, SEARCH_TASK)


async def discover_pmids(state: FetcherState, outlets: Outlets, request: IngestRequested) -> None:
    """The new PMIDs of the request's PubMed and PMC parts, one ``PmidDiscovered`` each."""
    pmids = await discover(request, state.sources.by_pmid, state.pool)
    full_text = any(p.options.get(FULL_TEXT_OPTION) for p in request.sources if p.source in state.sources.by_pmid)
    await asyncio.gather(
        *(
            outlets.discovered.publish(
                PmidDiscovered(
                    trace_id=request.trace_id,
                    pmid=p,
                    job_id=request.job_id,
                    refresh=request.refresh,
                    full_text=full_text,
                ),
                key=document_id(PUBMED.name, p).encode(),
            )
            for p in pmids
        )
    )


async def fetch_inline(state: FetcherState, outlets: Outlets, request: IngestRequested, part: SourceRequest) -> None:
    """Discover and fetch one part at a source whose units need no topic of their own; its documents are
    attached to the job and published."""
    source = state.sources.inline[part.source]
    await create_job(state.pool, request.job_id, "query" if part.query else "ids", _job_params(request))
    units = await source.discover(part, max_results=request.max_results, refresh=request.refresh)
    docs: list[DocumentFetched] = []
    async for event in source.fetch(units, job_id=request.job_id, trace_id=request.trace_id):
        if isinstance(event, DocumentFetched):
            docs.append(event)
        else:
            await outlets.fetched.publish(event, key=event.document_id.encode())
    ids = [i for d in docs for i in await asyncio.to_thread(source.identify, d)]
    await add_job_documents(state.pool, request.job_id, ids)
    await set_stage(state.pool, ids, "fetched", force=request.refresh)
    await publish_documents(state, outlets, docs)
    log.info("fetched", extra={"job_id": request.job_id, "source": part.source, "documents": len(docs)})


async def request_packages(
    state: FetcherState, outlets: Outlets, request: IngestRequested, part: SourceRequest, *, also_search: bool
) -> bool:
    """One ``bookshelf.packages`` event per package the part names; False if the job failed.

    The packages (and the rest of the request, when there is some) become the job's tasks: it stays
    ``running`` until each is finished, so it cannot look done while a package is unread.
    """
    try:
        found = await state.sources.packages.discover(part, max_results=request.max_results, refresh=request.refresh)
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
            outlets.packages.publish(
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
        extra={"job_id": request.job_id, "publisher": part.options.get(PUBLISHER_OPTION), "packages": len(found)},
    )
    return True


def router(settings: Settings) -> KafkaRouter:
    """The ``ingest.requests`` subscriber."""
    r = KafkaRouter()
    r.subscriber(
        INGEST_REQUESTS,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        max_poll_interval_ms=settings.kafka.max_poll_interval_ms,
        title="ingest.requests:fetcher",
        description=(
            "An IngestRequested (query or PMID list) -> one PmidDiscovered per new PMID; "
            "a Bookshelf publisher -> one BookshelfPackageRequested per package of that publisher."
        ),
    )(on_ingest)
    return r
