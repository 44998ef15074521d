"""PubMed's identity: a record is a PMID, cited ``[PMID:<digits>]`` and linked to its PubMed page."""

from __future__ import annotations

from shared.sources.base import SourceRule

PUBMED = SourceRule(
    name="pubmed",
    citation_kind="PMID",
    record_url="https://pubmed.ncbi.nlm.nih.gov/{id}/",
    url_patterns=(r"pubmed\.ncbi\.nlm\.nih\.gov/", r"ncbi\.nlm\.nih\.gov/pubmed/"),
)
