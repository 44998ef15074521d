"""``pmids.discovered``: PMIDs fetched from PubMed in batches (efetch), with the open-access PMC full text of
those that ask for it; the records are published on ``documents.fetched``.

Full text goes before the PubMed records are published: the PMC documents are attached to their job first, so
the job cannot look done while they are still to come. NCBI being down (:class:`EutilsUnavailable`) is
transient: the batch is retried with its partitions paused, never dead-lettered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from faststream.kafka import KafkaRouter
from faststream.middlewares import AckPolicy

from services.fetcher.eutils import EutilsError, EutilsUnavailable
from services.fetcher.outlets import Outlets, OutletsDep, publish_documents
from services.fetcher.state import GROUP_ID, FetcherState, StateDep
from services.fetcher.store import filter_new_pmids
from shared import metrics
from shared.db.jobs import add_job_documents, set_stage
from shared.events import DocumentFetched, PmidDiscovered
from shared.kafka.context import BrokerDep, KafkaMessage
from shared.kafka.dead_letters import publish_dead_letters
from shared.kafka.decoding import decode_batch
from shared.kafka.topics import PMIDS_DISCOVERED
from shared.models import document_id
from shared.settings import Settings
from shared.sources.pubmed import PUBMED

log = logging.getLogger(__name__)


async def on_pmids(msg: KafkaMessage, state: StateDep, outlets: OutletsDep, broker: BrokerDep) -> None:
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
    async for doc in state.sources.pubmed.fetch(wanted):
        origin = by_pmid.get(doc.source_id)
        if origin is not None:
            doc.trace_id = origin.trace_id
            doc.job_id = origin.job_id
        seen.add(doc.source_id)
        if isinstance(doc, DocumentFetched):
            fetched_docs.append(doc)
        else:
            pending.append(outlets.fetched.publish(doc, key=doc.document_id.encode()))
    full_text = [p for p in wanted if p in seen and by_pmid.get(p) is not None and by_pmid[p].full_text]
    if full_text:
        pending += await full_text_events(state, outlets, full_text, by_pmid)
    pending.append(publish_documents(state, outlets, fetched_docs))
    await asyncio.gather(*pending)
    fetched = [document_id(PUBMED.name, p) for p in wanted if p in seen]
    missing = [document_id(PUBMED.name, p) for p in wanted if p not in seen]
    await set_stage(state.pool, fetched, "fetched")
    if missing:
        await set_stage(state.pool, missing, "failed", "PMID not returned by efetch", force=True)


async def full_text_events(
    state: FetcherState, outlets: Outlets, pmids: list[str], by_pmid: dict[str, PmidDiscovered]
) -> list[Awaitable[Any]]:
    """Open-access PMC articles of ``pmids``, attached to their jobs; their publish calls, to await."""
    by_job: dict[str | None, list[str]] = {}
    for p in pmids:
        by_job.setdefault(by_pmid[p].job_id, []).append(p)
    pending: list[Awaitable[Any]] = []
    for job_id, group in by_job.items():
        trace_id = by_pmid[group[0]].trace_id
        docs: list[DocumentFetched] = []
        try:
            async for doc in state.sources.pmc.fetch(group, job_id=job_id, trace_id=trace_id):
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
        pending.append(publish_documents(state, outlets, docs))
        log.info("PMC full text", extra={"job_id": job_id, "pmids": len(group), "articles": len(docs)})
    return pending


def router(settings: Settings) -> KafkaRouter:
    """The ``pmids.discovered`` subscriber (batches of up to ``EVIDENTIA_NCBI_EFETCH_BATCH``)."""
    r = KafkaRouter()
    r.subscriber(
        PMIDS_DISCOVERED,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        batch=True,
        max_records=settings.ncbi.efetch_batch,
        batch_timeout_ms=500,
        max_poll_interval_ms=settings.kafka.max_poll_interval_ms,
        title="pmids.discovered:fetcher",
        description="PmidDiscovered events, fetched with efetch in batches.",
    )(on_pmids)
    return r
