from __future__ import annotations

import functools

import pytest

from services.synthesizer.core import Synthesizer
from shared.events import SynthesisReply, SynthesisRequest, SynthesisToken
from shared.models import SearchHit
from shared.safety import is_emergency
from shared.settings import Settings
from tests.factories import search_hit

#: Bare hits: no journal, year, study type or link.
hit = functools.partial(search_hit, study_type=None, journal=None, year=None, url=None)

PASSAGES = [
    hit(
        "101",
        "Background is long and general here. Telephone counseling increased mammography screening "
        "among nonadherent women compared with usual care. The trial ran three years in an HMO.",
    ),
    hit(
        "202",
        "Tailored print materials did not significantly increase mammography screening rates in this cohort of women.",
        rank=2,
    ),
]


@pytest.fixture
def synth() -> Synthesizer:
    return Synthesizer(Settings())


async def test_extractive_answer_quotes_sources_with_their_citations(synth: Synthesizer) -> None:
    reply = await synth.answer(
        SynthesisRequest(question="Does telephone counseling increase mammography screening?", passages=PASSAGES)
    )
    assert reply.mode == "extractive"
    assert "Telephone counseling increased mammography screening" in reply.answer
    assert "[PMID:101]" in reply.answer
    assert {c.citation_id for c in reply.citations} <= {"PMID:101", "PMID:202"}
    assert reply.citation_check.removed == []
    assert reply.disclaimer


async def test_no_relevant_passage_means_insufficient_evidence(synth: Synthesizer) -> None:
    weak = [hit("1", "Unrelated text about something else entirely here.", dense_score=0.01)]
    reply = await synth.answer(SynthesisRequest(question="Does aspirin prevent stroke?", passages=weak))
    assert reply.mode == "insufficient-evidence"
    assert reply.citations == []
    assert "insufficient" in reply.answer


async def test_a_passage_at_the_relevance_threshold_is_cited_and_one_just_under_it_is_not() -> None:
    synth = Synthesizer(Settings())
    floor = synth.settings.relevance_floor
    question = "Does telephone counseling increase mammography screening?"
    at = [PASSAGES[0].model_copy(update={"dense_score": floor})]
    under = [PASSAGES[0].model_copy(update={"dense_score": floor - 0.001})]
    assert (await synth.answer(SynthesisRequest(question=question, passages=at))).mode == "extractive"
    assert (await synth.answer(SynthesisRequest(question=question, passages=under))).mode == "insufficient-evidence"


async def test_emergency_answers_at_once_without_sources(synth: Synthesizer) -> None:
    reply = await synth.answer(
        SynthesisRequest(question="My father has crushing chest pain right now, what do I do?", passages=PASSAGES)
    )
    assert reply.mode == "emergency"
    assert "emergency" in reply.answer.lower()
    assert reply.citations == []


async def test_stream_yields_ordered_tokens_then_the_same_reply_shape(synth: Synthesizer) -> None:
    req = SynthesisRequest(
        question="Does telephone counseling increase mammography screening?", passages=PASSAGES, stream=True
    )
    events = [e async for e in synth.stream(req)]
    tokens = [e for e in events if isinstance(e, SynthesisToken)]
    assert [t.seq for t in tokens] == list(range(len(tokens)))
    final = events[-1]
    assert isinstance(final, SynthesisReply)
    whole = await synth.answer(req)
    assert final.answer == whole.answer
    assert "".join(t.text for t in tokens).strip().startswith("Extractive answer")


def test_emergency_detection_tells_research_from_a_person_in_danger() -> None:
    assert is_emergency("I can't breathe and my lips are blue")
    assert is_emergency("thinking about suicide")
    assert not is_emergency("What is the prevalence of chest pain in marathon runners?")
    assert not is_emergency("Does metformin reduce HbA1c?")


def test_extractive_drops_labels_questions_and_weak_matches() -> None:
    from services.synthesizer.extractive import ExtractiveAnswerer

    hits = [
        hit(
            "1",
            "OBJECTIVE: Is aspirin better than placebo for preventing stroke in adults? RESULTS: Aspirin "
            "reduced the risk of stroke by a fifth compared with placebo in adults over sixty.",
        ),
        hit("2", "The hospital cafeteria served lunch to adults every day of the week without fail.", rank=2),
    ]
    chosen = ExtractiveAnswerer().select("Does aspirin prevent stroke in adults?", hits)
    texts = [c.text for c in chosen]
    assert texts[0].startswith("Aspirin reduced the risk of stroke")
    assert not any(t.endswith("?") for t in texts)
    assert all("cafeteria" not in t for t in texts)


def test_extractive_quotes_a_sentence_once_even_when_two_chunks_hold_it() -> None:
    from services.synthesizer.extractive import ExtractiveAnswerer

    text = "Aspirin reduced the risk of stroke by a fifth compared with placebo in adults over sixty."
    twice = [
        hit("1", text),
        SearchHit(
            chunk_id="pubmed:1#x#1",
            document_id="pubmed:1",
            source="pubmed",
            source_id="1",
            pmid="1",
            title="Paper 1",
            text=text + " More text here.",
            score=1.0,
            dense_score=0.8,
            rank=2,
        ),
    ]
    chosen = ExtractiveAnswerer().select("Does aspirin prevent stroke in adults?", twice)
    assert [c.text for c in chosen] == [text]


async def test_the_extractive_label_is_not_flagged_as_an_uncited_claim(synth: Synthesizer) -> None:
    reply = await synth.answer(
        SynthesisRequest(question="Does telephone counseling increase mammography screening?", passages=PASSAGES)
    )
    assert not any(s.startswith("Extractive answer") for s in reply.citation_check.uncited_sentences)
