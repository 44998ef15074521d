"""The fetcher's core, independent of Kafka: discovery and fetching as plain async functions.

The Kafka handlers (``services/fetcher/handlers.py``) call these and publish what they return:

- :func:`discover` turns an ``IngestRequested`` into the PMIDs to publish on ``pmids.discovered``;
- :func:`fetch_pubmed` turns PMIDs into ``DocumentFetched`` / ``DocumentDeleted`` events for
  ``documents.fetched``;
- :func:`fetch_pmc` turns PMIDs into open-access PMC full text (``jats-xml``) events.

Resume: every step is idempotent. A recorded search answers a repeated request inside the TTL, PMIDs
already in ``documents`` are not returned again (unless ``refresh``; see :mod:`services.fetcher.store`),
job rows are upserted and stages never move backwards (see :mod:`shared.db.jobs`). A fetcher killed
mid-job gets the same ``IngestRequested`` / ``PmidDiscovered`` events again from Kafka (offsets are
committed after the work) and only re-does what was not stored; each document is stored once because
its id (``pubmed:<pmid>``) is the key everywhere.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from services.fetcher import store
from services.fetcher.bulk import PubmedEvent, record_to_events
from services.fetcher.eutils import EutilsClient, EutilsError, EutilsUnavailable, normalise_pmcid, valid_pmid
from shared.db import jobs
from shared.db.jobs import Db, dedupe
from shared.events import DocumentDeleted, DocumentFetched, IngestRequested
from shared.models import document_id
from shared.settings import NcbiSettings, Settings
from shared.xmlsafe import iter_pubmed_records

log = logging.getLogger(__name__)

OnIds = Callable[[list[str]], Awaitable[None]]


async def search_pmids(
    query: str,
    database: str,
    max_results: int,
    client: EutilsClient,
    pool: Db,
    settings: NcbiSettings,
    *,
    refresh: bool = False,
) -> list[str]:
    """PMIDs of a search: from the recorded search inside the TTL, else from esearch (then recorded).

    ``database="pmc"`` searches PMC and maps the PMC ids to PMIDs (``pmc_pubmed`` links); PMC
    records without a PubMed record are dropped. ``refresh`` skips the recorded search.
    """
    ids = (
        None if refresh else await store.cached_search(pool, query, database, max_results, settings.search_cache_ttl_s)
    )
    if ids is None:
        result = await client.esearch(query, database, max_results)
        ids = result.pmids
        await store.record_search(pool, query, database, max_results, result.count, ids)
        log.info(
            "searched NCBI",
            extra={"query": query, "database": database, "count": result.count, "taken": len(ids)},
        )
    else:
        log.info("search answered from the record", extra={"query": query, "taken": len(ids)})
    if database == "pmc":
        mapping = await client.pmcids_to_pmids(ids) if ids else {}
        pmids = [mapping.get(normalise_pmcid(raw)) for raw in ids]
        return [p for p in pmids if p]
    return list(ids)


async def discover(
    req: IngestRequested, client: EutilsClient, pool: Db, settings: Settings | NcbiSettings
) -> list[str]:
    """The PMIDs of an ingest request that still need fetching, in order, each once.

    Creates the job row (if the gateway did not), runs or reuses the search (capped at
    ``min(req.max_results, settings.search_max_results)``), adds the given PMIDs, attaches every
    found document to the job (already stored ones too, so the job's counts show them), marks the
    new ones ``discovered`` and the job ``discovered``. An NCBI error marks the job ``failed`` with
    the reason and is raised again.
    """
    ncbi = settings.ncbi if isinstance(settings, Settings) else settings
    kind = "query" if req.query else "pmids"
    await jobs.create_job(
        pool,
        req.job_id,
        kind,
        req.model_dump(mode="json", include={"query", "pmids", "database", "max_results", "refresh"}),
    )
    try:
        found: list[str] = []
        if req.query:
            cap = min(req.max_results, ncbi.search_max_results)
            found += await search_pmids(req.query, req.database, cap, client, pool, ncbi, refresh=req.refresh)
        given = dedupe(req.pmids)
        bad = [p for p in given if not valid_pmid(p)]
        if bad:
            log.warning("invalid PMIDs ignored", extra={"job_id": req.job_id, "pmids": bad[:20]})
        found += [p for p in given if valid_pmid(p)]
        unique = dedupe(found)
        new = await store.filter_new_pmids(pool, unique, req.refresh)
        await jobs.add_job_documents(pool, req.job_id, [document_id("pubmed", p) for p in unique])
        new_ids = [document_id("pubmed", p) for p in new]
        await jobs.set_stage(pool, new_ids, "discovered", force=req.refresh)
    except EutilsError as exc:
        if not isinstance(exc, EutilsUnavailable):  # NCBI down: the request is retried, the job goes on
            await jobs.set_job_state(pool, req.job_id, "failed", str(exc))
        raise
    await jobs.set_job_state(pool, req.job_id, "discovered")
    log.info(
        "discovered",
        extra={"job_id": req.job_id, "found": len(unique), "new": len(new), "stored": len(unique) - len(new)},
    )
    return new


async def fetch_pubmed(
    pmids: Sequence[str],
    client: EutilsClient,
    *,
    job_id: str | None = None,
    trace_id: str | None = None,
    batch_size: int | None = None,
    on_missing: OnIds | None = None,
) -> AsyncIterator[DocumentFetched | DocumentDeleted]:
    """efetch ``pmids`` (POST, in batches) and yield one event per record, id ``pubmed:<pmid>``.

    ``PubmedArticle`` / ``PubmedBookArticle`` -> ``DocumentFetched(format="pubmed-xml")`` with the
    raw record; ``DeleteCitation`` -> ``DocumentDeleted``. PMIDs NCBI returned nothing for are
    passed to ``on_missing`` after their batch (mark them failed: "not found at NCBI"). An NCBI
    failure that outlasts the retries raises :class:`EutilsError`; events of earlier batches have
    been yielded by then.
    """
    wanted = [p for p in dedupe(pmids) if valid_pmid(p)]
    async for batch, content in client.efetch_batches(wanted, "pubmed", batch_size):
        returned: set[str] = set()
        for record in iter_pubmed_records(content):
            try:
                events: list[PubmedEvent] = record_to_events(record, job_id=job_id, trace_id=trace_id)
            except ValueError as exc:
                log.warning("PubMed record skipped", extra={"error": str(exc), "job_id": job_id})
                continue
            for event in events:
                returned.add(event.source_id)
                yield event
        missing = [p for p in batch if p not in returned]
        if missing:
            log.warning("PMIDs not returned by efetch", extra={"pmids": missing[:20], "n": len(missing)})
            if on_missing is not None:
                await on_missing(missing)


async def fetch_pmc(
    pmids: Sequence[str],
    client: EutilsClient,
    *,
    job_id: str | None = None,
    trace_id: str | None = None,
    on_closed: OnIds | None = None,
) -> AsyncIterator[DocumentFetched]:
    """Open-access PMC full text for ``pmids``: ``DocumentFetched(format="jats-xml")``, id ``pmc:PMCnnn``.

    PMIDs are mapped with elink ``pubmed_pmc``; articles PMC does not mark open access (see
    :func:`services.fetcher.eutils.is_open_access`) are not yielded, their PMC ids go to
    ``on_closed``. PMIDs without a PMC record are simply not in PMC.
    """
    extra = {"trace_id": trace_id} if trace_id else {}
    wanted = [p for p in dedupe(pmids) if valid_pmid(p)]
    if not wanted:
        return
    mapping = await client.pmids_to_pmcids(wanted)
    closed: list[str] = []
    async for article in client.fetch_pmc_articles(list(dict.fromkeys(mapping.values()))):
        if not article.open_access:
            closed.append(article.pmcid)
            continue
        yield DocumentFetched(
            document_id=document_id("pmc", article.pmcid),
            source="pmc",
            source_id=article.pmcid,
            format="jats-xml",
            content=article.xml.decode("utf-8"),
            job_id=job_id,
            **extra,
        )
    if closed:
        log.info("PMC articles not open access: metadata only", extra={"pmcids": closed[:20]})
        if on_closed is not None:
            await on_closed(closed)
