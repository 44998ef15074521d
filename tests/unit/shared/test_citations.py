from __future__ import annotations

from shared.citations import CitationVerifier, cited_ids
from shared.models import SearchHit


def hit(pmid: str, rank: int = 1) -> SearchHit:
    return SearchHit(
        chunk_id=f"pubmed:{pmid}#x#0",
        document_id=f"pubmed:{pmid}",
        source="pubmed",
        source_id=pmid,
        pmid=pmid,
        title=f"Paper {pmid}",
        journal="J",
        year=2020,
        text="t",
        score=1.0,
        rank=rank,
    )


def test_cited_ids_in_order_without_repeats() -> None:
    text = "A [PMID:2]. B [PMID:1, PMID:2]. C [PMCID:123] and [NBK:NBK1116]."
    assert cited_ids(text) == ["PMID:2", "PMID:1", "PMCID:PMC123", "NBK:NBK1116"]


def test_hallucinated_pmid_is_removed_and_reported() -> None:
    v = CitationVerifier([hit("111"), hit("222", 2)])
    out = v.verify("Metformin lowers HbA1c in adults [PMID:111]. It cures everything forever [PMID:999].")
    assert out.check.removed == ["PMID:999"]
    assert out.check.verified == ["PMID:111"]
    assert "999" not in out.text
    assert "[PMID:111]" in out.text
    assert [c.citation_id for c in out.citations] == ["PMID:111"]


def test_uncited_claims_are_flagged_but_short_lines_are_not() -> None:
    out = CitationVerifier([hit("111")]).verify(
        "Summary:\nMetformin reduces weight in obese adults over a year. It works [PMID:111]."
    )
    assert out.check.uncited_sentences == ["Summary:\nMetformin reduces weight in obese adults over a year."]


def test_numbering_is_by_first_appearance_and_stable_across_turns() -> None:
    first = CitationVerifier([hit("1"), hit("2")])
    a = first.verify("X is true for many [PMID:2]. Y is true for some [PMID:1].", renumber=True)
    assert a.text == "X is true for many [1]. Y is true for some [2]."
    second = CitationVerifier([hit("1"), hit("3")], numbering=first.numbering)
    b = second.verify("Z holds in trials [PMID:3]. Y again holds [PMID:1].", renumber=True)
    assert b.text == "Z holds in trials [3]. Y again holds [2]."
    assert {c.citation_id: c.number for c in b.citations} == {"PMID:1": 2, "PMID:3": 3}
