"""The corpus counts BM25 reads (N, mean field lengths), cached: they barely move between searches."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field

import asyncpg

from services.retriever.engine.lexical.postings import CorpusCounts, corpus_counts

log = logging.getLogger(__name__)


#: A store with fewer chunks than this is counted within the search that needs it (well under a millisecond at
#: that size) once its counts are ``small_ttl_s`` old: the statistics of a store still filling are never stale
#: for long, e.g. zero while its first documents arrive.
SYNC_COUNT_BELOW = 10_000


@dataclass
class CorpusStats:
    """N and the mean field lengths of the chunks, cached for ``ttl_s`` (BM25 barely moves with them).

    An empty store is counted again by every search, and a store of fewer than ``sync_below`` chunks by the
    search that finds its counts ``small_ttl_s`` old (cheap, and its statistics change fast: a cached zero
    would hide its first documents for a minute). The legs of one search, and the searches of one moment,
    share a read. A larger store is counted in the background: an expired value is still returned while one
    task reads the new one (counting 10^6 chunks takes a while: no search should wait for it)."""

    ttl_s: float = 60.0
    sync_below: int = SYNC_COUNT_BELOW
    small_ttl_s: float = 1.0
    _value: CorpusCounts | None = None
    _at: float = 0.0
    _lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    _refresh: asyncio.Task[None] | None = None

    async def get(self, pool: asyncpg.Pool) -> CorpusCounts:
        """The corpus counts: read within the call for a small store (or the first time), else the cached ones
        (read again in the background once older than ``ttl_s``)."""
        if self._stale_small():
            started = self._at
            async with self._lock:  # callers that waited for another's read take its result
                if self._value is None or (self._stale_small() and self._at == started):
                    await self._read(pool)
        elif time.monotonic() - self._at >= self.ttl_s and (self._refresh is None or self._refresh.done()):
            self._refresh = asyncio.create_task(self._read(pool))
        assert self._value is not None
        return self._value

    def _stale_small(self) -> bool:
        """Nothing read yet, an empty store, or a small store's counts ``small_ttl_s`` old: read them now."""
        if self._value is None or self._value.chunks == 0:
            return True
        return self._value.chunks < self.sync_below and time.monotonic() - self._at >= self.small_ttl_s

    async def _read(self, pool: asyncpg.Pool) -> None:
        try:
            self._value = await corpus_counts(pool)
            self._at = time.monotonic()
        except Exception:
            if self._value is None:
                raise
            log.warning("corpus counts not refreshed; the cached ones stay", exc_info=True)

    def invalidate(self) -> None:
        """Forget the cached counts: the next :meth:`get` reads them again."""
        self._value = None
