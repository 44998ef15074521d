"""The fetcher's SQL: recorded searches and which documents are already stored from NCBI (the cluster-wide
NCBI rate bucket is :mod:`shared.db.rate_buckets`).

Jobs and per-document stages are shared with the other services: see :mod:`shared.db.jobs`.
"""

from __future__ import annotations

from collections.abc import Sequence

from shared.db.jobs import Db, dedupe
from shared.models import document_id


def normalise_query(query: str) -> str:
    """The search-cache key of a query: whitespace collapsed (case kept: NCBI field tags care)."""
    return " ".join(query.split())


# ------------------------------------------------------------------------------------------ searches


async def cached_search(pool: Db, query: str, db: str, max_results: int, ttl_s: float) -> list[str] | None:
    """PMIDs of the same search recorded less than ``ttl_s`` ago, or None.

    A recorded search answers when its cap was at least ``max_results``, or when it already took
    every hit NCBI had (then a larger cap would not find more).
    """
    if ttl_s <= 0:
        return None
    row = await pool.fetchrow(
        """SELECT pmids FROM search_queries
           WHERE query = $1 AND database = $2
             AND searched_at > now() - make_interval(secs => $4::double precision)
             AND (max_results >= $3 OR cardinality(pmids) >= total_count)
           ORDER BY searched_at DESC LIMIT 1""",
        normalise_query(query),
        db,
        max_results,
        float(ttl_s),
    )
    if row is None:
        return None
    return list(row["pmids"])[:max_results]


async def record_search(
    pool: Db, query: str, db: str, max_results: int, total_count: int, pmids: Sequence[str]
) -> None:
    """Record (or renew) a search: its PMIDs in NCBI's order and NCBI's total count."""
    await pool.execute(
        """INSERT INTO search_queries (query, database, max_results, total_count, pmids, searched_at)
           VALUES ($1, $2, $3, $4, $5, now())
           ON CONFLICT (query, database, max_results)
           DO UPDATE SET total_count = EXCLUDED.total_count, pmids = EXCLUDED.pmids, searched_at = now()""",
        normalise_query(query),
        db,
        max_results,
        total_count,
        list(pmids),
    )


# ------------------------------------------------------------------------------------------ dedup


async def filter_new_pmids(pool: Db, pmids: Sequence[str], refresh: bool = False) -> list[str]:
    """``pmids`` once each, in order, less those already stored as ``pubmed:<pmid>`` unless ``refresh``.

    Only a record fetched from NCBI counts as stored: an inline document under the same id is fetched over
    (see :mod:`shared.provenance`)."""
    unique = dedupe(pmids)
    if refresh or not unique:
        return unique
    stored = await stored_document_ids(pool, [document_id("pubmed", p) for p in unique])
    return [p for p in unique if document_id("pubmed", p) not in stored]


async def stored_document_ids(pool: Db, document_ids: Sequence[str]) -> set[str]:
    """Those of ``document_ids`` stored as records fetched from NCBI (inline copies do not count)."""
    rows = await pool.fetch(
        "SELECT document_id FROM documents WHERE document_id = ANY($1::text[]) AND origin = 'ncbi'", list(document_ids)
    )
    return {str(r["document_id"]) for r in rows}
