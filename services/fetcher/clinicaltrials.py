"""The ClinicalTrials.gov API v2 client: searches (paged by token) and study records, politely.

``GET {base}studies`` searches (``query.cond``, ``query.intr``, ``query.term``; ``filter.ids`` for a list of NCT
numbers) and pages with ``pageSize`` and the ``nextPageToken`` of each answer, sent back as ``pageToken``. A
study comes as JSON (``protocolSection``, ``resultsSection`` when results are posted, ``hasResults``); it is
kept as the registry's text, so the parser reads what the registry wrote.

Politeness: every call takes a token from the fetcher's bucket for this registry (``rate_per_min``, shared by
the replicas with the cluster scope); 429 and 5xx answers and timeouts are retried with a doubling, jittered
back-off, never shorter than the answer's ``Retry-After`` and failing at once when that is longer than we
wait. A 400 is the query's fault and is reported with the registry's message; it is never retried.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import httpx

from services.fetcher.ratelimit import Limiter
from shared.kafka.errors import TransientError
from shared.settings import ClinicalTrialsSettings
from shared.text import parse_retry_after

log = logging.getLogger(__name__)

Sleep = Callable[[float], Awaitable[None]]
#: The field a discovery search asks for: the NCT number alone (the records are fetched after, in batches).
ID_FIELD = "protocolSection.identificationModule.nctId"


class ClinicalTrialsQueryError(ValueError):
    """The registry refused the request (HTTP 4xx other than 429): a bad query or parameter; the reason is its."""


class ClinicalTrialsUnavailable(RuntimeError, TransientError):
    """The registry could not be reached or kept failing (429, 5xx, timeouts, a ``Retry-After`` too long)."""


@dataclass
class StudySearch:
    """What to search: ``term`` (``query.term``), ``condition`` (``query.cond``), ``intervention`` (``query.intr``)."""

    term: str | None = None
    condition: str | None = None
    intervention: str | None = None

    def params(self) -> dict[str, str]:
        named = {"query.term": self.term, "query.cond": self.condition, "query.intr": self.intervention}
        return {k: v for k, v in named.items() if v}


@dataclass
class StudyBatch:
    """The studies one call returned (each its JSON text, by NCT number) and the NCT numbers it did not."""

    studies: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)


def nct_of(study: Any) -> str | None:
    """A study record's NCT number, or None when it has none where the API puts it."""
    try:
        value = study["protocolSection"]["identificationModule"]["nctId"]
    except (KeyError, TypeError):
        return None
    return value.strip().upper() if isinstance(value, str) and value.strip() else None


class ClinicalTrialsClient:
    """The registry's ``studies`` endpoint behind the fetcher's limiter and the retry rule above."""

    def __init__(
        self,
        settings: ClinicalTrialsSettings,
        *,
        limiter: Limiter,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self.settings = settings
        self.limiter = limiter
        self.sleep = sleep
        self.rng = rng or random.Random()
        self.http = httpx.AsyncClient(
            base_url=settings.base_url,
            timeout=settings.timeout_s,
            transport=transport,
            headers={"Accept": "application/json", "User-Agent": "evidentia (ClinicalTrials.gov API v2 client)"},
        )

    async def aclose(self) -> None:
        await self.http.aclose()

    async def get_json(self, path: str, params: dict[str, str]) -> Any:
        """One GET with the limiter and retries; its JSON body."""
        s = self.settings
        problem = ""
        for attempt in range(s.max_retries + 1):
            await self.limiter.acquire()
            retry_after: float | None = None
            try:
                response = await self.http.get(path, params=params)
            except httpx.TimeoutException as exc:
                problem = f"timed out ({type(exc).__name__})"
            except httpx.TransportError as exc:
                problem = f"connection failed: {exc}"
            else:
                status = response.status_code
                if 200 <= status < 300:
                    try:
                        return response.json()
                    except ValueError as exc:
                        raise ClinicalTrialsUnavailable(f"studies: HTTP {status} with a body that is not JSON") from exc
                if status != 429 and status < 500:
                    raise ClinicalTrialsQueryError(
                        f"ClinicalTrials.gov refused the request (HTTP {status}): {_reason(response)}"
                    )
                problem = f"HTTP {status}"
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                if retry_after is not None and retry_after > s.retry_after_max_s:
                    raise ClinicalTrialsUnavailable(
                        f"studies: HTTP {status} with Retry-After {retry_after:.0f}s "
                        f"(over the {s.retry_after_max_s:.0f}s we wait)"
                    )
            if attempt >= s.max_retries:
                break
            delay = min(s.backoff_max_s, s.backoff_base_s * 2**attempt) * (0.5 + self.rng.random() / 2)
            if retry_after is not None:
                delay = max(delay, retry_after)
            log.warning("ClinicalTrials.gov call failed, retrying", extra={"problem": problem, "delay_s": delay})
            await self.sleep(delay)
        raise ClinicalTrialsUnavailable(f"studies: gave up after {s.max_retries + 1} attempts: {problem}")

    async def search(self, query: StudySearch, max_results: int) -> list[str]:
        """The NCT numbers a search finds, in the registry's order, at most ``max_results``, page by page."""
        found: list[str] = []
        token: str | None = None
        while len(found) < max_results:
            params = {
                **query.params(),
                "fields": ID_FIELD,
                "pageSize": str(min(self.settings.page_size, max_results - len(found))),
            }
            if token:
                params["pageToken"] = token
            page = await self.get_json("studies", params)
            studies = page.get("studies") if isinstance(page, dict) else None
            if not isinstance(studies, list):
                raise ClinicalTrialsUnavailable("studies: an answer without a `studies` list")
            for study in studies:
                nct = nct_of(study)
                if nct is not None and nct not in found:
                    found.append(nct)
            token = page.get("nextPageToken") if isinstance(page.get("nextPageToken"), str) else None
            if not token or not studies:
                break
        return found[:max_results]

    async def studies(self, nct_ids: Sequence[str]) -> AsyncIterator[StudyBatch]:
        """The records of ``nct_ids``, one batch per call (``filter.ids``, at most ``page_size`` a call)."""
        size = self.settings.page_size
        for start in range(0, len(nct_ids), size):
            wanted = list(nct_ids[start : start + size])
            page = await self.get_json("studies", {"filter.ids": ",".join(wanted), "pageSize": str(len(wanted))})
            studies = page.get("studies") if isinstance(page, dict) else None
            if not isinstance(studies, list):
                raise ClinicalTrialsUnavailable("studies: an answer without a `studies` list")
            batch = StudyBatch()
            for study in studies:
                nct = nct_of(study)
                if nct is None or nct not in wanted:
                    continue
                text = json.dumps(study, ensure_ascii=False)
                if len(text.encode()) > self.settings.max_study_bytes:
                    batch.refused[nct] = f"record over {self.settings.max_study_bytes} bytes"
                    continue
                batch.studies[nct] = text
            batch.missing = [n for n in wanted if n not in batch.studies and n not in batch.refused]
            yield batch


def _reason(response: httpx.Response) -> str:
    """The registry's message for a refused request: the JSON ``message`` when it sends one, else its text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:300].strip() or response.reason_phrase
    message = body.get("message") if isinstance(body, dict) else None
    if isinstance(message, str):
        return message[:300]
    return response.text[:300].strip()
