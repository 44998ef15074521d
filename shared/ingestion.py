"""Starting an ingestion job: the one sequence behind every way of starting one.

Used by the gateway's ``POST /v1/ingest`` (a query, PMIDs, a Bookshelf publisher and/or inline documents),
its drug-disease evidence workflow (one job per PubMed search) and ``evidentia ingest --file/--jsonl/--dir``
(documents read from files). It lives in ``shared`` because the gateway (a service) and the CLI (tooling)
both run it and the CLI should not import the gateway's web stack to do so.

The sequence: the job row is created; a discovery request (``IngestRequested``) goes to ``ingest.requests``
for the fetcher; documents already at hand are attached to the job, marked ``fetched``, claim-checked when
large (:mod:`shared.claimcheck`) and published to ``documents.fetched``. A document that still cannot travel
is marked ``failed`` with the reason (its job still completes). A job of documents alone has nothing left to
discover, so it is marked ``discovered`` once they are published.

:func:`document_event` is the one way a document already structured (inline in ``POST /v1/ingest``, a line of a
JSON-lines import) becomes the ``DocumentFetched`` the parser reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from shared.claimcheck import check_in, oversized_reason
from shared.db.jobs import Db, add_job_documents, create_job, mark_job, set_stage
from shared.events import DocumentDeleted, DocumentFetched, Event, IngestRequested
from shared.kafka.topics import DOCUMENTS_FETCHED, INGEST_REQUESTS
from shared.models import ParsedDocument
from shared.settings import KafkaSettings

#: Publishes ``event`` to ``topic`` with ``key`` (the gateway's Kafka client, or the CLI's bare producer).
Publish = Callable[[Event, str, str], Awaitable[None]]


def document_event(doc: ParsedDocument, *, job_id: str | None = None, trace_id: str | None = None) -> DocumentFetched:
    """Takes a structured document and returns its ``DocumentFetched`` (format ``document-json``, keyed by the
    document's id, carrying ``doc`` itself) for job ``job_id``; ``trace_id`` None: the current trace, else a new one."""
    extra = {"trace_id": trace_id} if trace_id else {}
    return DocumentFetched(
        document_id=doc.document_id,
        source=doc.source,
        source_id=doc.source_id,
        format="document-json",
        document=doc,
        job_id=job_id,
        **extra,
    )


async def submit_documents(
    pool: Db,
    publish: Publish,
    kafka: KafkaSettings,
    *,
    job_id: str,
    kind: str,
    params: dict[str, Any],
    request: IngestRequested | None = None,
    documents: Sequence[DocumentFetched | DocumentDeleted] = (),
    window: int = 1,
    on_failed: Callable[[str, str], None] | None = None,
) -> int:
    """Start ingestion job ``job_id`` (``kind`` and ``params`` are recorded with it).

    Takes the discovery ``request`` to publish (or None) and the ``documents`` already fetched; publishes
    up to ``window`` documents at a time (1: one after the other, in order) and calls ``on_failed(document
    id, reason)`` for each document too large to travel. Returns the number of document events published.
    """
    await create_job(pool, job_id, kind, params)
    if request is not None:
        await publish(request, INGEST_REQUESTS, job_id)
    if not documents:
        return 0
    fetched = [e.document_id for e in documents if isinstance(e, DocumentFetched)]
    await add_job_documents(pool, job_id, fetched)
    await set_stage(pool, fetched, "fetched")
    travelling: list[DocumentFetched | DocumentDeleted] = []
    for event in documents:
        if isinstance(event, DocumentFetched):
            event = await check_in(pool, event, kafka.claim_check_bytes)
            reason = oversized_reason(len(event.model_dump_json().encode()), kafka.max_request_size)
            if reason is not None:
                await set_stage(pool, [event.document_id], "failed", reason, force=True)
                if on_failed is not None:
                    on_failed(event.document_id, reason)
                continue
        travelling.append(event)
    for start in range(0, len(travelling), max(window, 1)):
        batch = travelling[start : start + max(window, 1)]
        await asyncio.gather(*(publish(e, DOCUMENTS_FETCHED, e.document_id) for e in batch))
    if request is None:
        await mark_job(pool, job_id, "discovered")
    return len(travelling)
