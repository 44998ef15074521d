"""What one gateway process holds while it runs: its Kafka client, its PostgreSQL pool and the clients and
locks that outlive a request. :func:`services.gateway.app.create_app` builds it; routes reach it only
through the providers of :mod:`services.gateway.deps`."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import weakref

import asyncpg

from services.gateway.intelligence.llm import WorkflowLlm
from services.gateway.intelligence.rxnav import RxNavClient
from services.gateway.kafka import GatewayKafka
from services.gateway.retention import ConversationRetention
from services.gateway.security import SharedRateLimit
from services.gateway.understanding.rewrite import FollowUpRewriter
from services.gateway.workflows.backend import GatewayBackend
from shared.db import create_pool
from shared.periodic import run_every
from shared.safety import default_guard
from shared.settings import Settings

log = logging.getLogger(__name__)
RATE_BUCKET_PRUNE_EVERY_S = 600.0


class TurnLocks:
    """One lock per conversation, serialising its turns within this process (a new conversation needs none
    shared); a lock lives while a turn holds it."""

    def __init__(self) -> None:
        self._locks: weakref.WeakValueDictionary[str, asyncio.Lock] = weakref.WeakValueDictionary()

    def lock(self, conversation_id: str | None) -> asyncio.Lock:
        if conversation_id is None:
            return asyncio.Lock()
        lock = self._locks.get(conversation_id)
        if lock is None:
            lock = asyncio.Lock()
            self._locks[conversation_id] = lock
        return lock


class Gateway:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.kafka = GatewayKafka(settings)
        self._pool: asyncpg.Pool | None = None
        self._warm: asyncio.Task[None] | None = None
        self.turn_locks = TurnLocks()
        self.workflow_llm = WorkflowLlm(settings.llm, self.kafka)  # the synthesizer runs the LLM steps
        self.rewriter = FollowUpRewriter(self.workflow_llm)
        w = settings.workflow
        self.rxnav = RxNavClient(w.rxnav_url, timeout_s=w.rxnav_timeout_s)
        self.workflow_backend = GatewayBackend(self.kafka, lambda: self.pool)
        self.retention = ConversationRetention.over(settings.gateway, lambda: self.pool)
        self.rate_limit = SharedRateLimit(settings.gateway, lambda: self._pool)  # the API guard's, per key
        self._prune: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # No statement of the gateway outlives the request timeout its own callers are held to.
        self._pool = await create_pool(self.settings.database, caller_timeout_s=self.settings.kafka.request_timeout_s)
        await self.kafka.start()
        # The emergency guard's model loads now, in the background: start-up does not wait for it, readiness does
        # (/readyz); a question asked meanwhile waits for the model, it is never let through unchecked.
        self._warm = asyncio.create_task(asyncio.to_thread(default_guard().warm_up))
        self.retention.start()  # conversations idle past EVIDENTIA_GATEWAY_CONVERSATION_RETENTION_DAYS
        self._prune = asyncio.create_task(
            run_every(
                RATE_BUCKET_PRUNE_EVERY_S,
                self.rate_limit.prune,
                failure="pruning idle rate-limit buckets failed",
                log=log,
                wait_first=True,
                level=logging.WARNING,
            )
        )

    async def stop(self) -> None:
        await self.retention.stop()  # before the pool it deletes through is closed
        if self._prune is not None:
            self._prune.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._prune
        await self.kafka.stop()
        if self._pool is not None:
            await self._pool.close()

    @property
    def warmed_up(self) -> bool:
        """The emergency guard's model has loaded (or the guard fell back to its rules): a question no longer
        waits for it, nor does the first ingest share the cores with its loading."""
        return self._warm is not None and self._warm.done()

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "gateway not started"
        return self._pool
