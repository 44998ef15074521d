"""The synthesizer's Kafka handler (FastStream's TestKafkaBroker, no real broker) in LLM mode via the fake."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import anthropic
import pytest
from faststream.kafka import KafkaBroker, TestKafkaBroker
from pydantic import SecretStr

from services.synthesizer.core import Synthesizer
from services.synthesizer.handlers import SynthesizerState, register
from services.synthesizer.llm import ClaudeAnswerer
from shared.events import RequestProgress, SynthesisReply, SynthesisRequest, SynthesisToken
from shared.kafka.context import KafkaMessage
from shared.kafka.messages import EVENT_TYPE_HEADER
from shared.kafka.topics import SYNTHESIS_REQUESTS
from shared.settings import LlmSettings, Settings
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
    kinds = [k for _, k, _ in got if k != "RequestProgress"]  # progress appears only if the answer took > 2 s
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


class SlowCore:
    """A synthesizer core whose answer takes ``seconds`` (a slow model), counting the answers it starts."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.started = 0

    async def answer(self, request: SynthesisRequest) -> SynthesisReply:
        self.started += 1
        await asyncio.sleep(self.seconds)
        return SynthesisReply(trace_id=request.trace_id, answer="slow but sure", mode="extractive")


def make_slow(seconds: float, progress_every: float) -> tuple[KafkaBroker, SlowCore, list[tuple[str, str, bytes]]]:
    settings = Settings()
    settings.kafka.request_progress_every_s = progress_every
    state = SynthesizerState(settings)
    core = SlowCore(seconds)
    state._core = core  # type: ignore[assignment]
    broker = KafkaBroker()
    register(broker, state)
    got: list[tuple[str, str, bytes]] = []

    @broker.subscriber(REPLIES)
    async def collect(msg: KafkaMessage) -> None:
        got.append((msg.correlation_id, msg.headers.get(EVENT_TYPE_HEADER, ""), msg.body))

    return broker, core, got


async def test_a_slow_answer_sends_progress_while_it_works_and_none_after_its_reply() -> None:
    broker, core, got = make_slow(seconds=0.55, progress_every=0.1)
    async with TestKafkaBroker(broker) as br:
        await br.publish(
            SynthesisRequest(question=QUESTION, passages=PASSAGES),
            topic=SYNTHESIS_REQUESTS,
            correlation_id="c-slow",
            reply_to=REPLIES,
        )
        answered = len(got)
        await asyncio.sleep(0.35)  # a progress task that outlived its request would publish here
    kinds = [k for _, k, _ in got]
    assert kinds[-1] == "SynthesisReply" and len(got) == answered
    progress = [RequestProgress.model_validate_json(b) for _, k, b in got if k == "RequestProgress"]
    assert 1 <= len(progress) <= 6 and set(kinds[:-1]) == {"RequestProgress"}  # about 5: 0.55 s / 0.1 s
    assert [p.elapsed_ms for p in progress] == sorted(p.elapsed_ms for p in progress)
    assert {c for c, _, _ in got} == {"c-slow"} and core.started == 1


async def test_a_prompt_answer_sends_no_progress() -> None:
    broker, _, got = make_slow(seconds=0.0, progress_every=0.5)
    async with TestKafkaBroker(broker) as br:
        await br.publish(
            SynthesisRequest(question=QUESTION, passages=PASSAGES),
            topic=SYNTHESIS_REQUESTS,
            correlation_id="c-quick",
            reply_to=REPLIES,
        )
    assert [k for _, k, _ in got] == ["SynthesisReply"]


async def test_a_resent_copy_of_a_request_taken_here_is_answered_once() -> None:
    broker, core, got = make_slow(seconds=0.0, progress_every=0.0)
    request = SynthesisRequest(question=QUESTION, passages=PASSAGES)
    async with TestKafkaBroker(broker) as br:
        for cid in ("c-dup", "c-dup", "c-other"):  # the gateway's copy carries the same correlation id
            await br.publish(request, topic=SYNTHESIS_REQUESTS, correlation_id=cid, reply_to=REPLIES)
    assert core.started == 2
    assert sorted(c for c, k, _ in got if k == "SynthesisReply") == ["c-dup", "c-other"]


async def test_start_loads_the_models_before_the_instance_takes_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    """A restarted synthesizer must not take requests cold: the guard's and the support check's models load in
    ``start`` (which runs before the broker consumes), not in the background or on the first request."""
    loaded: list[str] = []

    class Guard:
        semantic = "test"

        def warm_up(self) -> None:
            time.sleep(0.05)
            loaded.append("guard")

    class Claims:
        async def scorer(self) -> None:
            await asyncio.sleep(0.05)
            loaded.append("support")

    class Core:
        llm = None
        guard = Guard()
        claims = Claims()

    monkeypatch.setattr(Synthesizer, "from_settings", classmethod(lambda cls, settings: Core()))
    state = SynthesizerState(Settings(), steps=object())  # type: ignore[arg-type]
    assert not await state.ready()
    await state.start()
    assert loaded == ["guard", "support"]
    assert await state.ready()


async def test_the_request_is_committed_before_the_model_is_called(
    fake: FakeAnthropic, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A synthesizer killed during the model call must not take the request again when it restarts."""
    import services.synthesizer.handlers as handlers

    calls_at_commit: list[int] = []

    async def acknowledge(msg: KafkaMessage) -> bool:
        calls_at_commit.append(len(fake.requests))
        return True

    monkeypatch.setattr(handlers, "acknowledge_receipt", acknowledge)
    broker, got = make(fake)
    before = len(fake.requests)
    async with TestKafkaBroker(broker) as br:
        await br.publish(
            SynthesisRequest(question=QUESTION, passages=PASSAGES),
            topic=SYNTHESIS_REQUESTS,
            correlation_id="c-ack",
            reply_to=REPLIES,
        )
    assert calls_at_commit == [before]  # committed once, with no model call made yet
    assert len(fake.requests) > before  # and then the model answered
    assert SynthesisReply.model_validate_json(got[-1][2]).mode == "llm"
