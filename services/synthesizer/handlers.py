"""Synthesizer handlers: ``synthesis.requests`` -> answer (whole, or tokens then the answer) -> reply."""

from __future__ import annotations

import logging

from faststream.kafka import KafkaBroker, KafkaMessage
from faststream.middlewares import AckPolicy

from services.synthesizer.core import Synthesizer
from shared.broker import is_stale, reply
from shared.events import ErrorInfo, SynthesisReply, SynthesisRequest
from shared.settings import Settings
from shared.topics import SYNTHESIS_REQUESTS

log = logging.getLogger(__name__)
GROUP_ID = "evidentia-synthesizer"


class SynthesizerState:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._core: Synthesizer | None = None

    async def start(self) -> None:
        self._core = Synthesizer.from_settings(self.settings)
        log.info("synthesizer mode", extra={"mode": "llm" if self._core.llm else "extractive"})

    async def ready(self) -> bool:
        return self._core is not None

    @property
    def core(self) -> Synthesizer:
        assert self._core is not None, "synthesizer not started"
        return self._core


def register(broker: KafkaBroker, state: SynthesizerState) -> None:
    @broker.subscriber(
        SYNTHESIS_REQUESTS,
        group_id=GROUP_ID,
        auto_offset_reset="earliest",
        # Concurrent, acknowledged on receipt: a caller waits at most its timeout, so a request is never redelivered.
        ack_policy=AckPolicy.ACK_FIRST,
        max_workers=state.settings.kafka.request_concurrency,
        no_reply=True,  # replies are published explicitly (tokens, then the answer); no empty extra one
        title="synthesis.requests:synthesizer",
        description="A SynthesisRequest; SynthesisTokens (if streamed), then a SynthesisReply, to reply_to.",
    )
    async def on_request(request: SynthesisRequest, msg: KafkaMessage) -> None:
        if is_stale(msg, state.settings.kafka.request_timeout_s):
            log.info("stale request skipped", extra={"correlation_id": msg.correlation_id})
            return
        try:
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
