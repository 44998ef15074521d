"""The workflow cache in PostgreSQL (``workflow_cache``): shared by every gateway instance.

The same contract as :class:`services.gateway.intelligence.cache.MemoryCache`; entries expire after their
time to live.
"""

from __future__ import annotations

import json
from typing import Any

import asyncpg


class PgCache:
    def __init__(self, pool: asyncpg.Pool):
        self.pool = pool

    async def get(self, namespace: str, key: str) -> Any | None:
        raw = await self.pool.fetchval(
            "SELECT value::text FROM workflow_cache WHERE namespace = $1 AND key = $2 AND expires_at > now()",
            namespace,
            key,
        )
        return None if raw is None else json.loads(raw)

    async def put(self, namespace: str, key: str, value: Any, ttl_s: float) -> None:
        if ttl_s <= 0:
            return
        await self.pool.execute(
            """INSERT INTO workflow_cache (namespace, key, value, expires_at)
               VALUES ($1, $2, $3::jsonb, now() + make_interval(secs => $4))
               ON CONFLICT (namespace, key) DO UPDATE
               SET value = EXCLUDED.value, created_at = now(), expires_at = EXCLUDED.expires_at""",
            namespace,
            key,
            json.dumps(value),
            float(ttl_s),
        )
