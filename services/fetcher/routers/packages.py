"""``bookshelf.packages``: one package per handler call, downloaded (bounded by
``EVIDENTIA_BOOKSHELF_PACKAGE_TIMEOUT_S``, under the poll interval) and its parts published on
``documents.fetched`` in batches, attached to the job. The package's task is finished either way: a package that
fails records why, and the job still completes."""

from __future__ import annotations

import asyncio
import logging

from faststream.kafka import KafkaRouter
from faststream.middlewares import AckPolicy

from services.fetcher.bookshelf import BookshelfPackage
from services.fetcher.eutils import EutilsError, EutilsUnavailable
from services.fetcher.jobs import package_task
from services.fetcher.outlets import Outlets, OutletsDep, publish_documents
from services.fetcher.state import GROUP_ID, FetcherState, StateDep
from shared.db.jobs import add_job_documents, finish_task, set_stage, task_state
from shared.events import BookshelfPackageRequested, DocumentFetched
from shared.kafka.topics import BOOKSHELF_PACKAGES
from shared.settings import Settings

log = logging.getLogger(__name__)
PUBLISH_BATCH = 50


async def on_package(request: BookshelfPackageRequested, state: StateDep, outlets: OutletsDep) -> None:
    task = package_task(request.accession)
    if await task_state(state.pool, request.job_id, task) in ("done", "failed"):
        return  # a redelivery after the work was finished
    package = BookshelfPackage(
        request.path, request.title, request.publisher, request.year, request.accession, request.last_updated
    )
    timeout = state.settings.ncbi.bookshelf_package_timeout_s
    try:
        async with asyncio.timeout(timeout):
            parts = await read_package(state, outlets, request, package)
    except EutilsUnavailable:
        raise  # the server is down: retried later, the partition paused meanwhile
    except (EutilsError, TimeoutError) as exc:
        reason = str(exc) if isinstance(exc, EutilsError) else f"took longer than {timeout:g} s"
        await finish_task(state.pool, request.job_id, task, f"Bookshelf {request.accession}: {reason}")
        log.warning("Bookshelf package failed", extra={"job_id": request.job_id, "error": reason})
        return
    await finish_task(state.pool, request.job_id, task)
    log.info("Bookshelf package read", extra={"job_id": request.job_id, "package": request.accession, "parts": parts})


async def read_package(
    state: FetcherState, outlets: Outlets, request: BookshelfPackageRequested, package: BookshelfPackage
) -> int:
    """Download one package and publish its parts in batches, attached to the job; the part count."""
    source = state.sources.packages
    published = 0
    batch: list[DocumentFetched] = []

    async def flush() -> None:
        # The job follows the documents the parser will store: one per book part.
        ids = [i for d in batch for i in await asyncio.to_thread(source.identify, d)]
        await add_job_documents(state.pool, request.job_id, ids)
        await set_stage(state.pool, ids, "fetched", force=request.refresh)
        await publish_documents(state, outlets, batch)
        batch.clear()

    async for doc in source.fetch([package], job_id=request.job_id, trace_id=request.trace_id):
        batch.append(doc)
        published += 1
        if len(batch) >= PUBLISH_BATCH:
            await flush()
    if batch:
        await flush()
    return published


def router(settings: Settings) -> KafkaRouter:
    """The ``bookshelf.packages`` subscriber."""
    r = KafkaRouter()
    r.subscriber(
        BOOKSHELF_PACKAGES,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        max_poll_interval_ms=settings.kafka.max_poll_interval_ms,
        title="bookshelf.packages:fetcher",
        description="One Bookshelf package: downloaded, its NXML parts published as DocumentFetched (bookshelf-nxml).",
    )(on_package)
    return r
