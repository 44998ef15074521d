"""Test data built the same way across the unit tests: a PubMed :class:`SearchHit` for a PMID."""

from __future__ import annotations

from shared.models import SearchHit


def search_hit(
    pmid: str,
    text: str,
    rank: int = 1,
    *,
    title: str = "Paper {pmid}",
    chunk_suffix: str = "#x#0",
    study_type: str | None = "randomized-controlled-trial",
    journal: str | None = "Prev Med",
    year: int | None = 2001,
    dense_score: float | None = 0.8,
    url: str | None = "https://pubmed.ncbi.nlm.nih.gov/{pmid}/",
) -> SearchHit:
    """A PubMed hit for ``pmid`` (score 1.0); ``{pmid}`` in ``title`` and ``url`` is replaced by the PMID."""
    return SearchHit(
        chunk_id=f"pubmed:{pmid}{chunk_suffix}",
        document_id=f"pubmed:{pmid}",
        source="pubmed",
        source_id=pmid,
        pmid=pmid,
        title=title.format(pmid=pmid),
        journal=journal,
        year=year,
        study_type=study_type,
        text=text,
        score=1.0,
        dense_score=dense_score,
        rank=rank,
        url=None if url is None else url.format(pmid=pmid),
    )
