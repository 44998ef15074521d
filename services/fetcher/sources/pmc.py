"""PubMed Central as a source: discovery by a PMC search (its articles' PubMed records), fetching of the
open-access full text (JATS).

Units are PMIDs: a PMC search finds articles, mapped to their PMIDs (``pmc_pubmed`` links; articles without a
PubMed record are dropped), and the PubMed records are what a search ingests. The full text of a PMID is fetched
when the request asks for it (option ``full_text``): mapped with elink ``pubmed_pmc``, one ``jats-xml`` document
``pmc:PMCnnn`` per open-access article.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from services.fetcher.eutils import EutilsClient, normalise_pmcid, valid_pmid
from services.fetcher.search import search_ids
from shared.db.jobs import Db, dedupe
from shared.events import DocumentFetched, SourceRequest
from shared.models import document_id
from shared.settings import NcbiSettings
from shared.sources import SourceRule
from shared.sources.pmc import PMC

log = logging.getLogger(__name__)

OnIds = Callable[[list[str]], Awaitable[None]]


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
            document_id=document_id(PMC.name, article.pmcid),
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


class PmcSource:
    """PMC on top of the E-utilities client; searches are recorded in ``pool``."""

    def __init__(self, client: EutilsClient, pool: Db, settings: NcbiSettings) -> None:
        self.client = client
        self.pool = pool
        self.settings = settings

    @property
    def rule(self) -> SourceRule:
        return PMC

    async def discover(self, request: SourceRequest, *, max_results: int, refresh: bool) -> list[str]:
        """The PMIDs of the query's PMC articles (capped at ``min(max_results, search_max_results)``) and of
        the given PMC ids, in order."""
        ids: list[str] = []
        if request.query:
            cap = min(max_results, self.settings.search_max_results)
            ids += await search_ids(request.query, "pmc", cap, self.client, self.pool, self.settings, refresh=refresh)
        ids += request.ids
        mapping = await self.client.pmcids_to_pmids(ids) if ids else {}
        pmids = [mapping.get(normalise_pmcid(raw)) for raw in ids]
        return [p for p in pmids if p]

    def fetch(
        self, units: Sequence[str], *, job_id: str | None = None, trace_id: str | None = None
    ) -> AsyncIterator[DocumentFetched]:
        return fetch_pmc(units, self.client, job_id=job_id, trace_id=trace_id)

    def identify(self, event: DocumentFetched) -> list[str]:
        return [event.document_id]
