"""Claude (the Anthropic Messages API) for every service: the client, and the one way a call is made.

Every call goes through :func:`create_message` or :func:`stream_message`, which record what it cost: the
model that answered and the tokens of its ``usage`` (input, output, cache read, cache write) go to the
Prometheus counters ``evidentia_llm_calls_total{service,model,step}`` and
``evidentia_llm_tokens_total{service,model,kind}``, and, as an :class:`~shared.events.LlmCall`, to the
:class:`UsageLedger` of the answer being made. A ledger is given to the call (``ledger=``) or is the one
opened around the work by :func:`usage_scope` (a context variable, so it follows tasks the work starts).
Services hand their calls on in their replies (``llm_calls``), and the gateway adds them up into the
answer's ``tokens_used``.

The model of each step is a setting: ``EVIDENTIA_LLM_MODEL`` writes answers; ``EVIDENTIA_LLM_FAST_MODEL``
(a cheap one) normalises, classifies, rewrites and checks claim support.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import Any

import anthropic
from anthropic.lib.streaming import AsyncMessageStream
from anthropic.types import Message

from shared import metrics
from shared.events import LlmCall, TokenUsage
from shared.settings import LlmSettings

log = logging.getLogger(__name__)

# The Prometheus ``kind`` label of each usage field.
TOKEN_KINDS = {
    "input_tokens": "input",
    "output_tokens": "output",
    "cache_read_input_tokens": "cache_read",
    "cache_creation_input_tokens": "cache_write",
}


def anthropic_client(
    settings: LlmSettings, *, max_retries: int, timeout_s: float | None = None
) -> anthropic.AsyncAnthropic:
    """An async client with the settings' API key and base URL; ``timeout_s`` defaults to the settings'."""
    if settings.anthropic_api_key is None:
        raise ValueError("an Anthropic client needs ANTHROPIC_API_KEY")
    return anthropic.AsyncAnthropic(
        api_key=settings.anthropic_api_key.get_secret_value(),
        base_url=settings.anthropic_base_url,
        timeout=settings.timeout_s if timeout_s is None else timeout_s,
        max_retries=max_retries,
    )


class UsageLedger:
    """The Claude calls made for one answer, in the order they finished."""

    def __init__(self) -> None:
        self.calls: list[LlmCall] = []

    def add(self, call: LlmCall) -> None:
        self.calls.append(call)

    def extend(self, calls: Sequence[LlmCall]) -> None:
        """Calls another service made for this answer (from its reply's ``llm_calls``)."""
        self.calls.extend(calls)

    @property
    def total(self) -> TokenUsage:
        return TokenUsage.total(self.calls)


_LEDGER: ContextVar[UsageLedger | None] = ContextVar("evidentia_llm_ledger", default=None)


@contextmanager
def usage_scope() -> Iterator[UsageLedger]:
    """A new ledger that every call made inside the block (and in tasks it starts) is recorded in."""
    ledger = UsageLedger()
    token = _LEDGER.set(ledger)
    try:
        yield ledger
    finally:
        _LEDGER.reset(token)


def current_ledger() -> UsageLedger | None:
    return _LEDGER.get()


def absorb(calls: Sequence[LlmCall]) -> None:
    """Add another service's calls (from a reply) to the current ledger, if one is open."""
    ledger = _LEDGER.get()
    if ledger is not None and calls:
        ledger.extend(calls)


def token_usage(usage: Any) -> TokenUsage:
    """The SDK's ``Usage`` (or None) as a :class:`TokenUsage`; a field the API left out counts 0."""

    def count(name: str) -> int:
        value = getattr(usage, name, None) if usage is not None else None
        return int(value) if isinstance(value, int) and value > 0 else 0

    return TokenUsage(**{name: count(name) for name in TOKEN_KINDS})


def record(
    service: str, step: str, model: str, usage: TokenUsage, *, ok: bool = True, ledger: UsageLedger | None = None
) -> LlmCall:
    """Count one call in Prometheus and in ``ledger`` (default: the current scope's, if any)."""
    call = LlmCall(service=service, step=step, model=model, usage=usage, ok=ok)
    metrics.LLM_CALLS.labels(service, model, step).inc()
    if not ok:
        metrics.LLM_CALL_FAILURES.labels(service, model, step).inc()
    for name, kind in TOKEN_KINDS.items():
        n = getattr(usage, name)
        if n:
            metrics.LLM_TOKENS.labels(service, model, kind).inc(n)
    target = ledger if ledger is not None else _LEDGER.get()
    if target is not None:
        target.add(call)
    return call


async def create_message(
    client: anthropic.AsyncAnthropic,
    *,
    service: str,
    step: str,
    ledger: UsageLedger | None = None,
    **params: Any,
) -> Message:
    """``client.messages.create(**params)``, recorded (a failed call is counted with no tokens, and re-raised)."""
    requested = str(params.get("model", "unknown"))
    try:
        message: Message = await client.messages.create(**params)
    except BaseException:
        record(service, step, requested, TokenUsage(), ok=False, ledger=ledger)
        raise
    record(service, step, message.model or requested, token_usage(message.usage), ledger=ledger)
    return message


@asynccontextmanager
async def stream_message(
    client: anthropic.AsyncAnthropic,
    *,
    service: str,
    step: str,
    ledger: UsageLedger | None = None,
    **params: Any,
) -> AsyncIterator[AsyncMessageStream[Any]]:
    """``client.messages.stream(**params)``, recorded when the block ends.

    The usage is the final message's (``message_start`` gives the input and cache counts, ``message_delta``
    the output count). A stream cut off (an error, a cancelled request) is recorded with what was counted
    before it stopped, marked ``ok=False``.
    """
    requested = str(params.get("model", "unknown"))
    stream: AsyncMessageStream[Any] | None = None
    try:
        async with client.messages.stream(**params) as stream:
            yield stream
            final = await stream.get_final_message()
    except BaseException:
        snapshot = stream._current_snapshot_or_none() if stream is not None else None
        model = (snapshot.model if snapshot is not None else None) or requested
        record(service, step, model, token_usage(snapshot.usage if snapshot else None), ok=False, ledger=ledger)
        raise
    record(service, step, final.model or requested, token_usage(final.usage), ledger=ledger)
