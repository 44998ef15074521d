from __future__ import annotations

import pytest

from shared.citations import CitationVerifier, StreamGate, cited_ids, cited_sentences, gate_reply, scrub
from shared.events import EvidenceSummary, KeyFinding, SynthesisReply
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


def graded(pmid: str, evidence: float | None, rank: int = 1) -> SearchHit:
    return hit(pmid, rank).model_copy(update={"evidence_level": evidence})


def test_new_sources_are_numbered_strongest_evidence_first_and_listed_so() -> None:
    sources = [graded("1", 0.3, 1), graded("2", 1.0, 2), graded("3", None, 3), graded("4", 0.9, 4)]
    v = CitationVerifier(sources)
    raw = (
        "An editorial says so [PMID:1]. Unclassified work agrees [PMID:3]. A trial [PMID:4]; a meta-analysis [PMID:2]."
    )
    out = v.verify(raw, renumber=True)
    # meta-analysis 1.0, RCT 0.9, unknown (0.5), editorial 0.3
    assert {c.citation_id: c.number for c in out.citations} == {"PMID:2": 1, "PMID:4": 2, "PMID:3": 3, "PMID:1": 4}
    assert [c.citation_id for c in out.citations] == ["PMID:2", "PMID:4", "PMID:3", "PMID:1"]
    assert [c.number for c in out.citations] == [1, 2, 3, 4]
    # The numbered answer cites each source by the number the list gives it.
    assert out.text == "An editorial says so [4]. Unclassified work agrees [3]. A trial [2]; a meta-analysis [1]."
    # The id text and the numbered text agree, whichever verify() call comes first.
    plain = CitationVerifier(sources).verify(raw)
    assert [(c.citation_id, c.number) for c in plain.citations] == [(c.citation_id, c.number) for c in out.citations]


def test_equal_evidence_keeps_the_order_of_first_appearance() -> None:
    sources = [graded("1", 0.9, 1), graded("2", 0.9, 2), graded("3", 0.9, 3)]
    out = CitationVerifier(sources).verify("C [PMID:3]. A [PMID:1]. B [PMID:2].", renumber=True)
    assert out.text == "C [1]. A [2]. B [3]."


def test_numbers_of_earlier_turns_stay_and_new_ones_follow_by_evidence() -> None:
    first = CitationVerifier([graded("1", 0.3)])
    first.verify("Old claim holds [PMID:1].")
    second = CitationVerifier([graded("1", 0.3), graded("5", 0.7), graded("6", 1.0)], numbering=first.numbering)
    out = second.verify("Cohort [PMID:5]. Old [PMID:1]. Review of trials [PMID:6].", renumber=True)
    assert out.text == "Cohort [3]. Old [1]. Review of trials [2]."
    assert [(c.citation_id, c.number) for c in out.citations] == [("PMID:1", 1), ("PMID:6", 2), ("PMID:5", 3)]


# --- every citation form, one gate (issue #15) --------------------------------------------------------------

ALLOWED = {"PMID:123", "PMID:4", "PMCID:PMC5", "NBK:NBK1116"}


@pytest.mark.parametrize(
    ("text", "ids"),
    [
        ("A [pmid:123] b.", ["PMID:123"]),
        ("A [PMID 123] b.", ["PMID:123"]),
        ("A PMID 123 b.", ["PMID:123"]),
        ("A PMID:123 b.", ["PMID:123"]),
        ("A (PMID: 123).", ["PMID:123"]),
        ("x [PMID:123, 4] y", ["PMID:123", "PMID:4"]),
        ("x [PMID:123; PMID:4 and 9] y", ["PMID:123", "PMID:4", "PMID:9"]),
        ("[NBK:NBK1116; PMCID: PMC5]", ["NBK:NBK1116", "PMCID:PMC5"]),
        ("see PMC5 and nbk1116.", ["PMCID:PMC5", "NBK:NBK1116"]),
        ("[PMCID:5] [NBK:1116]", ["PMCID:PMC5", "NBK:NBK1116"]),
        ("bare [12345678] and [23456789, 4]", ["PMID:12345678", "PMID:23456789", "PMID:4"]),
        ("at https://pubmed.ncbi.nlm.nih.gov/999/ and ncbi", ["PMID:999"]),
        (
            "https://www.ncbi.nlm.nih.gov/pmc/articles/PMC5/ https://www.ncbi.nlm.nih.gov/books/NBK1116/",
            ["PMCID:PMC5", "NBK:NBK1116"],
        ),
    ],
)
def test_every_citation_form_is_recognised(text: str, ids: list[str]) -> None:
    assert cited_ids(text) == ids


@pytest.mark.parametrize(
    "text",
    [
        "The 95% CI was 1.2 to 3.4 (n = 123) in 2019.",
        "Display numbers [1] and [2] stay [3].",
        "The PMID field and the NBK shelf are named but cite nothing.",
        "Dose 500 mg [95% CI 1-2].",
    ],
)
def test_text_that_cites_nothing_is_left_alone(text: str) -> None:
    assert cited_ids(text) == []
    assert scrub(text, ALLOWED) == (text, [])


def test_scrub_keeps_allowed_ids_canonical_and_removes_the_rest_with_their_blank() -> None:
    text = (
        "Helps [pmid:123]. Cures all [PMID:999]. Also PMID 555 and (pmid: 4), "
        "see [PMID:123, 777] and [88888888]; https://pubmed.ncbi.nlm.nih.gov/66666666/ too."
    )
    out, removed = scrub(text, ALLOWED)
    assert out == "Helps [PMID:123]. Cures all. Also and [PMID:4], see [PMID:123] and; too."
    assert removed == ["PMID:999", "PMID:555", "PMID:777", "PMID:88888888", "PMID:66666666"]


