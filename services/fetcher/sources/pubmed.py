"""PubMed as a source: discovery by esearch query and PMID list, fetching by efetch.

Units are PMIDs; each becomes ``pubmed:<pmid>``. A record is fetched as its raw ``PubmedArticle`` /
``PubmedBookArticle`` (``pubmed-xml``); a ``DeleteCitation`` becomes a ``DocumentDeleted``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from services.fetcher.bulk import PubmedEvent, record_to_events
from services.fetcher.eutils import EutilsClient, valid_pmid
from services.fetcher.search import search_ids
from shared.db.jobs import Db, dedupe
from shared.events import DocumentDeleted, DocumentFetched, SourceRequest
from shared.settings import NcbiSettings
from shared.sources import SourceRule
from shared.sources.pubmed import PUBMED
from shared.xmlsafe import iter_pubmed_records

log = logging.getLogger(__name__)

OnIds = Callable[[list[str]], Awaitable[None]]


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


class PubmedSource:
    """PubMed on top of the E-utilities client; searches are recorded in ``pool`` (see
    :mod:`services.fetcher.search`)."""

    def __init__(self, client: EutilsClient, pool: Db, settings: NcbiSettings) -> None:
        self.client = client
        self.pool = pool
        self.settings = settings

    @property
    def rule(self) -> SourceRule:
        return PUBMED

    async def discover(self, request: SourceRequest, *, max_results: int, refresh: bool) -> list[str]:
        """The query's PMIDs (capped at ``min(max_results, search_max_results)``), then the given ones;
        invalid PMIDs are logged and left out."""
        found: list[str] = []
        if request.query:
            cap = min(max_results, self.settings.search_max_results)
            found += await search_ids(
                request.query, "pubmed", cap, self.client, self.pool, self.settings, refresh=refresh
            )
        given = dedupe(request.ids)
        bad = [p for p in given if not valid_pmid(p)]
        if bad:
            log.warning("invalid PMIDs ignored", extra={"pmids": bad[:20]})
        return found + [p for p in given if valid_pmid(p)]

    def fetch(
        self, units: Sequence[str], *, job_id: str | None = None, trace_id: str | None = None
    ) -> AsyncIterator[DocumentFetched | DocumentDeleted]:
        return fetch_pubmed(units, self.client, job_id=job_id, trace_id=trace_id)

    def identify(self, event: DocumentFetched) -> list[str]:
        return [event.document_id]
