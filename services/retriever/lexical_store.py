"""The lexical index's SQL: BM25 over impact-ordered postings (migration 100), and Postgres full-text search.

Tables (all derived from ``chunks.tsv`` by triggers on ``chunks``; see ``100_bm25_impacts.sql``):
``bm25_terms`` (term id, document frequency), ``bm25_chunks`` (chunk key, field lengths) and
``bm25_impacts`` (one row per term and chunk: field term frequencies, the chunk's field lengths and the
posting's quantised reference weight, indexed by ``(term_id, impact DESC)``).

A BM25 query reads, for each query term, its postings in impact order, at most ``top_m`` of them
(``None``: all, exact BM25), scores every posting read with the caller's ``k1``/``b``/field weights and the
current N and mean length, sums per chunk, and walks the chunks best first through the filters until ``k``
pass. A chunk outside every term's top M is missed; one outside some terms' top M loses those terms'
contributions: that is the approximation ``EVIDENTIA_RETRIEVAL_BM25_TOP_M`` trades for bounded work.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import asyncpg

from services.retriever.store import Scored, where_clause
from shared.models import SearchFilters


@dataclass(frozen=True)
class CorpusCounts:
    """N and the mean field lengths of the indexed chunks."""

    chunks: int
    mean_title: float
    mean_section: float
    mean_text: float


async def corpus_counts(pool: asyncpg.Pool) -> CorpusCounts:
    """N and the mean title, section and text lengths of the indexed chunks (zeros for an empty index)."""
    row = await pool.fetchrow(
        "SELECT count(*) AS n, coalesce(avg(len_title), 0) AS t, coalesce(avg(len_section), 0) AS s, "
        "coalesce(avg(len_text), 0) AS x FROM bm25_chunks"
    )
    assert row is not None
    return CorpusCounts(int(row["n"]), float(row["t"]), float(row["s"]), float(row["x"]))


# Both BM25 statements take $1 query text, $2 k, $3 k1, $4 b, $5 title weight, $6 section weight, $7 N,
# $8 avgdl, $9 a depth (top M postings a term, or at most that many filtered chunks), filters from $10; they
# share the query terms with their IDF, a posting's BM25F term frequency and length, and the BM25 sum.
_QUERY_TERMS = """q AS (
    SELECT t.term_id, ln(1 + ($7::float8 - t.df + 0.5) / (t.df + 0.5)) AS idf
    FROM bm25_terms t
    WHERE t.term = ANY (tsvector_to_array(to_tsvector('english', $1::text))) AND t.df > 0)"""
_POSTING_TF_DL = """i.tf_text + $5::float8 * i.tf_title + $6::float8 * i.tf_section AS tf,
           i.len_text + $5::float8 * i.len_title + $6::float8 * i.len_section AS dl"""
_BM25_SUM = """sum(p.idf * p.tf * ($3::float8 + 1)
               / (p.tf + $3::float8 * (1 - $4::float8 + $4::float8 * p.dl / $8::float8))) AS score"""

# Postings first: `s` is materialised in score order and the filter is a LATERAL subquery (its LIMIT 1 keeps the
# planner from flattening it into a hash join), so the walk is a nested loop in score order that stops after k
# passing chunks instead of joining every candidate. $9 NULL: every posting (exact BM25).
_BM25_SQL = f"""
WITH {_QUERY_TERMS},
p AS (
    SELECT q.idf, i.chunk_key,
           {_POSTING_TF_DL}
    FROM q CROSS JOIN LATERAL (
        SELECT chunk_key, tf_text, tf_title, tf_section, len_text, len_title, len_section
        FROM bm25_impacts
        WHERE term_id = q.term_id
        ORDER BY impact DESC
        LIMIT $9::bigint) i),
s AS MATERIALIZED (
    SELECT p.chunk_key,
           {_BM25_SUM}
    FROM p
    WHERE p.tf > 0
    GROUP BY p.chunk_key
    ORDER BY score DESC, p.chunk_key)
SELECT f.chunk_id, s.score
FROM s CROSS JOIN LATERAL (
    SELECT b.chunk_id
    FROM bm25_chunks b
    JOIN chunks c ON c.chunk_id = b.chunk_id
    JOIN documents d ON d.document_id = c.document_id
    WHERE b.chunk_key = s.chunk_key AND {{where}}
    LIMIT 1) f
LIMIT $2"""

# The same scores, driven from the filter instead of the posting lists: every chunk passing the filter (at
# most $9 of them) is scored from all its postings of the query terms (exact BM25) through the chunk_key index.
_BM25_FILTER_FIRST_SQL = f"""
WITH {_QUERY_TERMS},
f AS MATERIALIZED (
    SELECT b.chunk_key, b.chunk_id
    FROM chunks c
    JOIN documents d ON d.document_id = c.document_id
    JOIN bm25_chunks b ON b.chunk_id = c.chunk_id
    WHERE {{where}}
    LIMIT $9::bigint),
p AS (
    SELECT q.idf, f.chunk_id,
           {_POSTING_TF_DL}
    FROM f
    JOIN bm25_impacts i ON i.chunk_key = f.chunk_key
    JOIN q ON q.term_id = i.term_id)
