"""The ``blend`` stage: the document-priority boost and the evidence/recency blend (both off by default), then
at most ``max_chunks_per_document`` passages of one paper; the ranking is cut at ``top_k`` into a head (which
the reranker and MMR see) and a tail."""

from __future__ import annotations

from services.retriever.engine.ranking.blends import evidence_blended, limit_per_document, priority_boosted
from services.retriever.engine.stages.state import EngineParts, Search


async def run(engine: EngineParts, s: Search) -> None:
    config = engine.config
    priority_of = {c: s.rows[c]["priority"] for c, _ in s.ranked if c in s.rows} if config.priority_boost else {}
    meta = {cid: (r["evidence_level"], r["year"]) for cid, r in s.rows.items()}
    doc_of = {cid: r["document_id"] for cid, r in s.rows.items()}
    ranked = s.ranked
    if config.priority_boost:
        ranked = priority_boosted(ranked, priority_of, config.priority_boost)
    ranked = evidence_blended(ranked, meta, config.evidence)
    ranked = limit_per_document(ranked, doc_of, s.filters.max_chunks_per_document)
    s.ranked, s.head, s.tail = ranked, ranked[: s.top_k], ranked[s.top_k :]
