"""Workflow results cached with a time to live (default 5 days, ``EVIDENTIA_WORKFLOW_CACHE_TTL_S``).

Namespaces: ``disease_norm`` (raw disease -> normalised term), ``disease_broader``,
``pubmed_count`` (query -> hit count), ``organ`` (disease -> organ term), ``search_terms`` (drug,
disease, profile -> queries), ``query_rewrite``. :class:`services.gateway.store.cache.PgCache` keeps
them in PostgreSQL (``workflow_cache``) so every gateway instance shares them;
:class:`MemoryCache` is the same contract in memory.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol


def cache_key(*parts: Any) -> str:
    """A readable key for short inputs, a SHA-256 for long ones."""
    text = (
        json.dumps(parts, sort_keys=True, default=str) if len(parts) != 1 or not isinstance(parts[0], str) else parts[0]
    )
    text = text.strip().lower()
    return text if len(text) <= 200 else "sha256:" + hashlib.sha256(text.encode()).hexdigest()


class Cache(Protocol):
    async def get(self, namespace: str, key: str) -> Any | None: ...

    async def put(self, namespace: str, key: str, value: Any, ttl_s: float) -> None: ...


class MemoryCache:
    def __init__(self, clock: Callable[[], float] = time.time):
        self.clock = clock
        self.items: dict[tuple[str, str], tuple[Any, float]] = {}

    async def get(self, namespace: str, key: str) -> Any | None:
        item = self.items.get((namespace, key))
        if item is None or item[1] <= self.clock():
            return None
        return item[0]

    async def put(self, namespace: str, key: str, value: Any, ttl_s: float) -> None:
        if ttl_s > 0:
            self.items[(namespace, key)] = (value, self.clock() + ttl_s)


async def cached(
    cache: Cache, namespace: str, key: str, ttl_s: float, make: Callable[[], Awaitable[Any]]
) -> tuple[Any, bool]:
    """(value, whether it came from the cache); ``make`` runs on a miss and a non-None result is stored."""
    value = await cache.get(namespace, key)
    if value is not None:
        return value, True
    value = await make()
    if value is not None:
        await cache.put(namespace, key, value, ttl_s)
    return value, False
