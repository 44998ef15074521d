"""Citations tied to the sentences they rest on: exact quotes for extractive answers, the support check's best
match for written ones, unsupported claims marked."""

from __future__ import annotations

from datetime import UTC, datetime

from services.synthesizer.core import Synthesizer
from services.synthesizer.spans import citation_spans, find_quote
from services.synthesizer.support import ClaimChecker, SupportReport
from shared.citations import CitationVerifier, cited_claims
from shared.events import SynthesisRequest, UnsupportedClaim
from shared.settings import Settings
from tests.factories import search_hit

LEXICAL = Settings(support={"check": "lexical"})

STATIN = search_hit(
    "101",
    "BACKGROUND: Statins are widely prescribed.  RESULTS: Atorvastatin lowered LDL cholesterol by 40 percent "
    "compared with placebo. Adverse events were rare.",
).model_copy(update={"char_start": 500, "section": "Abstract > Results"})
ASPIRIN = search_hit(
    "202",
    "Low-dose aspirin did not reduce the incidence of dementia in older adults. Bleeding was more frequent.",
    rank=2,
)


def test_cited_claims_locate_each_sentence_in_the_answer() -> None:
    text = "Intro line.\n\n- First claim about statins here. [PMID:1]\nSecond claim [PMID:2, PMID:1]. Third. [PMID:3]"
    claims = cited_claims(text)
    assert [c.ids for c in claims] == [["PMID:1"], ["PMID:2", "PMID:1"], ["PMID:3"]]
    assert [text[c.start : c.end] for c in claims] == [
        "First claim about statins here. [PMID:1]",
        "Second claim [PMID:2, PMID:1].",
        "Third. [PMID:3]",
    ]
    assert claims[1].plain == "Second claim."


def test_find_quote_ignores_blanks_the_answer_tidied() -> None:
    passage = "One.  Atorvastatin lowered LDL  cholesterol , a lot. Two."
    lo, hi = find_quote("Atorvastatin lowered LDL cholesterol, a lot.", passage) or (0, 0)
    assert passage[lo:hi] == "Atorvastatin lowered LDL  cholesterol , a lot."
    assert find_quote("Something else entirely.", passage) is None


async def test_extractive_citations_quote_the_source_exactly() -> None:
    reply = await Synthesizer(LEXICAL).answer(
        SynthesisRequest(question="Does atorvastatin lower LDL cholesterol?", passages=[STATIN, ASPIRIN])
    )
    assert reply.mode == "extractive" and reply.citations
    statin = next(c for c in reply.citations if c.citation_id == "PMID:101")
    assert statin.spans and statin.created_at is not None
    for span in statin.spans:
        assert span.method == "quote" and span.supported is True
        assert span.chunk_id == STATIN.chunk_id and span.section == "Abstract > Results"
        assert span.start is not None and span.end is not None
        assert span.quote == STATIN.text[span.start : span.end]
        assert span.document_start == 500 + span.start and span.document_end == 500 + span.end
        assert span.claim in reply.answer[span.answer_start : span.answer_end]
    assert statin.text == statin.spans[0].claim and statin.start == statin.spans[0].answer_start
    assert "Atorvastatin lowered LDL cholesterol by 40 percent" in (statin.spans[0].quote or "")


async def _spans(answer: str, report: SupportReport) -> dict[str, list]:  # type: ignore[type-arg]
    hits = [STATIN, ASPIRIN]
    verified = CitationVerifier(hits).verify(answer)
    cites = await citation_spans(
        verified.text, verified.citations, hits, report, ClaimChecker(LEXICAL), datetime(2026, 1, 1, tzinfo=UTC)
    )
    return {c.citation_id: c.spans for c in cites}


async def test_a_written_claim_takes_the_best_matching_sentence_and_the_checks_verdict() -> None:
    answer = "LDL cholesterol fell by 40 percent with atorvastatin versus placebo [PMID:101]."
    claim = "LDL cholesterol fell by 40 percent with atorvastatin versus placebo."
    spans = await _spans(answer, SupportReport("lexical", 1, claims=[(claim, ["PMID:101"])]))
    (span,) = spans["PMID:101"]
    assert span.supported is True and span.method == "lexical"
    assert span.quote == "RESULTS: Atorvastatin lowered LDL cholesterol by 40 percent compared with placebo."
    assert span.quote == STATIN.text[span.start or 0 : span.end or 0]
    assert 0 < (span.score or 0) < 1


async def test_an_unsupported_claim_has_no_quote_and_an_unchecked_one_is_left_open() -> None:
    answer = "Aspirin prevents dementia in older adults [PMID:202]. Statins were studied here too [PMID:101]."
    claim = "Aspirin prevents dementia in older adults."
    report = SupportReport(
        "lexical",
        1,
        claims=[(claim, ["PMID:202"])],
        unsupported=[
            UnsupportedClaim(sentence=claim, citation_ids=["PMID:202"], score=0.1, threshold=0.45, method="lexical")
        ],
    )
    spans = await _spans(answer, report)
    (aspirin,) = spans["PMID:202"]
    assert aspirin.supported is False and aspirin.quote is None and aspirin.start is None
    assert aspirin.claim == claim
    (statin,) = spans["PMID:101"]
    assert statin.supported is None and statin.quote  # not checked: the closest sentence, not a verdict


def test_a_citation_opening_the_next_sentence_belongs_to_the_one_before() -> None:
    text = "Statins lower LDL. [PMID:1] Harms were rare [PMID:2]. Third. [PMID:3, PMID:4] Plain end."
    claims = cited_claims(text)
    assert [(c.plain, c.ids) for c in claims] == [
        ("Statins lower LDL.", ["PMID:1"]),
        ("Harms were rare.", ["PMID:2"]),
        ("Third.", ["PMID:3", "PMID:4"]),
    ]
    assert [text[c.start : c.end] for c in claims] == [
        "Statins lower LDL. [PMID:1]",
        "Harms were rare [PMID:2].",
        "Third. [PMID:3, PMID:4]",
    ]
