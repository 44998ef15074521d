"""The dense leg: nearest chunks by cosine similarity through the vector table's ANN index (iterative scans
under filters), or exactly over a filter's chunks when few pass it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import asyncpg
import numpy as np

from services.retriever.engine.filters.fields import FilterClause, filter_clause
from services.retriever.engine.filters.passing import FILTER_FIRST_MAX_CHUNKS, PassingSet, passing_chunks
from services.retriever.engine.scored import Scored
from services.retriever.engine.vector.tables import VectorIndex
from shared.models import SearchFilters
from shared.settings import DEFAULT_IVFFLAT_PROBES


async def dense_search(
    pool: asyncpg.Pool,
    index: VectorIndex,
    query_vector: np.ndarray,
    k: int,
    filters: SearchFilters | FilterClause,
    ef_search: int,
    *,
    first_max: int = FILTER_FIRST_MAX_CHUNKS,
    passing: PassingSet | None = None,
    probes: int = DEFAULT_IVFFLAT_PROBES,
) -> list[Scored]:
    """Nearest chunks by cosine similarity (1 - cosine distance): the table's pgvector index (HNSW searched
    ``ef_search`` deep or IVFFlat ``probes`` lists) with iterative scans, or, under a filter that passes at
    most ``first_max`` chunks (:func:`filter_first_max`), exact over them. ``passing``: the filter already
    resolved by the caller (:func:`passing_chunks`), used as it is; ``filters`` may come as their clause
    (:func:`~services.retriever.engine.filters.fields.filter_clause`), derived once for a search."""
    clause = filters if isinstance(filters, FilterClause) else filter_clause(filters)
    if passing is None and clause.restrictive:
        passing = await passing_chunks(pool, clause, first_max)
    if passing is not None and passing.chunks is not None:
        rows = await nearest_of_chunks(pool, index, query_vector, k, list(passing.chunks.values()))
    else:
        rows = await nearest_chunks(pool, index, query_vector, k, clause, ef_search, probes=probes)
    # relaxed_order may return near-ties out of order: sort by the exact score.
    out = [Scored(chunk_id, score) for chunk_id, score in rows]
    return sorted(out, key=lambda s: -s.score)


def nearest_chunks_sql(index: VectorIndex, filters: SearchFilters | FilterClause) -> tuple[str, list[Any]]:
    """The statement :func:`nearest_chunks` runs: ``$1`` the query vector, ``$2`` k, then the filters'
    parameters. The query vector is cast to the index's column type: an HNSW index over ``halfvec`` serves
    only ``halfvec <=> halfvec``. Each candidate the scan yields is checked against the filters: through its
    chunk only when a filter reads a chunk column (:func:`reads_chunk_columns`), else straight from the
    vector row to its document (one look-up less a candidate: under a filter passing 5 % of 10^6 chunks an
    iterative scan checks ~2,000 candidates for 100 results)."""
    clause = filters if isinstance(filters, FilterClause) else filter_clause(filters)
    query = f"$1::{index.column_type}"
    if clause.chunk_columns:
        joins = "JOIN chunks c ON c.chunk_id = v.chunk_id JOIN documents d ON d.document_id = c.document_id"
    else:
        joins = "JOIN documents d ON d.document_id = v.document_id"
    sql = f"""SELECT v.chunk_id, 1 - (v.embedding <=> {query}) AS score
              FROM {index.table_name} v
              {joins}
              WHERE {clause.where[3]}
              ORDER BY v.embedding <=> {query}
              LIMIT $2"""
    return sql, clause.params


async def nearest_chunks(
    pool: asyncpg.Pool,
    index: VectorIndex,
    query_vector: np.ndarray,
    k: int,
    filters: SearchFilters | FilterClause,
    ef_search: int,
    *,
    probes: int = DEFAULT_IVFFLAT_PROBES,
) -> list[tuple[str, float]]:
    """(chunk id, 1 - cosine distance) of the nearest chunks passing ``filters``, by the table's HNSW or IVFFlat
    index with iterative scans (``relaxed_order``: near-ties may come out of order), or exactly while it has
    neither. Run with :func:`nearest_chunks_settings`."""
    clause = filters if isinstance(filters, FilterClause) else filter_clause(filters)
    sql, params = nearest_chunks_sql(index, clause)
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(nearest_chunks_settings(ef_search, k, filtered=clause.restrictive, probes=probes))
        rows = await conn.fetch(sql, query_vector.astype(np.float32), k, *params)
    return [(r["chunk_id"], float(r["score"])) for r in rows]


def nearest_chunks_settings(ef_search: int, k: int, *, filtered: bool, probes: int = DEFAULT_IVFFLAT_PROBES) -> str:
    """The transaction's settings for :func:`nearest_chunks_sql`: ``ef_search`` (at least ``k``) for an HNSW
    index, ``probes`` lists for an IVFFlat one (each access method reads its own; the table has one of them,
    :mod:`services.retriever.engine.vector.ann_index`), iterative scans, and, under a ``filtered`` search
    (:func:`is_restrictive`), no sort, so the plan walks the index whatever the planner guesses of the filter.

    A filtered search comes here only when the filter passes more chunks than the filter-first bound (fewer
    are searched exactly over their chunks, :func:`nearest_of_chunks`), for which the index walk is the
    right plan; but the planner cannot always tell: a MeSH filter with descendants compares against an
    array built by a subquery, which it guesses passes 1 % of the rows, and at 100 results it then sorted
    every passing vector instead (295 ms at 10^5 chunks for "Humans", which passes 96 %; 6-12 ms by the
    index). Unfiltered, its choice stands: exact (a sort) on a small store, the index on a large one."""
    sort = "; SET LOCAL enable_sort = off" if filtered else ""
    ef = max(int(ef_search), int(k))
    return (
        f"SET LOCAL hnsw.ef_search = {ef}; SET LOCAL hnsw.iterative_scan = relaxed_order; "
        f"SET LOCAL ivfflat.probes = {int(probes)}; SET LOCAL ivfflat.iterative_scan = relaxed_order{sort}"
    )


async def nearest_of_chunks(
    pool: asyncpg.Pool, index: VectorIndex, query_vector: np.ndarray, k: int, chunk_ids: Sequence[str]
) -> list[tuple[str, float]]:
    """(chunk id, 1 - cosine distance) of the ``k`` nearest of ``chunk_ids`` (a filter's chunks, resolved
    already), exactly; materialised first, so no HNSW scan is planned."""
    query = f"$1::{index.column_type}"
    rows = await pool.fetch(
        f"""WITH f AS MATERIALIZED (
                SELECT v.chunk_id, v.embedding FROM {index.table_name} v WHERE v.chunk_id = ANY ($3::text[]))
            SELECT f.chunk_id, 1 - (f.embedding <=> {query}) AS score
            FROM f
            ORDER BY f.embedding <=> {query}, f.chunk_id
            LIMIT $2""",
        query_vector.astype(np.float32),
        k,
        list(chunk_ids),
    )
    return [(r["chunk_id"], float(r["score"])) for r in rows]


async def vectors_of(pool: asyncpg.Pool, index: VectorIndex, chunk_ids: Sequence[str]) -> dict[str, np.ndarray]:
    """The stored vectors of ``chunk_ids`` in ``index``, by chunk id (chunks without a vector are absent), as
    float32 whatever the index's precision."""
    rows = await pool.fetch(
        f"SELECT chunk_id, embedding FROM {index.table_name} WHERE chunk_id = ANY($1::text[])", list(chunk_ids)
    )
    return {r["chunk_id"]: _as_array(r["embedding"]) for r in rows}


def _as_array(value: object) -> np.ndarray:
    to_numpy = getattr(value, "to_numpy", None)  # pgvector >= 0.4 decodes to a Vector/HalfVector object
    return np.asarray(to_numpy() if to_numpy is not None else value, dtype=np.float32)