SELECT p.chunk_id,
       {_BM25_SUM}
FROM p
WHERE p.tf > 0
GROUP BY p.chunk_id
ORDER BY score DESC, p.chunk_id
LIMIT $2"""


@dataclass(frozen=True)
class Bm25Scoring:
    """What a BM25 score is computed with: ``k1``/``b``, the BM25F field weights (text weighs 1) and the
    corpus counts (N, mean field lengths)."""

    k1: float
    b: float
    title_weight: float
    section_weight: float
    counts: CorpusCounts

    def args(self, query: str, k: int, depth: int | None) -> list[Any]:
        """$1..$9 of the BM25 statements."""
        c = self.counts
        avgdl = c.mean_text + self.title_weight * c.mean_title + self.section_weight * c.mean_section
        return [
            query,
            k,
            self.k1,
            self.b,
            self.title_weight,
            self.section_weight,
            float(c.chunks),
            max(avgdl, 1e-6),
            depth,
        ]


async def _bm25_fetch(
    pool: asyncpg.Pool, sql: str, query: str, k: int, filters: SearchFilters, scoring: Bm25Scoring, depth: int | None
) -> list[Scored]:
    """Run one of the BM25 statements with its nine scoring parameters and the filters from $10."""
    if scoring.counts.chunks == 0:
        return []
    where, fparams = where_clause(filters, 10)
    rows = await pool.fetch(sql.format(where=where), *scoring.args(query, k, depth), *fparams)
    return [Scored(r["chunk_id"], float(r["score"])) for r in rows]


async def bm25_rank(
    pool: asyncpg.Pool, query: str, k: int, filters: SearchFilters, scoring: Bm25Scoring, *, top_m: int | None
) -> list[Scored]:
    """The ``k`` best chunks by BM25 that pass ``filters``, best first (ties: chunk id), reading at most
    ``top_m`` postings a query term (None: all). Empty when nothing is indexed."""
    hits = await _bm25_fetch(pool, _BM25_SQL, query, k, filters, scoring, top_m)
    return sorted(hits, key=lambda h: (-h.score, h.chunk_id))


_FILTERED_COUNT_SQL = """
SELECT count(*) FROM (
    SELECT 1 FROM chunks c JOIN documents d ON d.document_id = c.document_id WHERE {where} LIMIT $1::bigint) s"""


async def filtered_chunks_at_most(pool: asyncpg.Pool, filters: SearchFilters, cap: int) -> int | None:
    """How many chunks pass ``filters``, or None when more than ``cap`` do (counting stops there)."""
    where, params = where_clause(filters, 2)
    n = int(await pool.fetchval(_FILTERED_COUNT_SQL.format(where=where), cap + 1, *params))
    return None if n > cap else n


async def bm25_rank_filter_first(
    pool: asyncpg.Pool, query: str, k: int, filters: SearchFilters, scoring: Bm25Scoring, *, max_chunks: int
) -> list[Scored]:
    """Exact BM25 over the chunks passing ``filters`` (at most ``max_chunks`` of them: for selective filters);
    the ``k`` best, best first (ties: chunk id). Empty when nothing is indexed."""
    return await _bm25_fetch(pool, _BM25_FILTER_FIRST_SQL, query, k, filters, scoring, max_chunks)


_FTS_SQL = """WITH q AS (
                  SELECT NULLIF(replace(plainto_tsquery('english', $1)::text, ' & ', ' | '), '')::tsquery AS tsq)
              SELECT c.chunk_id, ts_rank_cd(c.tsv, q.tsq, 32) AS score
              FROM q, chunks c JOIN documents d ON d.document_id = c.document_id
              WHERE q.tsq IS NOT NULL AND c.tsv @@ q.tsq AND {where}
              ORDER BY score DESC, c.chunk_id
              LIMIT $2"""


async def fts_rank(pool: asyncpg.Pool, query: str, k: int, filters: SearchFilters) -> list[Scored]:
    """Full-text search (weighted title > section > text), any query term may match (OR), ranked by ts_rank_cd."""
    where, params = where_clause(filters, 3)
    rows = await pool.fetch(_FTS_SQL.format(where=where), query, k, *params)
    return [Scored(r["chunk_id"], float(r["score"])) for r in rows]


#: The lexical index's B-trees (as migration 100 creates them): a bulk load may drop them and build them once.
LEXICAL_INDEXES = {
    "bm25_impacts_term_idx": (
        "CREATE INDEX IF NOT EXISTS bm25_impacts_term_idx ON bm25_impacts (term_id, impact DESC) "
        "INCLUDE (chunk_key, tf_text, tf_title, tf_section, len_text, len_title, len_section)"
    ),
    "bm25_impacts_chunk_idx": "CREATE INDEX IF NOT EXISTS bm25_impacts_chunk_idx ON bm25_impacts (chunk_key)",
}


async def reimpact(pool: asyncpg.Pool, k1: float | None = None, b: float | None = None) -> int:
    """Re-weigh every posting with the current mean length (and new reference k1/b); postings updated."""
    return int(await pool.fetchval("SELECT bm25_reimpact($1::real, $2::real)", k1, b))
