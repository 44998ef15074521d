"""A client of openFDA's drug label endpoint (``GET <url>/drug/label.json``).

openFDA answers a search with ``{"meta": {"results": {"skip", "limit", "total"}}, "results": [...]}`` and
pages with ``limit`` (at most 1000) and ``skip`` (at most 25000). Its errors are ``{"error": {"code",
"message"}}``: a search that matches nothing is HTTP 404 ``NOT_FOUND`` (read here as no labels, not as a
failure), a bad search or paging is HTTP 400 (:class:`OpenFdaRefused`, a ``ValueError``: the job fails with
openFDA's message), and the rate limit (240 calls a minute) is HTTP 429 from its gateway. A 429, a 5xx, a
timeout or a connection failure is retried with doubling back-off (at least the ``Retry-After`` it names, up to
``EVIDENTIA_OPENFDA_RETRY_AFTER_MAX_S``); when the retries are spent the call raises
:class:`OpenFdaUnavailable`, a transient error, so the request is retried later rather than dead-lettered.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx

from services.fetcher.ratelimit import Limiter, process_limiter
from shared.kafka.errors import TransientError
from shared.settings import OpenFdaSettings
from shared.text import parse_retry_after

log = logging.getLogger(__name__)

LABEL_PATH = "/drug/label.json"
MAX_LIMIT, MAX_SKIP = 1000, 25_000
Sleep = Callable[[float], Awaitable[None]]


class OpenFdaRefused(ValueError):
    """openFDA refused the request (HTTP 400: a bad search, a page out of range); its message says why."""


class OpenFdaUnavailable(RuntimeError, TransientError):
    """openFDA could not be reached or kept failing (429, 5xx, timeouts) after this call's retries."""


@dataclass(frozen=True)
class LabelPage:
    """One page of a label search: the labels on it and how many the search matches in all."""

    total: int
    labels: list[dict[str, Any]]


def _message(response: httpx.Response) -> str:
    try:
        body = response.json()
    except ValueError:
        return response.text[:300].strip()
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        return f"{err.get('code', '')}: {err.get('message', '')}".strip(": ")
    return response.text[:300].strip()


class OpenFdaClient:
    """Searches openFDA's drug labels, politely (one process-wide rate, retries, ``Retry-After``)."""

    def __init__(
        self,
        settings: OpenFdaSettings,
        *,
        http: httpx.AsyncClient | None = None,
        limiter: Limiter | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.base_url = settings.url.rstrip("/")
        self._own_http = http is None
        self.http = http or httpx.AsyncClient(timeout=settings.timeout_s)
        self.limiter = limiter if limiter is not None else process_limiter(settings.rate_per_s)
        self.sleep = sleep
        self.rng = rng or random.Random()

    async def aclose(self) -> None:
        if self._own_http:
            await self.http.aclose()

    async def search(self, search: str, *, limit: int, skip: int = 0) -> LabelPage:
        """One page of the labels ``search`` (openFDA's search syntax) matches."""
        if not 1 <= limit <= MAX_LIMIT or not 0 <= skip <= MAX_SKIP:
            raise OpenFdaRefused(f"openFDA pages with 1 <= limit <= {MAX_LIMIT} and skip <= {MAX_SKIP}")
        params = {"search": search, "limit": str(limit), "skip": str(skip)}
        key = self.settings.api_key.get_secret_value() if self.settings.api_key is not None else ""
        if key:  # an empty key is none
            params["api_key"] = key
        response = await self._get(params)
        if response.status_code == 404:
            return LabelPage(0, [])
        try:
            body = response.json()
        except ValueError as exc:
            raise OpenFdaUnavailable(f"openFDA answered with a body that is not JSON: {exc}") from exc
        body = body if isinstance(body, dict) else {}
        results = body.get("results")
        meta = body.get("meta")
        counts = meta.get("results") if isinstance(meta, dict) else None
        total = counts.get("total") if isinstance(counts, dict) else None
        labels = [r for r in results if isinstance(r, dict)] if isinstance(results, list) else []
        return LabelPage(total if isinstance(total, int) and total >= 0 else len(labels), labels)

    async def labels(self, search: str, max_results: int) -> list[dict[str, Any]]:
        """Up to ``max_results`` labels ``search`` matches, page by page (``skip``/``limit``)."""
        out: list[dict[str, Any]] = []
        skip = 0
        while len(out) < max_results and skip <= MAX_SKIP:
            limit = min(self.settings.page_size, max_results - len(out), MAX_LIMIT)
            page = await self.search(search, limit=limit, skip=skip)
            out.extend(page.labels)
            skip += len(page.labels)
            if not page.labels or skip >= page.total:
                break
        return out[:max_results]

    async def _get(self, params: dict[str, str]) -> httpx.Response:
        """A 2xx or 404 response; :class:`OpenFdaRefused` for any other 4xx but 429, else retried."""
        problem = ""
        for attempt in range(self.settings.max_retries + 1):
            await self.limiter.acquire()
            retry_after: float | None = None
            try:
                response = await self.http.get(f"{self.base_url}{LABEL_PATH}", params=params)
            except httpx.TimeoutException as exc:
                problem = f"timed out ({type(exc).__name__})"
            except httpx.TransportError as exc:
                problem = f"connection failed ({type(exc).__name__})"
            else:
                status = response.status_code
                if 200 <= status < 300 or status == 404:
                    return response
                if 400 <= status < 500 and status != 429:
                    raise OpenFdaRefused(f"openFDA refused the search (HTTP {status}): {_message(response)}")
                problem = f"HTTP {status} ({_message(response)})"
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                if retry_after is not None and retry_after > self.settings.retry_after_max_s:
                    raise OpenFdaUnavailable(f"openFDA: {problem} with Retry-After {retry_after:.0f}s")
            if attempt >= self.settings.max_retries:
                break
            ceiling = self.settings.backoff_base_s * 2.0**attempt
            delay = max(ceiling / 2 + self.rng.uniform(0, ceiling / 2), retry_after or 0.0)
            log.warning("openFDA call failed, retrying", extra={"problem": problem, "delay_s": delay})
            await self.sleep(delay)
        raise OpenFdaUnavailable(f"openFDA: gave up after {self.settings.max_retries + 1} attempts: {problem}")
