"""LLM mode against the fake Anthropic server, through the real anthropic SDK (HTTP on 127.0.0.1)."""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from services.synthesizer.core import Synthesizer
from services.synthesizer.llm import ClaudeAnswerer
from services.synthesizer.summary import TOOL_NAME, summary_input_schema
from services.synthesizer.support import SUPPORT_TOOL
from shared.events import ChatTurn, EvidenceSummary, SynthesisReply, SynthesisRequest, SynthesisToken, TokenUsage
from shared.settings import LlmSettings, Settings
from tests.factories import search_hit
from tests.fakes.anthropic_server import HALLUCINATED_PMID, FakeAnthropic, default_answer

hit = functools.partial(search_hit, title="Trial of counseling {pmid}")

PASSAGES = [
    hit("101", "Telephone counseling increased mammography screening among nonadherent women."),
    hit(
        "202", "Tailored print materials increased screening rates modestly in a second cohort.", 2, study_type="cohort"
    ),
]
QUESTION = "Does telephone counseling increase mammography screening?"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as f:
        yield f


@pytest.fixture
def synth(fake: FakeAnthropic) -> Synthesizer:
    fake.requests.clear()
    fake.usages.clear()
    llm = LlmSettings(
        anthropic_api_key=SecretStr("test-key"),
        anthropic_base_url=fake.url,  # type: ignore[call-arg]
        model="claude-test",
    )
    return Synthesizer(Settings(), ClaudeAnswerer(llm))


