"""NCBI searches (esearch) answered from the recorded search while it is fresh.

A search is recorded with its ids in NCBI's order and NCBI's total count (:mod:`services.fetcher.store`); the
same query at the same database inside ``EVIDENTIA_NCBI_SEARCH_CACHE_TTL_S`` is answered from the record, so a
request redelivered by Kafka does not search NCBI again.
"""

from __future__ import annotations

import logging

from services.fetcher import store
from services.fetcher.eutils import EutilsClient
from shared.db.jobs import Db
from shared.settings import NcbiSettings

log = logging.getLogger(__name__)


async def search_ids(
    query: str,
    database: str,
    max_results: int,
    client: EutilsClient,
    pool: Db,
    settings: NcbiSettings,
    *,
    refresh: bool = False,
) -> list[str]:
    """The ids (PMIDs for ``pubmed``, PMC ids for ``pmc``) of a search: from the recorded search inside the
    TTL, else from esearch (then recorded). ``refresh`` skips the recorded search."""
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
    return list(ids)
