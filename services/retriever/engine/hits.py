"""What a search hit shows: the stored rows of the ranked chunks (chunk, document, iCite metrics) as
:class:`~shared.models.SearchHit`."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from shared.models import CitationMetrics, SearchHit
from shared.sources import record_url

_HIT_COLUMNS = """c.chunk_id, c.document_id, c.section, c.content, c.char_start, c.embedding_text, d.source,
    d.source_id, d.pmid, d.pmcid, d.doi, d.title, d.journal, d.year, d.study_type, d.evidence_level, d.priority,
    icm.pmid AS icite_pmid, icm.citation_count AS icite_citation_count,
    icm.relative_citation_ratio AS icite_relative_citation_ratio, icm.nih_percentile AS icite_nih_percentile,
    icm.year AS icite_year, icm.provisional AS icite_provisional"""


async def hit_rows(pool: asyncpg.Pool, chunk_ids: Sequence[str]) -> dict[str, asyncpg.Record]:
    """What a search hit shows (chunk and document columns, the iCite metrics of its PMID as ``icite_*``, NULL
    without), by chunk id."""
    rows = await pool.fetch(
        f"SELECT {_HIT_COLUMNS} FROM chunks c JOIN documents d ON d.document_id = c.document_id "
        "LEFT JOIN citation_metrics icm ON icm.pmid = d.pmid "
        "WHERE c.chunk_id = ANY($1::text[])",
        list(chunk_ids),
    )
    return {r["chunk_id"]: r for r in rows}


def _url(r: asyncpg.Record) -> str | None:
    return record_url(r["source"], r["source_id"], r["pmid"], r["pmcid"])


def _citation_metrics(r: asyncpg.Record) -> CitationMetrics | None:
    """The iCite metrics :func:`hit_rows` joined to the hit's PMID (None when none were imported)."""
    if r["icite_pmid"] is None:
        return None
    return CitationMetrics(
        citation_count=r["icite_citation_count"],
        relative_citation_ratio=r["icite_relative_citation_ratio"],
        nih_percentile=r["icite_nih_percentile"],
        year=r["icite_year"],
        provisional=r["icite_provisional"],
    )


def search_hit(
    r: asyncpg.Record,
    *,
    rank: int,
    score: float,
    dense_score: float | None,
    lexical_score: float | None,
    rerank_score: float | None,
) -> SearchHit:
    """The hit of a stored row (:func:`hit_rows`) at ``rank`` with its scores."""
    return SearchHit(
        chunk_id=r["chunk_id"],
        document_id=r["document_id"],
        source=r["source"],
        source_id=r["source_id"],
        pmid=r["pmid"],
        pmcid=r["pmcid"],
        doi=r["doi"],
        title=r["title"],
        journal=r["journal"],
        year=r["year"],
        study_type=r["study_type"],
        evidence_level=r["evidence_level"],
        priority=r["priority"],
        citation_metrics=_citation_metrics(r),
        section=r["section"],
        text=r["content"],
        char_start=r.get("char_start"),
        score=score,
        dense_score=dense_score,
        lexical_score=lexical_score,
        rerank_score=rerank_score,
        rank=rank,
        url=_url(r),
    )


def rerank_text(r: asyncpg.Record) -> str:
    """What a reranker reads: the chunk as it was embedded ("Document: title / Section: ... / text")."""
    return str(r["embedding_text"])
