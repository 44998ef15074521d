"""The source registry: one identity, link and citation-id rule per source, and what is derived from it."""

from __future__ import annotations

import re
from typing import get_args

import pytest

from shared import citations
from shared.db import list_migrations
from shared.models import ParsedDocument, Source
from shared.sources import SOURCES, citation_id, guideline_sources, record_url, rule_by_kind, source_rule

SET_ID = "1f3b4c2e-9a1d-4e8f-b2c7-5d6e7f8a9b0c"


def test_every_source_of_the_model_has_a_rule_and_no_other() -> None:
    assert list(SOURCES) == list(get_args(Source))
    assert source_rule("pmc").citation_kind == "PMCID"
    with pytest.raises(KeyError, match="pubmed, pmc, bookshelf, clinicaltrials, fda_label"):
        source_rule("dailymed")
    assert rule_by_kind("nbk") is SOURCES["bookshelf"] and rule_by_kind("DOI") is None
    assert rule_by_kind("nct") is SOURCES["clinicaltrials"] and rule_by_kind("FDA") is SOURCES["fda_label"]
    assert guideline_sources() == ["bookshelf"]


@pytest.mark.parametrize(
    ("source", "source_id", "pmid", "pmcid", "url", "cited"),
    [
        ("pubmed", "123", "123", None, "https://pubmed.ncbi.nlm.nih.gov/123/", "PMID:123"),
        ("pmc", "PMC5", "123", "PMC5", "https://pubmed.ncbi.nlm.nih.gov/123/", "PMID:123"),  # the PMID wins
        ("pmc", "PMC5", None, "PMC5", "https://pmc.ncbi.nlm.nih.gov/articles/PMC5/", "PMCID:PMC5"),
        ("bookshelf", "NBK7", None, None, "https://www.ncbi.nlm.nih.gov/books/NBK7/", "NBK:NBK7"),
        ("pubmed", "x1", None, None, None, "pubmed:x1"),  # no identity: the document id, no link
        (
            "clinicaltrials",
            "NCT01234567",
            None,
            None,
            "https://clinicaltrials.gov/study/NCT01234567",
            "NCT:NCT01234567",
        ),
        ("clinicaltrials", "NCT01234567", "99", None, "https://pubmed.ncbi.nlm.nih.gov/99/", "PMID:99"),
        (
            "fda_label",
            SET_ID,
            None,
            None,
            f"https://dailymed.nlm.nih.gov/dailymed/lookup.cfm?setid={SET_ID}",
            f"FDA:{SET_ID}",
        ),
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
    assert citations.KINDS == ("PMID", "PMCID", "NBK", "NCT", "FDA")
    text = "See PMID 1, pmc22, [NBK:333] and https://www.ncbi.nlm.nih.gov/books/NBK444/ too."
    assert citations.cited_ids(text) == ["PMID:1", "PMCID:PMC22", "NBK:NBK333", "NBK:NBK444"]
    for rule in SOURCES.values():
        cited = rule.citation_id(rule.canonical(rule.example_id))
        assert rule.valid(rule.example_id)
        assert citations.parse_id(cited) == cited
        assert citations.cited_ids(f"as {rule.url(rule.canonical(rule.example_id))} shows") == [cited]
        assert citations.scrub(f"It works [{cited}].", {cited}) == (f"It works [{cited}].", [])
        assert citations.scrub(f"It works [{cited}].", set()) == ("It works.", [cited])


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("[NCT:NCT01234567]", ["NCT:NCT01234567"]),
        ("(nct 01234567; NCT07654321)", ["NCT:NCT01234567", "NCT:NCT07654321"]),
        ("[NCT:NCT01234567, 07654321]", ["NCT:NCT01234567", "NCT:NCT07654321"]),
        ("as nct01234567 showed", ["NCT:NCT01234567"]),
        ("https://clinicaltrials.gov/ct2/show/NCT01234567", ["NCT:NCT01234567"]),
        ("NCT012345678 has nine digits", []),
        ("the FDA 2019 guidance and FDA: 12", []),
        (f"[FDA:{SET_ID.upper()}]", [f"FDA:{SET_ID}"]),
        ("[FDA:fda12345-9a1d-4e8f-b2c7-5d6e7f8a9b0c]", ["FDA:fda12345-9a1d-4e8f-b2c7-5d6e7f8a9b0c"]),
        (f"[FDA:{SET_ID}, PMID:5]", [f"FDA:{SET_ID}", "PMID:5"]),
        (f"see https://dailymed.nlm.nih.gov/dailymed/drugInfo.cfm?setid={SET_ID}", [f"FDA:{SET_ID}"]),
    ],
)
def test_trial_and_label_ids_are_read_in_every_written_form(text: str, ids: list[str]) -> None:
    assert citations.cited_ids(text) == ids


def test_the_stream_gate_holds_a_trial_id_until_it_is_whole() -> None:
    gate = citations.StreamGate({"NCT:NCT01234567"})
    pieces = ["Enrolment finished [NC", "T:NCT0123", "4567] and ", f"[FDA:{SET_ID[:10]}", f"{SET_ID[10:]}] too."]
    out = "".join(gate.push(p) for p in pieces) + gate.close()
    assert out == "Enrolment finished [NCT:NCT01234567] and too."
    assert gate.removed == [f"FDA:{SET_ID}"]


def test_a_source_rule_stores_its_documents_under_its_canonical_id() -> None:
    assert SOURCES["clinicaltrials"].document_id("nct01234567") == "clinicaltrials:NCT01234567"
    assert SOURCES["fda_label"].document_id(SET_ID.upper()) == f"fda_label:{SET_ID}"
    assert not SOURCES["clinicaltrials"].valid("NCT123") and SOURCES["pubmed"].valid("123")


def test_the_store_takes_documents_of_every_source() -> None:
    """The ``documents.source`` CHECK of the latest migration that sets it names exactly the model's sources."""
    setting = [m for m in list_migrations() if "documents_source_check" in m.sql or "CHECK (source IN" in m.sql]
    assert setting, "no migration constrains documents.source"
    found = re.search(r"CHECK \(source IN \(([^)]*)\)\)", setting[-1].sql)
    assert found is not None
    assert re.findall(r"'([^']+)'", found.group(1)) == list(get_args(Source))
