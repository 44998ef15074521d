"""What a search returns: the first ``top_n`` of the ranking (the head, then the tail), then the extra chunks,
as :class:`~shared.models.SearchHit` ranked from 1, each with its scores, its iCite metrics and its record's
URL (the source's rule, :func:`shared.sources.record_url`)."""

from __future__ import annotations

from services.retriever.engine.stages.state import Search
from shared.models import CitationMetrics, SearchHit
from shared.sources import record_url


def search_hits(s: Search) -> list[SearchHit]:
    """The hits of a search whose stages have run (a chunk without a stored row is skipped, its rank kept)."""
    final = (s.head + s.tail)[: s.top_n]
    final += [(c, 0.0) for c in s.extra if c in s.rows]
    dense_by = {x.chunk_id: x.score for x in s.dense}
    lexical_by = {x.chunk_id: x.score for x in s.lexical}
    hits = []
    for rank, (cid, score) in enumerate(final, start=1):
        r = s.rows.get(cid)
        if r is None:
            continue
        hits.append(
            SearchHit(
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
                # The iCite metrics joined to the hit's PMID (none when none were imported).
                citation_metrics=None
                if r["icite_pmid"] is None
                else CitationMetrics(
                    citation_count=r["icite_citation_count"],
                    relative_citation_ratio=r["icite_relative_citation_ratio"],
                    nih_percentile=r["icite_nih_percentile"],
                    year=r["icite_year"],
                    provisional=r["icite_provisional"],
                ),
                section=r["section"],
                text=r["content"],
                char_start=r.get("char_start"),
                score=score,
                dense_score=dense_by.get(cid),
                lexical_score=lexical_by.get(cid),
                rerank_score=s.rerank_by.get(cid),
                rank=rank,
                url=record_url(r["source"], r["source_id"], r["pmid"], r["pmcid"]),
            )
        )
    return hits
