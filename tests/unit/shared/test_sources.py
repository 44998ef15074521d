"""The source registry: one identity, link and citation-id rule per source, and what is derived from it."""

from __future__ import annotations

from typing import get_args

import pytest

from shared import citations
from shared.models import ParsedDocument, Source
from shared.sources import SOURCES, citation_id, guideline_sources, record_url, rule_by_kind, source_rule


def test_every_source_of_the_model_has_a_rule_and_no_other() -> None:
    assert list(SOURCES) == list(get_args(Source))
    assert source_rule("pmc").citation_kind == "PMCID"
    with pytest.raises(KeyError, match="pubmed, pmc, bookshelf"):
        source_rule("clinicaltrials")
    assert rule_by_kind("nbk") is SOURCES["bookshelf"] and rule_by_kind("DOI") is None
    assert guideline_sources() == ["bookshelf"]


@pytest.mark.parametrize(
    ("source", "source_id", "pmid", "pmcid", "url", "cited"),
    [
        ("pubmed", "123", "123", None, "https://pubmed.ncbi.nlm.nih.gov/123/", "PMID:123"),
        ("pmc", "PMC5", "123", "PMC5", "https://pubmed.ncbi.nlm.nih.gov/123/", "PMID:123"),  # the PMID wins
        ("pmc", "PMC5", None, "PMC5", "https://pmc.ncbi.nlm.nih.gov/articles/PMC5/", "PMCID:PMC5"),
        ("bookshelf", "NBK7", None, None, "https://www.ncbi.nlm.nih.gov/books/NBK7/", "NBK:NBK7"),
        ("pubmed", "x1", None, None, None, "pubmed:x1"),  # no identity: the document id, no link
    ],
)
def test_a_document_is_linked_and_cited_by_its_strongest_identity(
    source: Source, source_id: str, pmid: str | None, pmcid: str | None, url: str | None, cited: str
) -> None:
    assert record_url(source, source_id, pmid, pmcid) == url
    assert citation_id(source, source_id, pmid, pmcid) == cited
    doc = ParsedDocument(source=source, source_id=source_id, pmid=pmid, pmcid=pmcid)  # type: ignore[call-arg]
    assert doc.url == url


def test_the_citation_patterns_know_every_source_kind_and_link() -> None:
    assert citations.KINDS == ("PMID", "PMCID", "NBK")
    text = "See PMID 1, pmc22, [NBK:333] and https://www.ncbi.nlm.nih.gov/books/NBK444/ too."
    assert citations.cited_ids(text) == ["PMID:1", "PMCID:PMC22", "NBK:NBK333", "NBK:NBK444"]
    for rule in SOURCES.values():
        assert citations.parse_id(rule.citation_id(rule.canonical("42"))) == rule.citation_id(rule.canonical("42"))
