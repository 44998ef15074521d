"""The ``rerank`` stage (``hybrid+rerank``): the head reranked, the evidence/recency blend applied to the
reranker's scores, which replace the fused ones."""

from __future__ import annotations

from services.retriever.engine.hits import rerank_text
from services.retriever.engine.ranking.blends import evidence_blended
from services.retriever.engine.stages.state import EngineParts, Search


async def run(engine: EngineParts, s: Search) -> None:
    if not (s.mode == "hybrid+rerank" and s.reranker is not None and s.head):
        return
    texts = [rerank_text(s.rows[c]) for c, _ in s.head]
    scores = await s.reranker.rerank(s.rerank_query or s.query, texts)
    s.rerank_by = {c: score for (c, _), score in zip(s.head, scores, strict=True)}
    order = {c: i for i, (c, _) in enumerate(s.head)}
    head = sorted(((c, s.rerank_by[c]) for c, _ in s.head), key=lambda cs: (-cs[1], order[cs[0]]))
    meta = {cid: (r["evidence_level"], r["year"]) for cid, r in s.rows.items()}
    s.head = evidence_blended(head, meta, engine.config.evidence)
    s.reranker_used = s.reranker.name