async def test_prompt_carries_numbered_sources_and_the_settings(synth: Synthesizer, fake: FakeAnthropic) -> None:
    await synth.answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    text_calls = [r for r in fake.requests if not r.uses_tools]
    tool_calls = [r for r in fake.requests if r.uses_tools and r.body["tools"][0]["name"] == TOOL_NAME]
    support_calls = [r for r in fake.requests if r.uses_tools and r.body["tools"][0]["name"] == SUPPORT_TOOL]
    assert len(text_calls) == 1 and len(tool_calls) == 1
    # The claim-support check: one call, with the configured cheap model, judging the cited sentences.
    assert len(support_calls) == 1
    assert support_calls[0].body["model"] == LlmSettings().fast_model  # EVIDENTIA_LLM_FAST_MODEL
    assert '<claim n="1">' in support_calls[0].user_text
    req = text_calls[0]
    assert req.path == "/v1/messages"
    assert req.headers["authorization"] == "Bearer test-key" or req.headers.get("x-api-key") == "test-key"
    body = req.body
    assert body["model"] == "claude-test"
    assert body["max_tokens"] == 2000
    assert body["temperature"] == 0.3
    assert body["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert "[PMID:12345678]" in body["system"][0]["text"]
    prompt = req.user_text
    for needle in (
        '<source n="1" id="PMID:101">',
        '<source n="2" id="PMID:202">',
        "<title>Trial of counseling 101</title>",
        "<journal>Prev Med</journal>",
        "<year>2001</year>",
        "<study_type>randomized controlled trial</study_type>",
        "<study_type>cohort</study_type>",
        "Telephone counseling increased",
        QUESTION,
    ):
        assert needle in prompt, needle
    assert req.source_ids == ["PMID:101", "PMID:202"]
    # The summary call: same cached system prompt, the tool with the pydantic-generated schema, forced.
    tool_req = tool_calls[0].body
    assert tool_req["system"] == body["system"]
    assert tool_req["tool_choice"] == {"type": "tool", "name": TOOL_NAME}
    schema = tool_req["tools"][0]["input_schema"]
    assert schema == summary_input_schema()
    assert set(schema["properties"]) == {
        "summary",
        "study_count",
        "study_types",
        "strength",
        "key_findings",
        "supporting_pmids",
    }
    assert schema["properties"]["strength"]["enum"] == ["high", "moderate", "low", "insufficient"]
    assert "$ref" not in str(schema)


async def test_citations_are_parsed_verified_and_a_hallucinated_pmid_removed(synth: Synthesizer) -> None:
    reply = await synth.answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    assert reply.mode == "llm" and reply.model == "claude-test"
    assert [(c.number, c.citation_id) for c in reply.citations] == [(1, "PMID:101"), (2, "PMID:202")]
    assert reply.citations[0].title == "Trial of counseling 101"
    assert reply.citations[0].url == "https://pubmed.ncbi.nlm.nih.gov/101/"
    check = reply.citation_check
    assert check.cited == ["PMID:101", "PMID:202", f"PMID:{HALLUCINATED_PMID}"]
    assert check.verified == ["PMID:101", "PMID:202"]
    assert f"PMID:{HALLUCINATED_PMID}" in check.removed
    assert HALLUCINATED_PMID not in reply.answer
    assert "[PMID:101]" in reply.answer
    # The sentence whose only citation was invented is now an uncited claim, and flagged.
    assert any("cures everything" in s for s in check.uncited_sentences)
    assert reply.numbered_answer is not None
    assert "[1]" in reply.numbered_answer and "[2]" in reply.numbered_answer and "PMID" not in reply.numbered_answer
    assert reply.disclaimer


async def test_evidence_summary_comes_from_tool_use_and_is_checked(synth: Synthesizer) -> None:
    reply = await synth.answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    s = reply.summary
    assert s is not None and s.method == "llm"
    assert s.strength == "moderate"
    assert s.supporting_pmids == ["101", "202"]
    assert s.study_count == 2  # the fake over-counts; clamped to the sources
    assert [f.finding for f in s.key_findings] == [
        "A clear benefit was reported.",
        "A consistent result in another population.",
    ]
    assert all(HALLUCINATED_PMID not in f.supporting_pmids for f in s.key_findings)


async def test_an_invalid_tool_reply_falls_back_to_the_extractive_summary(
    synth: Synthesizer, fake: FakeAnthropic
) -> None:
    fake.reply_tool({"summary": "x", "strength": "certain"})
    reply = await synth.answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    assert reply.summary is not None and reply.summary.method == "extractive"
    assert reply.summary.supporting_pmids


async def test_stream_yields_every_piece_in_order_then_the_verified_reply(
    synth: Synthesizer, fake: FakeAnthropic
) -> None:
    events = [e async for e in synth.stream(SynthesisRequest(question=QUESTION, passages=PASSAGES, stream=True))]
    tokens = [e for e in events if isinstance(e, SynthesisToken)]
    final = events[-1]
    assert isinstance(final, SynthesisReply) and final.mode == "llm"
    assert len(tokens) > 5
    assert [t.seq for t in tokens] == list(range(len(tokens)))
    streamed = "".join(t.text for t in tokens)
    # Every piece, in order, nothing lost but the made-up citation, which the gate took out as it streamed.
    raw = fake.answer(["PMID:101", "PMID:202"])
    assert f"[PMID:{HALLUCINATED_PMID}]" in raw
    assert streamed == raw.replace(f" [PMID:{HALLUCINATED_PMID}]", "")
    assert HALLUCINATED_PMID not in streamed and HALLUCINATED_PMID not in final.answer
    assert f"PMID:{HALLUCINATED_PMID}" in final.citation_check.removed
    assert final.time_to_first_token_ms is not None and final.summary is not None
    assert any(r.streamed for r in fake.requests)


async def test_history_and_conversation_numbering_are_used(synth: Synthesizer, fake: FakeAnthropic) -> None:
    history = [
        ChatTurn(role="user", content="What helps screening?"),
        ChatTurn(role="assistant", content="Counseling helps [PMID:202]."),
    ]
    reply = await synth.answer(
        SynthesisRequest(
            question="And by telephone?",
            passages=PASSAGES,
            history=history,
            citation_numbers={"PMID:202": 1, "PMID:7": 2},
        )
    )
    text_req = next(r for r in fake.requests if not r.uses_tools)
    assert [m["role"] for m in text_req.body["messages"]] == ["user", "assistant", "user"]
    assert text_req.body["messages"][1]["content"] == "Counseling helps [PMID:202]."
    assert {c.citation_id: c.number for c in reply.citations} == {"PMID:202": 1, "PMID:101": 3}
    assert reply.numbered_answer is not None and "[3]" in reply.numbered_answer


async def test_offline_mode_gives_the_same_response_shape(synth: Synthesizer) -> None:
    llm = await synth.answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    offline = await Synthesizer(Settings()).answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    assert offline.mode == "extractive" and llm.mode == "llm"
    a, b = llm.model_dump(), offline.model_dump()
    assert set(a) == set(b)
    assert offline.summary is not None and llm.summary is not None
    assert set(offline.summary.model_dump()) == set(llm.summary.model_dump())
    assert offline.citations and offline.numbered_answer and offline.summary.method == "extractive"
    EvidenceSummary.model_validate(offline.summary.model_dump())


async def test_when_claude_cites_nothing_the_answer_says_the_evidence_is_insufficient(
    synth: Synthesizer, fake: FakeAnthropic
) -> None:
    fake.reply_text("The retrieved sources do not answer this question.")
    reply = await synth.answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    assert reply.mode == "insufficient-evidence"
    assert reply.citations == []
    assert reply.summary is not None and reply.summary.strength == "insufficient"
    # The summary call sent alongside was finished before the reply, not left running past it.
    assert [r.uses_tools for r in fake.requests].count(True) == 1


async def test_an_emergency_never_reaches_the_model(synth: Synthesizer, fake: FakeAnthropic) -> None:
    reply = await synth.answer(SynthesisRequest(question="My wife has chest pain and can't breathe", passages=PASSAGES))
    assert reply.mode == "emergency"
    assert fake.requests == []


def _sent_usages(fake: FakeAnthropic) -> list[tuple[str, TokenUsage]]:
    return sorted(
        ((m, TokenUsage.model_validate({k: u[k] for k in TokenUsage.model_fields})) for m, u in fake.usages),
        key=repr,
    )


async def test_every_call_of_an_answer_is_in_the_reply_with_its_model_and_tokens(
    synth: Synthesizer, fake: FakeAnthropic
) -> None:
    reply = await synth.answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    steps = {c.step: c for c in reply.llm_calls}
    assert sorted(steps) == ["agreement", "answer", "summary", "support_check"] and len(reply.llm_calls) == 4
    # Answer writing keeps the main model; the support check runs on the fast one (EVIDENTIA_LLM_FAST_MODEL).
    assert steps["answer"].model == steps["summary"].model == steps["agreement"].model == "claude-test" == reply.model
    assert steps["support_check"].model == LlmSettings().fast_model
    assert {c.service for c in reply.llm_calls} == {"synthesizer"}
    # Each call's tokens are exactly what the API reported for it.
    assert sorted(((c.model, c.usage) for c in reply.llm_calls), key=repr) == _sent_usages(fake)
    assert all(c.usage.input_tokens > 0 and c.usage.output_tokens > 0 for c in reply.llm_calls)


async def test_a_streamed_answer_reports_the_streamed_calls_tokens(synth: Synthesizer, fake: FakeAnthropic) -> None:
    events = [e async for e in synth.stream(SynthesisRequest(question=QUESTION, passages=PASSAGES, stream=True))]
    final = events[-1]
    assert isinstance(final, SynthesisReply)
    streamed_call = next(c for c in final.llm_calls if c.step == "answer")
    raw = default_answer([p.citation_id for p in PASSAGES])
    # message_start's input count and message_delta's output count, as the SDK's final message holds them.
    assert streamed_call.usage.output_tokens == FakeAnthropic.tokens(raw)
    assert sorted(((c.model, c.usage) for c in final.llm_calls), key=repr) == _sent_usages(fake)


async def test_an_answer_that_ends_insufficient_still_reports_the_calls_it_made(
    synth: Synthesizer, fake: FakeAnthropic
) -> None:
    fake.reply_text("The retrieved sources do not answer this question.")
    reply = await synth.answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    assert reply.mode == "insufficient-evidence"
    assert sorted(c.step for c in reply.llm_calls) == ["answer", "summary"]  # both were sent, and paid for


async def test_no_call_no_usage_offline_and_for_an_emergency(synth: Synthesizer, fake: FakeAnthropic) -> None:
    offline = await Synthesizer(Settings()).answer(SynthesisRequest(question=QUESTION, passages=PASSAGES))
    assert offline.mode == "extractive" and offline.llm_calls == []
    emergency = await synth.answer(
        SynthesisRequest(question="I think I'm having a stroke right now", passages=PASSAGES)
    )
    assert emergency.mode == "emergency" and emergency.llm_calls == [] and fake.usages == []
