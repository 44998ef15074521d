"""What a search hit shows: the stored rows of the ranked chunks (chunk, document, iCite metrics), which
:mod:`~services.retriever.engine.stages.hits` turns into :class:`~shared.models.SearchHit`, and what a reranker
reads of them."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

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


def rerank_text(r: asyncpg.Record) -> str:
    """What a reranker reads: the chunk as it was embedded ("Document: title / Section: ... / text")."""
    return str(r["embedding_text"])
