"""An async token bucket that keeps the whole process under NCBI's request rate.

NCBI allows at most 3 E-utilities requests a second without an API key and 10 with one. Every
coroutine of the process that talks to E-utilities takes a token from the *same* bucket
(:func:`process_limiter`), so ten concurrent handlers still make at most 3 (or 10) calls a second.

The bucket reserves tokens: a caller that finds the bucket empty takes a token "on credit" (the
count goes negative) and sleeps until the refill has paid for it. Callers are therefore served in
the order they asked, with no lock and no busy loop, and a caller cancelled while waiting gives its
token back. The default burst is 1 token, which spaces calls evenly ``1/rate`` seconds apart; NCBI
counts calls per second, and a larger burst could send ``2 x rate`` calls within one second.

The clock and the sleep are injectable, so tests check the schedule without sleeping.

Several fetcher replicas (KEDA may run three) share one limit through :class:`PgTokenBucket`: the
same reservation kept in one PostgreSQL row (``rate_buckets``), updated atomically by every replica
with the database's clock, so the cluster as a whole makes at most ``rate`` calls a second whatever
the replica count (``EVIDENTIA_NCBI_RATE_SCOPE=cluster``, the default; see :func:`make_limiter`).
It paces at :data:`CLUSTER_SAFETY` (85 %) of the rate: calls are reserved ``1/rate`` apart but reach NCBI
after a scheduling and network delay that differs per call (on a busy host, tens to hundreds of
milliseconds), and without a margin four calls could land inside one of NCBI's one-second windows (seen
in the three-process test on a loaded machine with a 95 % pace). 85 % leaves about 170 ms of such jitter
over three calls at 3/s.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from shared.db import rate_buckets

Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

RATE_WITHOUT_KEY = 3.0
RATE_WITH_KEY = 10.0
CLUSTER_SAFETY = 0.85

log = logging.getLogger(__name__)


class Limiter(Protocol):
    async def acquire(self) -> None:
        """Wait until the caller may make one request."""


class TokenBucket:
    """At most ``rate`` acquisitions a second on average, ``burst`` at once."""

    def __init__(
        self,
        rate: float,
        burst: float = 1.0,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = asyncio.sleep,
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        if burst < 1:
            raise ValueError("burst must be at least 1")
        self.rate = float(rate)
        self.burst = float(burst)
        self._clock = clock
        self._sleep = sleep
        self._tokens = self.burst
        self._updated = clock()
        self.waited_s = 0.0  # total time callers were asked to wait (for tests and metrics)

    def _refill(self) -> None:
        now = self._clock()
        elapsed = max(0.0, now - self._updated)
        self._updated = now
        self._tokens = min(self.burst, self._tokens + elapsed * self.rate)

    def reserve(self) -> float:
        """Take one token now (on credit if need be); return how long the caller must wait."""
        self._refill()
        self._tokens -= 1.0
        wait = 0.0 if self._tokens >= 0 else -self._tokens / self.rate
        self.waited_s += wait
        return wait

    async def acquire(self) -> None:
        """Wait until the caller may make one request."""
        wait = self.reserve()  # no await before this: reservations are atomic under asyncio
        if wait <= 0:
            return
        try:
            await self._sleep(wait)
        except asyncio.CancelledError:
            self._tokens += 1.0  # give the unused token back
            raise

    async def __aenter__(self) -> TokenBucket:
        await self.acquire()
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


def rate_for(api_key: str | None, override: float | None = None) -> float:
    """NCBI's rate: ``override`` if set, else 10/s with an API key, 3/s without."""
    if override is not None:
        return override
    return RATE_WITH_KEY if api_key else RATE_WITHOUT_KEY


_LIMITERS: dict[float, TokenBucket] = {}
_LIMITERS_LOCK = threading.Lock()


def process_limiter(rate: float) -> TokenBucket:
    """The process-wide bucket for ``rate``: every client asking for the same rate shares it."""
    with _LIMITERS_LOCK:
        bucket = _LIMITERS.get(rate)
        if bucket is None:
            bucket = _LIMITERS[rate] = TokenBucket(rate)
        return bucket


class PgTokenBucket:
    """One token bucket for every process that shares the database (the fetcher replicas).

    Same reservation scheme as :class:`TokenBucket`, kept in the ``rate_buckets`` row ``name``: one
    ``INSERT ... ON CONFLICT DO UPDATE`` refills by the time since the last reservation (database
    clock), takes a token on credit and returns the balance; a negative balance is the wait. The row
    lock serialises replicas, so reservations are spaced ``1/rate`` apart cluster-wide. A caller
    cancelled while waiting gives its token back.
    """

    def __init__(self, pool: Any, rate: float, *, name: str = "ncbi", burst: float = 1.0, sleep: Sleep = asyncio.sleep):
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.pool = pool
        self.rate = float(rate)
        self.burst = float(burst)
        self.name = name
        self._sleep = sleep
        self.waited_s = 0.0

    async def reserve(self) -> float:
        """Take one token from the shared row (on credit if need be); the seconds the caller must wait."""
        tokens = await rate_buckets.reserve(self.pool, self.name, self.rate, self.burst)
        wait = 0.0 if tokens >= 0 else -tokens / self.rate
        self.waited_s += wait
        return wait

    async def acquire(self) -> None:
        """Wait until the caller may make one request; a caller cancelled while waiting gives its token back."""
        wait = await self.reserve()
        if wait <= 0:
            return
        try:
            await self._sleep(wait)
        except asyncio.CancelledError:
            try:
                await asyncio.shield(rate_buckets.give_back(self.pool, self.name))
            except Exception:  # giving the token back is a courtesy; the bucket refills anyway
                log.debug("could not return an unused NCBI token", exc_info=True)
            raise


def make_limiter(scope: str, rate: float, pool: Any | None) -> Limiter:
    """The limiter a fetcher uses: the cluster-wide bucket (``scope="cluster"``, needs ``pool``) or this
    process's own."""
    if scope == "cluster":
        if pool is None:
            raise ValueError("the cluster-wide NCBI rate limit needs the database")
        return PgTokenBucket(pool, rate * CLUSTER_SAFETY, name=f"ncbi:{rate:g}")
    return process_limiter(rate)
