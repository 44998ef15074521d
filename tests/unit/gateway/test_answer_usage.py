"""``tokens_used`` and ``llm_calls`` of /v1/ask and /v1/ask/stream: every Claude call of a turn, its model, its tokens.

The synthesizer runs in-process behind the fake Kafka, against the fake Messages API (real SDK over HTTP),
whose ``usage`` is the real API's shape; the follow-up rewrite step runs against it too.
"""

from __future__ import annotations

from typing import Any

from shared.events import LlmCall, RetrievalReply, RetrievalRequest, TokenUsage
from shared.settings import LlmSettings
from tests.fakes.anthropic_server import FakeAnthropic
from tests.unit.gateway.conftest import build_app, client
from tests.unit.gateway.test_gateway_answers import parse_sse

QUESTION = "Does telephone counseling increase mammography screening?"
FOLLOW_UP = "What about reminder letters?"
FIELDS = list(TokenUsage.model_fields)


def sent_total(fake: FakeAnthropic) -> dict[str, int]:
    """What the API reported for every call it answered, added up."""
    return {k: sum(int(u[k]) for _, u in fake.usages) for k in FIELDS}


def calls_total(calls: list[dict[str, Any]]) -> dict[str, int]:
    return {k: sum(c["usage"][k] for c in calls) for k in FIELDS}


async def test_ask_reports_every_call_of_the_turn_with_its_model_and_tokens(fake_anthropic: FakeAnthropic) -> None:
    app, _, _ = build_app(fake=fake_anthropic, claude_rewrites=True)
    async with client(app) as http:
        fake_anthropic.usages.clear()
        first = (await http.post("/v1/ask", json={"question": QUESTION})).json()
        assert first["mode"] == "llm"
        assert first["tokens_used"] == sent_total(fake_anthropic) == calls_total(first["llm_calls"])
        assert sorted(c["step"] for c in first["llm_calls"]) == ["agreement", "answer", "summary", "support_check"]

        fake_anthropic.usages.clear()
        second = (
            await http.post("/v1/ask", json={"question": FOLLOW_UP, "conversation_id": first["conversation_id"]})
        ).json()
    calls = second["llm_calls"]
    # The follow-up was rewritten by the synthesizer's step on the fast model; the answer was written on the main model.
    rewrite = next(c for c in calls if c["step"] == "rewrite")
    assert rewrite["service"] == "synthesizer" and rewrite["model"] == LlmSettings().fast_model
    answer = next(c for c in calls if c["step"] == "answer")
    assert answer["service"] == "synthesizer" and answer["model"] == "claude-test" == second["model"]
    assert len(calls) == 5  # rewrite, answer, summary, support check, the sources' agreement
    # tokens_used is the sum of this turn's calls only (not the first turn's), as the API counted them.
    assert second["tokens_used"] == sent_total(fake_anthropic) == calls_total(calls)
    assert second["tokens_used"]["input_tokens"] > 0 and second["tokens_used"]["output_tokens"] > 0


async def test_the_stream_reports_tokens_in_metrics_and_done(fake_anthropic: FakeAnthropic) -> None:
    app, _, _ = build_app(fake=fake_anthropic)
    fake_anthropic.usages.clear()
    async with client(app) as http:
        r = await http.post("/v1/ask/stream", json={"question": QUESTION})
    events = dict(parse_sse(r.text))
    metrics, done = events["metrics"], events["done"]
    assert metrics["tokens_used"] == sent_total(fake_anthropic) == done["tokens_used"]
    assert metrics["tokens_used"] == calls_total(metrics["llm_calls"])
    streamed = next(c for c in metrics["llm_calls"] if c["step"] == "answer")
    assert streamed["usage"]["output_tokens"] > 1 and streamed["ok"]  # message_delta's final output count


async def test_offline_no_call_is_made_and_every_count_is_zero() -> None:
    app, _, _ = build_app()
    async with client(app) as http:
        body = (await http.post("/v1/ask", json={"question": QUESTION})).json()
        r = await http.post("/v1/ask/stream", json={"question": QUESTION})
    assert body["mode"] == "extractive"
    assert body["llm_calls"] == [] and body["tokens_used"] == dict.fromkeys(FIELDS, 0)
    events = dict(parse_sse(r.text))
    assert events["metrics"]["llm_calls"] == [] and events["done"]["tokens_used"] == dict.fromkeys(FIELDS, 0)


async def test_the_retrievers_rerank_calls_reach_search_and_ask(fake_anthropic: FakeAnthropic) -> None:
    app, kafka, _ = build_app(fake=fake_anthropic)
    rerank = LlmCall(
        service="retriever",
        step="rerank",
        model="claude-rerank",
        usage=TokenUsage(input_tokens=900, output_tokens=40, cache_read_input_tokens=7),
    )

    async def retrieve(request: RetrievalRequest) -> RetrievalReply:  # as the retriever replies after an LLM rerank
        kafka.retrievals.append(request)
        return RetrievalReply(hits=kafka.hits, llm_calls=[rerank])

    kafka.retrieve = retrieve  # type: ignore[method-assign]
    async with client(app) as http:
        search = (await http.post("/v1/search", json={"query": "mammography", "mode": "hybrid+rerank"})).json()
        fake_anthropic.usages.clear()
        ask = (await http.post("/v1/ask", json={"question": QUESTION, "mode": "hybrid+rerank"})).json()
    assert search["llm_calls"] == [rerank.model_dump()] and search["tokens_used"] == rerank.usage.model_dump()
    assert ask["llm_calls"][0] == rerank.model_dump()  # the retrieval came first
    sent = sent_total(fake_anthropic)
    assert ask["tokens_used"] == {k: sent[k] + getattr(rerank.usage, k) for k in FIELDS}
