"""PubMed Central's identity: a record is a PMC id (``PMC<digits>``), cited ``[PMCID:PMC...]`` and linked to its
article page."""

from __future__ import annotations

from shared.sources.base import SourceRule

PMC = SourceRule(
    name="pmc",
    citation_kind="PMCID",
    record_url="https://pmc.ncbi.nlm.nih.gov/articles/{id}/",
    id_prefix="PMC",
    url_patterns=(r"pmc\.ncbi\.nlm\.nih\.gov/articles/", r"ncbi\.nlm\.nih\.gov/pmc/articles/"),
)