def test_verifier_reports_every_form_removed_and_renumbers_the_kept() -> None:
    v = CitationVerifier([hit("123"), hit("4", 2)])
    out = v.verify("A is so [pmid:123]. B is so (PMID: 4, 999). C is so PMID 888.", renumber=True)
    assert out.text == "A is so [1]. B is so [2]. C is so."
    assert out.check.verified == ["PMID:123", "PMID:4"]
    assert out.check.removed == ["PMID:999", "PMID:888"]


@pytest.mark.parametrize("size", [1, 2, 3, 5, 8, 13])
def test_stream_gate_sends_only_verified_citations_and_matches_the_whole(size: int) -> None:
    text = (
        "The drug helps [PMID:123]. It cures all [PMID:99999999]. See PMID 555 and (pmid: 4), also "
        "[PMID:123, 777]. Link https://pubmed.ncbi.nlm.nih.gov/999/ and [NBK: 1116; PMCID PMC5 and 9].\nEnd PMC77."
    )
    gate = StreamGate(ALLOWED)
    pieces = [gate.push(text[i : i + size]) for i in range(0, len(text), size)]
    pieces.append(gate.close())
    expected, removed = scrub(text, ALLOWED)
    assert "".join(pieces) == expected
    assert gate.removed == removed
    released = ""
    for piece in pieces:  # at no moment has the client seen an id outside the allowed ones
        released += piece
        assert set(cited_ids(released)) <= ALLOWED


def test_stream_gate_holds_only_an_open_bracket_and_the_last_word() -> None:
    gate = StreamGate(ALLOWED)
    assert gate.push("Screening rose sharply ") == "Screening rose sharply"
    assert gate.push("in women [PMID:99") == " in women"
    assert gate.push("9] over") == ""  # the made-up id went, with its blank; "over" waits for the next word
    assert gate.push(" a year.") == " over a"
    assert gate.close() == " year."
    assert gate.removed == ["PMID:999"]


def test_stream_gate_discard_sends_nothing_unchecked() -> None:
    gate = StreamGate(ALLOWED)
    sent = gate.push("A result [PMID:12")
    gate.discard()
    assert sent == "A result" and gate.close() == ""


def test_cited_sentences_pair_each_sentence_with_its_ids() -> None:
    text = "- Telephone counselling raised screening [PMID:1]. No citation here. Both agree. [PMID:2, PMID:3]"
    assert cited_sentences(text) == [
        ("Telephone counselling raised screening.", ["PMID:1"]),
        ("Both agree.", ["PMID:2", "PMID:3"]),
    ]


def test_gate_reply_cleans_every_field_and_reports() -> None:
    summary = EvidenceSummary(
        summary="Benefit [PMID:123] but see PMID 999.",
        study_count=1,
        strength="moderate",
        key_findings=[
            KeyFinding(finding="It helps (pmid: 123).", supporting_pmids=["123"]),
            KeyFinding(finding="[PMID:888]", supporting_pmids=["123"]),
        ],
        supporting_pmids=["123", "777"],
        method="llm",
    )
    reply = SynthesisReply(
        answer="Helps [PMID:123]. Cures PMID 555.",
        numbered_answer="Helps [1]. Cures PMID 555.",
        summary=summary,
    )
    out = gate_reply(reply, {"PMID:123"})
    assert out.answer == "Helps [PMID:123]. Cures." and out.numbered_answer == "Helps [1]. Cures."
    assert out.summary is not None
    assert out.summary.summary == "Benefit [PMID:123] but see."
    assert [f.finding for f in out.summary.key_findings] == ["It helps [PMID:123]."]
    assert out.summary.supporting_pmids == ["123"]
    assert set(out.citation_check.removed) == {"PMID:555", "PMID:999", "PMID:888", "PMID:777"}
    assert gate_reply(out, {"PMID:123"}) == out  # idempotent


def test_a_citation_opening_a_sentence_cites_the_one_before_it() -> None:
    out = CitationVerifier([hit("1"), hit("2")]).verify(
        "Statins lower the LDL level a lot. [PMID:1] The interaction service was consulted as reported. "
        "Harms were rare in all of the trials [PMID:2]."
    )
    assert out.check.uncited_sentences == ["The interaction service was consulted as reported."]
    assert out.check.verified == ["PMID:1", "PMID:2"]


@pytest.mark.parametrize(
    "text",
    [
        "Metformin reduced weight in obese adults. [PMID:1] Statins lowered LDL cholesterol in most trials [PMID:2].",
        "Metformin reduced weight in obese adults.\n[PMID:1].\nStatins lowered LDL cholesterol in most trials [PMID:2]",
    ],
)
def test_a_citation_after_the_full_stop_cites_the_claim_before_it_for_every_reader(text: str) -> None:
    # The uncited-claim check and the claims with their places read the same rule: neither calls the first
    # claim uncited nor gives its citation to the next sentence.
    out = CitationVerifier([hit("1"), hit("2")]).verify(text)
    assert out.check.uncited_sentences == []
    first, second = cited_sentences(out.text)
    assert first == ("Metformin reduced weight in obese adults.", ["PMID:1"])
    assert second[0].startswith("Statins lowered") and second[1] == ["PMID:2"]
