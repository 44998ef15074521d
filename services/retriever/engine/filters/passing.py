"""What a filter passes, resolved once for both legs of a search when few chunks pass it (filter-first), and the
bound that decides when that pays."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import asyncpg

from services.retriever.engine.filters.fields import FilterClause, filter_clause
from shared.models import SearchFilters

#: The least filter-first bound (see :func:`filter_first_max`).
FILTER_FIRST_MAX_CHUNKS = 2_000


def filter_first_max(k: int, chunks: int) -> int:
    """How many chunks a filter (beyond the retracted flag and priority) may pass and still be resolved
    first: lexically its chunks' keys in one statement, then their scores; densely exact distances over its
    chunks. Past it the best chunks are checked against the filter instead (lexical passes, HNSW iterative
    scans). Filter-first reads about ``s * N`` chunks for a filter passing a share ``s`` of ``N``; the check
    reads about ``k / s`` candidates: they break even at ``s * N = sqrt(k * N)`` chunks (10,000 for k = 100
    at 10^6 chunks), never below ``FILTER_FIRST_MAX_CHUNKS``."""
    return max(FILTER_FIRST_MAX_CHUNKS, int(math.sqrt(max(k, 1) * max(chunks, 0))))


_PASSING_SQL = """
SELECT b.chunk_key, b.chunk_id
FROM chunks c
JOIN documents d ON d.document_id = c.document_id
JOIN bm25_chunks b ON b.chunk_id = c.chunk_id
WHERE {where}
LIMIT $1::bigint"""


@dataclass(frozen=True)
class PassingSet:
    """What a filter passes, resolved once for both legs of a search (:func:`passing_chunks`)."""

    chunks: dict[int, str] | None
    """chunk key -> chunk id of every chunk the filter passes; None when more pass than the filter-first
    bound (both legs then check their best candidates against the filter instead)."""
    planned: float | None = None
    """How many chunks the planner expected the filter to pass (None: not asked): sizes the passes that
    check candidates (:func:`next_pass`)."""


_PLANNED_SQL = """
EXPLAIN (FORMAT JSON)
SELECT 1 FROM chunks c JOIN documents d ON d.document_id = c.document_id WHERE {where}"""


#: A filter the planner expects to pass more than this many times the bound is taken as broad without reading
#: its chunks: reading ``cap + 1`` of them to find out costs a scan of ``cap / s`` rows at selectivity ``s``
#: (at 10^6 chunks, a year range passing 5 % read ~200k rows to learn it passes more than 10,000).
PLANNED_MARGIN = 4


async def planned_rows(conn: asyncpg.Connection | asyncpg.Pool, filters: SearchFilters | FilterClause) -> float:
    """How many chunks PostgreSQL's planner expects ``filters`` to pass (its statistics; nothing is read)."""
    clause = filters if isinstance(filters, FilterClause) else filter_clause(filters)
    plan = await conn.fetchval(_PLANNED_SQL.format(where=clause.where[1]), *clause.params)
    return float(json.loads(plan)[0]["Plan"]["Plan Rows"])


async def passing_chunks(
    conn: asyncpg.Connection | asyncpg.Pool, filters: SearchFilters | FilterClause, cap: int
) -> PassingSet:
    """The chunks ``filters`` (or their clause, :func:`~.fields.filter_clause`) pass when at most ``cap`` do
    (reading stops at ``cap + 1``). A filter the planner expects to pass more than :data:`PLANNED_MARGIN` x
    ``cap`` is not read: broad, both legs check candidates against it instead (either way the results are the
    same; an estimate off by more than the margin costs time, never a result)."""
    clause = filters if isinstance(filters, FilterClause) else filter_clause(filters)
    planned = await planned_rows(conn, clause)
    if planned > PLANNED_MARGIN * cap:
        return PassingSet(None, planned)
    rows = await conn.fetch(_PASSING_SQL.format(where=clause.where[2]), cap + 1, *clause.params)
    if len(rows) > cap:  # the estimate was off by more than the margin: no share to size passes by
        return PassingSet(None)
    return PassingSet({int(r["chunk_key"]): str(r["chunk_id"]) for r in rows})
