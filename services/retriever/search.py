"""Dense, lexical and hybrid search over the store; hits carry what a citation needs."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

import asyncpg
import numpy as np

from services.retriever.filters import where_clause
from services.retriever.fusion import ReciprocalRankFusion
from services.retriever.store import VectorIndex
from shared.models import SearchFilters, SearchHit

_HIT_COLUMNS = """c.chunk_id, c.document_id, c.section, c.content, d.source, d.source_id, d.pmid, d.pmcid,
    d.doi, d.title, d.journal, d.year, d.study_type, d.evidence_level"""


@dataclass(frozen=True)
class Scored:
    chunk_id: str
    score: float


async def dense_search(
    pool: asyncpg.Pool, index: VectorIndex, query_vector: np.ndarray, k: int, filters: SearchFilters,
    ef_search: int,
) -> list[Scored]:
    """Nearest chunks by cosine similarity; iterative HNSW scans keep filtered queries at k results."""
    where, params = where_clause(filters, 3)
    sql = f"""SELECT v.chunk_id, 1 - (v.embedding <=> $1) AS score
              FROM {index.table_name} v
              JOIN chunks c ON c.chunk_id = v.chunk_id
              JOIN documents d ON d.document_id = c.document_id
              WHERE {where}
              ORDER BY v.embedding <=> $1
              LIMIT $2"""
    async with pool.acquire() as conn, conn.transaction():
        await conn.execute(f"SET LOCAL hnsw.ef_search = {max(int(ef_search), k)}")
        await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        rows = await conn.fetch(sql, query_vector.astype(np.float32), k, *params)
    # relaxed_order may return near-ties out of order: sort by the exact score.
    out = [Scored(r["chunk_id"], float(r["score"])) for r in rows]
    return sorted(out, key=lambda s: -s.score)


async def lexical_search(pool: asyncpg.Pool, query: str, k: int, filters: SearchFilters) -> list[Scored]:
    """Full-text search (weighted title > section > text), any query term may match (OR), ranked by ts_rank_cd."""
    where, params = where_clause(filters, 3)
    sql = f"""WITH q AS (
                  SELECT NULLIF(replace(plainto_tsquery('english', $1)::text, ' & ', ' | '), '')::tsquery AS tsq)
              SELECT c.chunk_id, ts_rank_cd(c.tsv, q.tsq, 32) AS score
              FROM q, chunks c JOIN documents d ON d.document_id = c.document_id
              WHERE q.tsq IS NOT NULL AND c.tsv @@ q.tsq AND {where}
              ORDER BY score DESC, c.chunk_id
              LIMIT $2"""
    rows = await pool.fetch(sql, query, k, *params)
    return [Scored(r["chunk_id"], float(r["score"])) for r in rows]


async def hydrate(pool: asyncpg.Pool, chunk_ids: Sequence[str]) -> dict[str, asyncpg.Record]:
    rows = await pool.fetch(
        f"SELECT {_HIT_COLUMNS} FROM chunks c JOIN documents d ON d.document_id = c.document_id "
        "WHERE c.chunk_id = ANY($1::text[])",
        list(chunk_ids),
    )
    return {r["chunk_id"]: r for r in rows}


def _url(r: asyncpg.Record) -> str | None:
    if r["pmid"]:
        return f"https://pubmed.ncbi.nlm.nih.gov/{r['pmid']}/"
    if r["pmcid"]:
        return f"https://pmc.ncbi.nlm.nih.gov/articles/{r['pmcid']}/"
    if r["source"] == "bookshelf":
        return f"https://www.ncbi.nlm.nih.gov/books/{r['source_id']}/"
    return None


def limit_per_document(ids: list[tuple[str, float]], doc_of: dict[str, str], per_doc: int | None) -> list[tuple[str, float]]:
    if per_doc is None:
        return ids
    seen: dict[str, int] = {}
    out = []
    for cid, score in ids:
        doc = doc_of.get(cid, cid)
        if seen.get(doc, 0) < per_doc:
            seen[doc] = seen.get(doc, 0) + 1
            out.append((cid, score))
    return out


@dataclass
class SearchResult:
    hits: list[SearchHit]
    took_ms: float


class HybridSearcher:
    """Runs dense and/or lexical search and fuses them; the single search entry point of the service."""

    def __init__(self, pool: asyncpg.Pool, index: VectorIndex, fusion: ReciprocalRankFusion | None = None,
                 ef_search: int = 100):
        self.pool = pool
        self.index = index
        self.fusion = fusion or ReciprocalRankFusion()
        self.ef_search = ef_search

    async def search(
        self, query: str, query_vector: np.ndarray | None, *, mode: str, top_k: int, top_n: int,
        filters: SearchFilters, ef_search: int | None = None, extra_chunk_ids: Sequence[str] = (),
    ) -> SearchResult:
        start = time.perf_counter()
        dense: list[Scored] = []
        lexical: list[Scored] = []
        if mode in ("dense", "hybrid", "hybrid+rerank"):
            assert query_vector is not None
            dense = await dense_search(self.pool, self.index, query_vector, top_k, filters,
                                       ef_search or self.ef_search)
        if mode in ("lexical", "hybrid", "hybrid+rerank"):
            lexical = await lexical_search(self.pool, query, top_k, filters)
        dense_by = {s.chunk_id: s.score for s in dense}
        lexical_by = {s.chunk_id: s.score for s in lexical}
        if mode == "dense":
            ranked = [(s.chunk_id, s.score) for s in dense]
        elif mode == "lexical":
            ranked = [(s.chunk_id, s.score) for s in lexical]
        else:
            ranked = self.fusion.fuse([[s.chunk_id for s in dense], [s.chunk_id for s in lexical]])
        extra = [c for c in extra_chunk_ids if c not in dict(ranked)]
        rows = await hydrate(self.pool, [c for c, _ in ranked] + extra)
        doc_of = {cid: r["document_id"] for cid, r in rows.items()}
        ranked = limit_per_document(ranked, doc_of, filters.max_chunks_per_document)[:top_n]
        ranked += [(c, 0.0) for c in extra if c in rows]
        hits = []
        for rank, (cid, score) in enumerate(ranked, start=1):
            r = rows.get(cid)
            if r is None:
                continue
            hits.append(
                SearchHit(
                    chunk_id=cid, document_id=r["document_id"], source=r["source"], source_id=r["source_id"],
                    pmid=r["pmid"], pmcid=r["pmcid"], doi=r["doi"], title=r["title"], journal=r["journal"],
                    year=r["year"], study_type=r["study_type"], evidence_level=r["evidence_level"],
                    section=r["section"], text=r["content"], score=score, dense_score=dense_by.get(cid),
                    lexical_score=lexical_by.get(cid), rank=rank, url=_url(r),
                )
            )
        return SearchResult(hits, (time.perf_counter() - start) * 1000)
