"""The synthesizer's Kafka handler (FastStream's TestKafkaBroker, no real broker) in LLM mode via the fake."""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import pytest
from faststream.kafka import KafkaBroker, KafkaMessage, TestKafkaBroker
from pydantic import SecretStr

from services.synthesizer.core import Synthesizer
from services.synthesizer.handlers import SynthesizerState, register
from services.synthesizer.llm import ClaudeAnswerer
from shared.broker import EVENT_TYPE_HEADER
from shared.events import SynthesisReply, SynthesisRequest, SynthesisToken
from shared.settings import LlmSettings, Settings
from shared.topics import SYNTHESIS_REQUESTS
from tests.fakes.anthropic_server import FakeAnthropic
from tests.unit.synthesizer.test_llm import PASSAGES, QUESTION

REPLIES = "replies.test-gateway"


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic() as f:
        yield f


def make(fake: FakeAnthropic) -> tuple[KafkaBroker, list[tuple[str, str, bytes]]]:
    settings = Settings()
    llm = LlmSettings(
        anthropic_api_key=SecretStr("k"),
        anthropic_base_url=fake.url,  # type: ignore[call-arg]
        model="claude-test",
    )
    client = anthropic.AsyncAnthropic(api_key="k", base_url=fake.url, max_retries=0)
    state = SynthesizerState(settings)
    state._core = Synthesizer(settings, ClaudeAnswerer(llm, client))
    broker = KafkaBroker()
    register(broker, state)
    got: list[tuple[str, str, bytes]] = []

    @broker.subscriber(REPLIES)
    async def collect(msg: KafkaMessage) -> None:
        got.append((msg.correlation_id, msg.headers.get(EVENT_TYPE_HEADER, ""), msg.body))

    return broker, got


async def test_streamed_request_gets_ordered_tokens_then_the_reply_on_reply_to(fake: FakeAnthropic) -> None:
    broker, got = make(fake)
    async with TestKafkaBroker(broker) as br:
        await br.publish(
            SynthesisRequest(question=QUESTION, passages=PASSAGES, stream=True),
            topic=SYNTHESIS_REQUESTS,
            correlation_id="c-1",
            reply_to=REPLIES,
        )
    kinds = [k for _, k, _ in got]
    assert {c for c, _, _ in got} == {"c-1"}
    assert kinds[-1] == "SynthesisReply" and set(kinds[:-1]) == {"SynthesisToken"}
    tokens = [SynthesisToken.model_validate_json(b) for _, k, b in got if k == "SynthesisToken"]
    assert [t.seq for t in tokens] == list(range(len(tokens)))
    final = SynthesisReply.model_validate_json(got[-1][2])
    assert final.mode == "llm" and final.citations and final.summary is not None


async def test_a_model_failure_becomes_an_error_reply_not_a_timeout() -> None:
    with FakeAnthropic() as fake:
        broker, got = make(fake)
        fake.fail_next(500)
        fake.fail_next(500)  # the answer and the summary call both fail
        async with TestKafkaBroker(broker) as br:
            await br.publish(
                SynthesisRequest(question=QUESTION, passages=PASSAGES),
                topic=SYNTHESIS_REQUESTS,
                correlation_id="c-2",
                reply_to=REPLIES,
            )
    final = SynthesisReply.model_validate_json(got[-1][2])
    assert final.error is not None and final.error.status == 502
