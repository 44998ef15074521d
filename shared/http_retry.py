"""Retries of HTTP calls: how many attempts, how long between them, and the server's ``Retry-After`` honoured.

One owner for the loop that the NCBI clients (E-utilities, Bookshelf) and the CLI's gateway client run. An
attempt returns its result, raises an error that is not to be retried, or raises :class:`RetryableResponse`
(a status the server may answer differently later, a timeout, a dropped connection), carrying the seconds the
response's ``Retry-After`` asked for, if any. Between attempts the wait is :meth:`RetryWait.delay`: the caller's
back-off for that retry, never shorter than ``Retry-After`` (itself capped), optionally spread by jitter and
capped. The loop is tenacity's; when the attempts or the time run out, the last :class:`RetryableResponse` is
raised for the caller to turn into its own error.

Kafka deliveries are not retried here: the consumers' retry pauses their partitions (:mod:`shared.kafka`).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from tenacity import AsyncRetrying, RetryCallState, Retrying, retry_if_exception_type

from shared.text import parse_retry_after

T = TypeVar("T")

#: Told before each wait: the retry's number (1 for the first retry), what failed, and the seconds to wait.
BeforeWait = Callable[[int, "RetryableResponse", float], None]


class RetryableResponse(Exception):
    """An attempt that may succeed if made again: ``problem`` says why it failed, ``retry_after`` is the wait the
    server asked for (seconds, None when it named none), ``response`` the response when there was one."""

    def __init__(
        self, problem: str, *, status: int | None = None, retry_after: float | None = None, response: Any = None
    ) -> None:
        super().__init__(problem)
        self.problem = problem
        self.status = status
        self.retry_after = retry_after
        self.response = response

    @classmethod
    def from_headers(
        cls, problem: str, headers: Mapping[str, str], *, status: int | None = None, response: Any = None
    ) -> RetryableResponse:
        """The failure of a response whose headers may carry ``Retry-After`` (seconds or an HTTP date)."""
        return cls(problem, status=status, retry_after=parse_retry_after(headers.get("Retry-After")), response=response)


@dataclass(frozen=True)
class RetryWait:
    """The wait before retry ``n`` (0 for the first): ``max(backoff(n), Retry-After capped at
    retry_after_max_s)``, times ``1 + U(0, jitter)``, at most ``max(Retry-After, max_wait_s)``."""

    backoff: Callable[[int], float]
    retry_after_max_s: float = math.inf
    jitter: float = 0.0
    max_wait_s: float = math.inf
    rng: random.Random = field(default_factory=random.Random)

    def delay(self, retry: int, retry_after: float | None) -> float:
        asked = min(retry_after or 0.0, self.retry_after_max_s)
        wait = max(asked, self.backoff(retry))
        if self.jitter:
            wait *= 1.0 + self.rng.uniform(0.0, self.jitter)
        return min(wait, max(asked, self.max_wait_s))


def _failure(state: RetryCallState) -> RetryableResponse:
    assert state.outcome is not None
    exc = state.outcome.exception()
    assert isinstance(exc, RetryableResponse)
    return exc


def _settings(
    wait: RetryWait,
    max_attempts: int | None,
    deadline: float | None,
    clock: Callable[[], float],
    before_wait: BeforeWait | None,
    give_up: Callable[[], bool] | None,
) -> dict[str, Any]:
    """tenacity's arguments: retry on :class:`RetryableResponse` only; stop after ``max_attempts`` (None: no
    count), when the next wait would end past ``deadline`` (a ``clock`` time; None: no deadline), or when
    ``give_up()``, asked after each failure, says so."""

    def stop(state: RetryCallState) -> bool:
        if max_attempts is not None and state.attempt_number >= max_attempts:
            return True
        if give_up is not None and give_up():
            return True
        return deadline is not None and clock() + (state.upcoming_sleep or 0.0) > deadline

    def before_sleep(state: RetryCallState) -> None:
        if before_wait is not None:
            before_wait(state.attempt_number, _failure(state), state.upcoming_sleep)

    return {
        "retry": retry_if_exception_type(RetryableResponse),
        "wait": lambda state: wait.delay(state.attempt_number - 1, _failure(state).retry_after),
        "stop": stop,
        "before_sleep": before_sleep,
        "reraise": True,
    }


async def retry_async(
    attempt: Callable[[], Awaitable[T]],
    *,
    wait: RetryWait,
    sleep: Callable[[float], Awaitable[None]],
    max_attempts: int | None,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    before_wait: BeforeWait | None = None,
    give_up: Callable[[], bool] | None = None,
) -> T:
    """``await attempt()`` until it returns, retrying a :class:`RetryableResponse` as :func:`_settings` says."""
    retrying = AsyncRetrying(sleep=sleep, **_settings(wait, max_attempts, deadline, clock, before_wait, give_up))
    return await retrying(attempt)


def retry_sync(
    attempt: Callable[[], T],
    *,
    wait: RetryWait,
    sleep: Callable[[float], None] = time.sleep,
    max_attempts: int | None,
    deadline: float | None = None,
    clock: Callable[[], float] = time.monotonic,
    before_wait: BeforeWait | None = None,
    give_up: Callable[[], bool] | None = None,
) -> T:
    """``attempt()`` until it returns, retrying a :class:`RetryableResponse` as :func:`_settings` says."""
    settings = _settings(wait, max_attempts, deadline, clock, before_wait, give_up)
    return Retrying(sleep=sleep, **settings)(attempt)
