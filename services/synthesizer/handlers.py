"""Synthesizer handlers: ``synthesis.requests`` -> answer (whole, or tokens then the answer) -> reply;
``llm.steps.requests`` -> one workflow LLM step (services/synthesizer/steps.py) -> reply."""

from __future__ import annotations

import asyncio
import logging

from faststream.kafka import KafkaBroker

from services.synthesizer.core import Synthesizer
from services.synthesizer.steps import StepRunner
from shared.events import ErrorInfo, LlmStepReply, LlmStepRequest, SynthesisReply, SynthesisRequest
from shared.kafka.context import KafkaMessage
from shared.kafka.reply_server import (
    RecentRequests,
    acknowledge_receipt,
    progress_while,
    reply,
    request_subscriber_options,
)
from shared.kafka.topics import LLM_STEP_REQUESTS, SYNTHESIS_REQUESTS
from shared.settings import Settings

log = logging.getLogger(__name__)
GROUP_ID = "evidentia-synthesizer"


class SynthesizerState:
    def __init__(self, settings: Settings, steps: StepRunner | None = None):
        self.settings = settings
        self._core: Synthesizer | None = None
        self._steps = steps

    async def start(self) -> None:
        core = Synthesizer.from_settings(self.settings)
        # The models (the emergency guard's, the support check's) load before the broker starts consuming, which
        # it does only after this hook: a request taken by a cold instance would wait for the loads while its
        # caller's clock runs (a restarted replica gets its partitions straight back by static membership, and
        # a request stuck there still sends progress, so it is never resent). Until then the group serves the
        # requests elsewhere.
        await asyncio.to_thread(core.guard.warm_up)
        await core.claims.scorer()
        self._core = core
        if self._steps is None:
            self._steps = StepRunner(self.settings.llm)
        log.info("synthesizer mode", extra={"mode": "llm" if core.llm else "extractive", "guard": core.guard.semantic})

    async def stop(self) -> None:
        self._core = None
        if self._steps is not None:
            await self._steps.aclose()
        self._steps = None

    async def ready(self) -> bool:
        return self._core is not None

    @property
    def core(self) -> Synthesizer:
        assert self._core is not None, "synthesizer not started"
        return self._core

    @property
    def steps(self) -> StepRunner:
        assert self._steps is not None, "synthesizer not started"
        return self._steps


def register(broker: KafkaBroker, state: SynthesizerState) -> None:
    kafka = state.settings.kafka
    # A gateway resends a request it hears nothing of (kafka.synthesis_resend_after_s); a copy reaching this
    # process while it still works on (or has just answered) the first is dropped: one answer, one model bill.
    taken = RecentRequests(ttl_s=kafka.request_timeout_s * 2)

    @broker.subscriber(
        SYNTHESIS_REQUESTS,
        group_id=GROUP_ID,
        **request_subscriber_options(state.settings.kafka, SYNTHESIS_REQUESTS),
        no_reply=True,  # replies are published explicitly (tokens, then the answer); no empty extra one
        title="synthesis.requests:synthesizer",
        description="A SynthesisRequest; RequestProgress while it works, SynthesisTokens (if streamed), then a "
        "SynthesisReply, to reply_to.",
    )
    async def on_request(request: SynthesisRequest, msg: KafkaMessage) -> None:
        if not taken.claim(msg.correlation_id):
            log.info("copy of a request already taken here; dropped", extra={"correlation_id": msg.correlation_id})
            return
        await acknowledge_receipt(msg)  # a restart must not take it again: the model is billed per call
        try:
            async with progress_while(broker, msg, kafka.request_progress_every_s, request.trace_id):
                if request.stream:
                    async for event in state.core.stream(request):
                        await reply(broker, msg, event)
                    return
                answer = await state.core.answer(request)
        except Exception as exc:  # the caller gets the error instead of a timeout
            log.exception("synthesis failed")
            answer = SynthesisReply(
                trace_id=request.trace_id,
                error=ErrorInfo(type=type(exc).__name__, message=str(exc), status=502),
            )
        await reply(broker, msg, answer)

    steps_taken = RecentRequests(ttl_s=kafka.request_timeout_s * 2)

    @broker.subscriber(
        LLM_STEP_REQUESTS,
        group_id=GROUP_ID,
        **request_subscriber_options(state.settings.kafka, LLM_STEP_REQUESTS),
        no_reply=True,
        title="llm.steps.requests:synthesizer",
        description="An LlmStepRequest (a workflow's LLM step: classify, expand, assess, an agent turn...); "
        "RequestProgress while it works, then an LlmStepReply, to reply_to.",
    )
    async def on_step(request: LlmStepRequest, msg: KafkaMessage) -> None:
        if not steps_taken.claim(msg.correlation_id):
            log.info("copy of a step already taken here; dropped", extra={"correlation_id": msg.correlation_id})
            return
        await acknowledge_receipt(msg)
        try:
            async with progress_while(broker, msg, kafka.request_progress_every_s, request.trace_id):
                answer = await state.steps.run(request)
        except Exception as exc:  # the caller gets the error instead of a timeout
            log.exception("LLM step failed")
            answer = LlmStepReply(
                trace_id=request.trace_id, error=ErrorInfo(type=type(exc).__name__, message=str(exc), status=502)
            )
        await reply(broker, msg, answer)
