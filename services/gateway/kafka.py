"""The gateway's side of Kafka: a broker, a reply topic of its own, and typed request helpers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from faststream.kafka import KafkaBroker

from shared.citations import gate_reply
from shared.events import (
    Event,
    LlmStepReply,
    LlmStepRequest,
    RetrievalReply,
    RetrievalRequest,
    SynthesisReply,
    SynthesisRequest,
)
from shared.kafka.broker import make_broker
from shared.kafka.reply_client import ReplyClient
from shared.kafka.topic_admin import ReplyTopicSweeper, delete_topics, ensure_topics
from shared.kafka.topics import (
    LLM_STEP_REQUESTS,
    RETRIEVAL_REQUESTS,
    SYNTHESIS_REQUESTS,
    TopicSpec,
    reply_group,
    reply_topic,
    standard_topics,
)
from shared.periodic import run_every
from shared.settings import Settings

log = logging.getLogger(__name__)


class GatewayKafka:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.broker: KafkaBroker = make_broker("gateway", settings)
        self.reply_topic = reply_topic(f"gateway-{settings.service.instance_id}")
        self.replies = ReplyClient(self.broker, self.reply_topic)
        # Read as the only member of a group of its own: while this process lives, the group has a member; a
        # killed gateway's topic is found ownerless and deleted by another gateway's sweep.
        self.replies.install(group_id=reply_group(self.reply_topic))
        self.sweeper = ReplyTopicSweeper(settings.kafka, self.reply_topic)
        self._sweeping: asyncio.Task[None] | None = None
        self.started = False

    async def start(self) -> None:
        k = self.settings.kafka
        specs = standard_topics(k.topic_partitions)
        specs.append(TopicSpec(self.reply_topic, 1, {"retention.ms": str(3600 * 1000)}))
        await ensure_topics(k, specs, k.replication_factor)
        await self.broker.start()
        self.started = True
        every = self.settings.gateway.reply_topic_sweep_every_s
        if every > 0:
            self._sweeping = asyncio.create_task(
                run_every(
                    every,
                    self.sweeper.sweep,
                    failure="sweeping the reply topics of gone gateways failed",
                    log=log,
                    wait_first=True,
                    level=logging.WARNING,
                )
            )

    async def stop(self) -> None:
        if self._sweeping is not None:
            self._sweeping.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeping
        await self.broker.stop()
        self.started = False
        await delete_topics(self.settings.kafka, [self.reply_topic])

    async def publish(self, event: Event, topic: str, key: str) -> None:
        await self.broker.publish(event, topic=topic, key=key.encode())

    async def retrieve(self, request: RetrievalRequest) -> RetrievalReply:
        k = self.settings.kafka
        return await self.replies.request(
            RETRIEVAL_REQUESTS,
            request,
            RetrievalReply,
            k.request_timeout_s,
            resend_after=k.request_resend_after_s or None,
        )

    async def synthesize(self, request: SynthesisRequest) -> SynthesisReply:
        """The synthesizer's reply, its citations checked again against the passages sent (shared.citations)."""
        k = self.settings.kafka
        reply = await self.replies.request(
            SYNTHESIS_REQUESTS,
            request,
            SynthesisReply,
            k.request_timeout_s,
            resend_after=k.synthesis_resend_after_s or None,
        )
        return gate_reply(reply, {h.citation_id for h in request.passages})

    async def run_step(self, request: LlmStepRequest) -> LlmStepReply:
        """One workflow LLM step, run by the synthesizer (an error reply is raised as RemoteError)."""
        k = self.settings.kafka
        return await self.replies.request(
            LLM_STEP_REQUESTS,
            request,
            LlmStepReply,
            k.request_timeout_s,
            resend_after=k.synthesis_resend_after_s or None,
        )

    def synthesize_stream(self, request: SynthesisRequest) -> AsyncIterator[tuple[str, bytes]]:
        k = self.settings.kafka
        return self.replies.stream(
            SYNTHESIS_REQUESTS,
            request,
            "SynthesisReply",
            k.request_timeout_s,
            resend_after=k.synthesis_resend_after_s or None,
        )
