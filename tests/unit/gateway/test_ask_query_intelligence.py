"""The query-intelligence steps in ``/v1/ask`` and its stream (shared with ``/v1/query``): classification, language
detection, translation with a key, the answer in the asker's language, and routing by class (interaction check,
guideline sources first); each step's result in ``query_intelligence``.

Offline the rules decide and nothing is translated; with a key the steps run through the synthesizer's step runner
(in-process, standing in for the Kafka hop) against the fake Messages API taught the workflows' tools."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from shared.events import RetrievalReply, RetrievalRequest
from tests.fakes.workflow_anthropic import WorkflowAnthropic
from tests.unit.gateway.conftest import HITS, build_app, client
from tests.unit.gateway.test_gateway_answers import parse_sse

QUESTION = "Does telephone counseling increase mammography screening?"
FRENCH = "Quel est le traitement du paludisme chez la femme enceinte ?"
ENGLISH = "What is the treatment of malaria in pregnancy?"  # the fake's translation of FRENCH


@pytest.fixture(scope="module")
def claude() -> Iterator[WorkflowAnthropic]:
    fake = WorkflowAnthropic(token_delay_s=0.0)
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


async def test_offline_the_rules_classify_and_the_language_is_detected() -> None:
    app, kafka, _ = build_app()
    async with client(app) as http:
        body = (await http.post("/v1/ask", json={"question": QUESTION})).json()
    intel = body["query_intelligence"]
    assert intel["classification"]["method"] == "rules"
    assert intel["language"]["code"] == "en" and intel["enhancement"] == "none" and not intel["translated"]
    assert intel["searched_query"] == intel["english_question"] == QUESTION
    assert intel["route"] == [f"{intel['classification']['category']}: searched every source"]
    assert kafka.retrievals[-1].query == QUESTION and kafka.syntheses[-1].question == QUESTION
    assert body["answer_language"] == "en" and body["llm_calls"] == [] and "analysis" in body["timings_ms"]


async def test_offline_a_question_not_in_english_is_searched_as_written_and_says_why() -> None:
    app, kafka, _ = build_app()
    async with client(app) as http:
        body = (await http.post("/v1/ask", json={"question": FRENCH})).json()
    intel = body["query_intelligence"]
    assert intel["language"]["code"] == "fr" and intel["enhancement"] == "untranslated" and not intel["translated"]
    assert any("needs the LLM" in n for n in intel["notes"])
    assert kafka.retrievals[-1].query == FRENCH and body["answer_language"] == "en"
    assert "Write the answer" not in kafka.syntheses[-1].question


async def test_with_a_key_the_question_is_translated_for_retrieval_and_answered_in_french(
    claude: WorkflowAnthropic,
) -> None:
    app, kafka, _ = build_app(fake=claude, claude_intelligence=True)
    async with client(app) as http:
        body = (await http.post("/v1/ask", json={"question": FRENCH})).json()
    intel = body["query_intelligence"]
    assert intel["translated"] and intel["enhancement"] == "translation" and intel["language"]["code"] == "fr"
    assert intel["english_question"] == intel["searched_query"] == ENGLISH  # translated, not enhanced
    assert intel["classification"]["method"] == "llm"
    assert kafka.retrievals[-1].query == ENGLISH
    assert kafka.syntheses[-1].question == f"{ENGLISH}\n\nWrite the answer in French."
    assert body["answer_language"] == "fr" and body["mode"] == "llm"
    assert body["standalone_question"] == FRENCH  # the conversation keeps the asker's words
    steps = [c["step"] for c in body["llm_calls"]]
    assert steps[:2] == ["classify", "enhance"] and "answer" in steps  # the steps' calls are the turn's


async def test_with_a_key_the_given_language_is_the_answers(claude: WorkflowAnthropic) -> None:
    app, kafka, _ = build_app(fake=claude, claude_intelligence=True)
    async with client(app) as http:
        body = (await http.post("/v1/ask", json={"question": QUESTION, "language": "de"})).json()
    intel = body["query_intelligence"]
    assert intel["language"]["code"] == "en" and intel["enhancement"] == "none"  # English: searched as asked
    assert any("German (de, given)" in n for n in intel["notes"])
    assert kafka.retrievals[-1].query == QUESTION
    assert kafka.syntheses[-1].question == f"{QUESTION}\n\nWrite the answer in German."
    assert body["answer_language"] == "de"
    assert body["llm_calls"][0]["step"] == "classify"


async def test_offline_a_given_language_cannot_be_written_and_the_answer_says_english() -> None:
    app, kafka, _ = build_app()
    async with client(app) as http:
        body = (await http.post("/v1/ask", json={"question": QUESTION, "language": "de"})).json()
    assert body["answer_language"] == "en" and kafka.syntheses[-1].question == QUESTION


async def test_an_interaction_question_has_the_check_said_first_whole_and_streamed() -> None:
    app, _, _ = build_app()
    q = "Is there an interaction between warfarin and aspirin?"
    async with client(app) as http:
        body = (await http.post("/v1/ask", json={"question": q})).json()
        r = await http.post("/v1/ask/stream", json={"question": q})
    assert body["query_intelligence"]["classification"]["category"] == "drug_interaction"
    assert body["interaction"]["drugs"] == ["warfarin", "aspirin"] and not body["interaction"]["configured"]
    assert body["answer"].startswith("Drug interaction check: ") and body["numbered_answer"].startswith(
        "Drug interaction check: "
    )
    assert any(
        step.startswith("drug interaction: checked warfarin, aspirin") for step in body["query_intelligence"]["route"]
    )
    events = parse_sse(r.text)
    done = dict(events)
    assert done["retrieval_done"]["interaction"]["drugs"] == ["warfarin", "aspirin"]
    tokens = "".join(d["text"] for n, d in events if n == "token")
    assert tokens.startswith("Drug interaction check: ")
    assert done["citations"]["answer"].startswith("Drug interaction check: ")


async def test_a_guideline_question_searches_guideline_sources_first() -> None:
    app, kafka, _ = build_app()
    async with client(app) as http:
        body = (await http.post("/v1/ask", json={"question": "What do guidelines recommend for mammography?"})).json()
    assert body["query_intelligence"]["classification"]["category"] == "guideline"
    assert [r.filters.sources for r in kafka.retrievals] == [["bookshelf"]]  # relevant guideline passages found
    assert body["query_intelligence"]["route"][0].startswith("guideline question: searched guideline sources first")


async def test_a_guideline_question_falls_back_to_every_source_when_no_guideline_passage_is_relevant() -> None:
    app, kafka, _ = build_app()

    async def retrieve(request: RetrievalRequest) -> RetrievalReply:
        kafka.retrievals.append(request)
        return RetrievalReply(hits=[] if request.filters.sources == ["bookshelf"] else HITS)

    kafka.retrieve = retrieve  # type: ignore[method-assign]
    async with client(app) as http:
        body = (await http.post("/v1/ask", json={"question": "What do guidelines recommend for mammography?"})).json()
    assert [r.filters.sources for r in kafka.retrievals] == [["bookshelf"], []]
    assert body["query_intelligence"]["route"][-1] == "no guideline passage: searched every source"
    assert body["citations"]  # answered from every source


async def test_chosen_sources_are_searched_as_chosen_whatever_the_class() -> None:
    app, kafka, _ = build_app()
    async with client(app) as http:
        await http.post(
            "/v1/ask", json={"question": "What do guidelines recommend for mammography?", "source_types": ["pubmed"]}
        )
    assert [r.filters.sources for r in kafka.retrievals] == [["pubmed"]]


async def test_an_emergency_is_reported_without_running_the_steps() -> None:
    app, kafka, _ = build_app()
    async with client(app) as http:
        body = (
            await http.post("/v1/ask", json={"question": "My father has crushing chest pain and can't breathe"})
        ).json()
        r = await http.post("/v1/ask/stream", json={"question": "My father has crushing chest pain and can't breathe"})
    intel = body["query_intelligence"]
    assert body["mode"] == "emergency" and intel["classification"]["category"] == "emergency"
    assert intel["route"] == ["emergency: answered at once, no retrieval and no model"] and kafka.retrievals == []
    assert dict(parse_sse(r.text))["retrieval_done"]["query_intelligence"]["classification"]["category"] == "emergency"


async def test_the_stream_reports_the_steps_before_retrieval_results() -> None:
    app, _, _ = build_app()
    async with client(app) as http:
        r = await http.post("/v1/ask/stream", json={"question": FRENCH})
    events = dict(parse_sse(r.text))
    assert events["retrieval_done"]["query_intelligence"]["language"]["code"] == "fr"
    assert events["citations"]["query_intelligence"] == events["retrieval_done"]["query_intelligence"]
    assert events["citations"]["answer_language"] == "en"
    assert events["retrieval_done"]["query_intelligence"]["route"] == ["other: searched every source"]
