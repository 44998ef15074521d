"""shared.llm: every Claude call's model and tokens, counted in Prometheus and in the answer's ledger.

Against the fake Messages API (real SDK over HTTP), whose ``usage`` follows the real API's: input, output,
cache write on the first request of a cacheable prefix and cache read on the next; streamed, the input and
cache counts in ``message_start`` and the output count in ``message_delta``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import anthropic
import pytest

from shared import metrics
from shared.events import LlmCall, TokenUsage
from shared.llm import UsageLedger, absorb, create_message, current_ledger, stream_message, usage_scope
from tests.fakes.anthropic_server import FakeAnthropic

SYSTEM = "You answer from the sources given. " * 40  # ~350 tokens: cacheable when the fake's minimum is lowered


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeAnthropic]:
    with FakeAnthropic(cache_min_tokens=100) as f:
        yield f


@pytest.fixture
async def client(fake: FakeAnthropic) -> AsyncIterator[anthropic.AsyncAnthropic]:
    fake.usages.clear()
    c = anthropic.AsyncAnthropic(api_key="k", base_url=fake.url, max_retries=0)
    yield c
    await c.close()


def params(question: str, *, system: str = SYSTEM, model: str = "claude-main") -> dict[str, object]:
    return {
        "model": model,
        "max_tokens": 200,
        "system": [{"type": "text", "text": system, "cache_control": {"type": "ephemeral"}}],
        "messages": [{"role": "user", "content": question}],
    }


def counter(name: str, labels: dict[str, str]) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


def as_usage(raw: dict[str, object]) -> TokenUsage:
    return TokenUsage.model_validate({k: raw[k] for k in TokenUsage.model_fields})


async def test_a_call_is_recorded_with_the_apis_usage_in_the_ledger_and_prometheus(
    client: anthropic.AsyncAnthropic, fake: FakeAnthropic
) -> None:
    labels = {"service": "test-a", "model": "claude-main"}
    before_in = counter("evidentia_llm_tokens_total", {**labels, "kind": "input"})
    before_out = counter("evidentia_llm_tokens_total", {**labels, "kind": "output"})
    ledger = UsageLedger()
    message = await create_message(
        client, service="test-a", step="answer", ledger=ledger, **params("Does aspirin prevent stroke? " * 3)
    )
    assert message.content  # the message is handed back as the SDK gives it
    (call,) = ledger.calls
    (sent,) = fake.usages
    assert call == LlmCall(service="test-a", step="answer", model="claude-main", usage=as_usage(sent[1]))
    assert call.usage.input_tokens > 0 and call.usage.output_tokens > 0
    assert counter("evidentia_llm_calls_total", {**labels, "step": "answer"}) >= 1
    assert counter("evidentia_llm_tokens_total", {**labels, "kind": "input"}) - before_in == call.usage.input_tokens
    assert counter("evidentia_llm_tokens_total", {**labels, "kind": "output"}) - before_out == call.usage.output_tokens


async def test_the_prompt_cache_is_written_once_then_read(client: anthropic.AsyncAnthropic) -> None:
    system = "A system prompt only this test sends, long enough to be cached. " * 30
    ledger = UsageLedger()
    for q in ("first question about statins", "a second, different question about statins"):
        await create_message(client, service="test-b", step="answer", ledger=ledger, **params(q, system=system))
    first, second = (c.usage for c in ledger.calls)
    assert first.cache_creation_input_tokens > 0 and first.cache_read_input_tokens == 0
    assert second.cache_read_input_tokens == first.cache_creation_input_tokens
    assert second.cache_creation_input_tokens == 0
    # Cached tokens are not billed again as input: only the messages after the cached prefix are.
    assert second.input_tokens < first.cache_creation_input_tokens
    total = ledger.total
    assert total.cache_creation_input_tokens == first.cache_creation_input_tokens
    assert total.cache_read_input_tokens == second.cache_read_input_tokens
    assert total.input_tokens == first.input_tokens + second.input_tokens
    labels = {"service": "test-b", "model": "claude-main"}
    assert counter("evidentia_llm_tokens_total", {**labels, "kind": "cache_read"}) == second.cache_read_input_tokens
    assert counter("evidentia_llm_tokens_total", {**labels, "kind": "cache_write"}) == first.cache_creation_input_tokens


async def test_a_short_prompt_is_not_cached_as_on_the_real_api() -> None:
    with FakeAnthropic() as strict:  # the API's minimum cacheable prompt (1024 tokens)
        c = anthropic.AsyncAnthropic(api_key="k", base_url=strict.url, max_retries=0)
        ledger = UsageLedger()
        for _ in range(2):
            await create_message(c, service="test-c", step="answer", ledger=ledger, **params("q?", system="Short."))
        await c.close()
    assert all(x.usage.cache_creation_input_tokens == x.usage.cache_read_input_tokens == 0 for x in ledger.calls)


async def test_a_stream_is_recorded_with_the_final_usage(client: anthropic.AsyncAnthropic, fake: FakeAnthropic) -> None:
    ledger = UsageLedger()
    text = ""
    async with stream_message(
        client, service="test-d", step="answer", ledger=ledger, **params("Is metformin first line?")
    ) as stream:
        async for piece in stream.text_stream:
            text += piece
            assert not ledger.calls  # recorded once the stream is over, with the final counts
    (call,) = ledger.calls
    (sent,) = fake.usages
    # Input and cache counts come from message_start, the output count from message_delta: all of them kept.
    assert call.usage == as_usage(sent[1]) and call.ok
    assert call.usage.output_tokens == FakeAnthropic.tokens(text) > 1


async def test_a_failed_call_is_counted_and_raised(client: anthropic.AsyncAnthropic, fake: FakeAnthropic) -> None:
    labels = {"service": "test-e", "model": "claude-main", "step": "answer"}
    fake.fail_next(500)
    ledger = UsageLedger()
    with pytest.raises(anthropic.InternalServerError):
        await create_message(client, service="test-e", step="answer", ledger=ledger, **params("q"))
    (call,) = ledger.calls
    assert not call.ok and call.usage == TokenUsage()
    assert counter("evidentia_llm_call_failures_total", labels) == 1
    assert counter("evidentia_llm_calls_total", labels) == 1


async def test_a_stream_cut_off_keeps_what_was_counted(client: anthropic.AsyncAnthropic, fake: FakeAnthropic) -> None:
    ledger = UsageLedger()
    with pytest.raises(RuntimeError):
        async with stream_message(client, service="test-f", step="answer", ledger=ledger, **params("q")) as s:
            async for _ in s.text_stream:
                raise RuntimeError("the client went away")
    (call,) = ledger.calls
    assert not call.ok
    assert call.usage.input_tokens == fake.usages[-1][1]["input_tokens"] > 0  # from message_start


async def test_the_scope_follows_tasks_and_nested_scopes_keep_their_own(client: anthropic.AsyncAnthropic) -> None:
    assert current_ledger() is None
    with usage_scope() as outer:
        await asyncio.gather(  # tasks started inside the scope record in it
            create_message(client, service="test-g", step="classify", **params("a", model="claude-fast")),
            create_message(client, service="test-g", step="answer", **params("b")),
        )
        with usage_scope() as inner:
            await create_message(client, service="test-g", step="rewrite", **params("c", model="claude-fast"))
        absorb(inner.calls)  # handed on, as a reply's llm_calls are
        assert current_ledger() is outer
    assert current_ledger() is None
    assert sorted(c.step for c in outer.calls) == ["answer", "classify", "rewrite"]
    assert [c.step for c in inner.calls] == ["rewrite"]
    assert {c.model for c in outer.calls if c.step != "answer"} == {"claude-fast"}
    assert outer.total == TokenUsage.total(outer.calls) and outer.total.output_tokens > 0


def test_every_claude_call_goes_through_shared_llm() -> None:
    """A call made around shared.llm would be neither counted nor reported: none may exist."""
    root = Path(__file__).resolve().parents[3]
    offenders = [
        f"{p.relative_to(root)}:{n}"
        for package in ("services", "shared", "cli", "evaluation", "bench")
        for p in sorted((root / package).rglob("*.py"))
        if p.relative_to(root).as_posix() != "shared/llm.py"
        for n, line in enumerate(p.read_text().splitlines(), 1)
        if re.search(r"\.messages\.(create|stream)\(", line)
    ]
    assert offenders == []
