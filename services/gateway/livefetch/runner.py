"""One question's PubMed fetch: search (through the fetcher, the only service that calls NCBI, under the
cluster's one NCBI rate limit), keep the best matches not stored yet, ingest them as an ordinary job
(fetch, parse, embed) and wait for them within the budget.

- The search is cached per normalised question (its terms) for ``EVIDENTIA_WORKFLOW_CACHE_TTL_S`` (5 days) in
  the workflow cache, so the same question does not search NCBI again.
- A query that finds nothing is relaxed (:func:`.query.relaxed_queries`).
- When PubMed cannot be reached (no answer within ``EVIDENTIA_ASK_FETCH_SEARCH_TIMEOUT_S``: NCBI down, no
  network, the rate budget spent; or an NCBI failure) nothing is ingested and the report says why: the
  question is answered from the store without waiting out the budget.
- The wait ends when every new record is embedded (or failed) or ``EVIDENTIA_ASK_FETCH_BUDGET_S`` after the
  fetch began; records still on their way are ``pending`` and serve the next question.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from services.gateway.intelligence.cache import Cache, cache_key
from services.gateway.intelligence.llm import WorkflowLlm
from services.gateway.livefetch.poll import poll_until
from services.gateway.livefetch.query import model_terms, question_terms, relaxed_queries
from services.gateway.schemas.common import FetchMode, FetchReport
from services.gateway.understanding.enhance import QueryEnhancer
from services.gateway.understanding.language import Language
from shared.models import document_id
from shared.settings import Settings
from shared.sources.pubmed import PUBMED

CACHE_NAMESPACE = "ask_fetch_search"
TERMINAL = frozenset({"embedded", "failed", "deleted"})

Progress = Callable[[dict[str, Any]], Awaitable[None]]


async def no_progress(event: dict[str, Any]) -> None:
    return None


class SearchUnavailable(Exception):
    """PubMed could not be searched (the message says why)."""


class PubmedSearch(Protocol):
    """What the fetch needs of the running system (:class:`services.gateway.workflows.backend.GatewayBackend`)."""

    async def search_pubmed(self, term: str, max_ids: int, trace_id: str, timeout_s: float) -> tuple[int, list[str]]:
        """(NCBI's count, the best matches' PMIDs in relevance order); raises :class:`SearchUnavailable`."""
        ...

    async def unstored(self, document_ids: Sequence[str]) -> list[str]:
        """Those of ``document_ids`` neither stored nor on their way through the pipeline, in order."""
        ...

    async def ingest_pmids(self, pmids: Sequence[str], trace_id: str) -> str:
        """Start an ingestion job for ``pmids``; its id."""
        ...

    async def stages(self, document_ids: Sequence[str]) -> dict[str, str]:
        """{document id: pipeline stage} of those with a status."""
        ...


class LiveFetcher:
    def __init__(
        self,
        backend: PubmedSearch,
        settings: Settings,
        cache: Cache,
        llm: WorkflowLlm,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        poll_s: float = 0.25,
    ):
        self.backend = backend
        self.settings = settings
        self.cache = cache
        self.llm = llm
        self.clock = clock
        self.sleep = sleep
        self.poll_s = poll_s

    async def terms(self, question: str, english_question: str, language: Language) -> list[str]:
        """The search terms: the model's (``enhance`` step) with a key, else the English question's content words."""
        if self.llm.available:
            enh = await QueryEnhancer(self.llm, self.cache, ttl_s=self.settings.workflow.cache_ttl_s).enhance(
                question, language, {}
            )
            if enh.method == "llm":
                return model_terms(enh.terms) or question_terms(enh.search_query)
        return question_terms(english_question)

    async def run(
        self,
        terms: list[str],
        trace_id: str,
        mode: FetchMode,
        requested: FetchMode | None,
        reason: str,
        progress: Progress = no_progress,
    ) -> FetchReport:
        start = self.clock()
        deadline = start + self.settings.ask_fetch.budget_s
        report = FetchReport(mode=mode, requested=requested, searched=True, reason=reason)

        def done(why: str | None = None) -> FetchReport:
            if why:
                report.reason = f"{reason}; {why}"
            report.waited_ms = round((self.clock() - start) * 1000, 1)
            return report

        if not terms:
            report.searched = False
            return done("the question has no searchable terms")
        await progress({"stage": "searching", "query": relaxed_queries(terms)[0]})
        key = cache_key(" ".join(t.lower() for t in terms))
        found = await self.cache.get(CACHE_NAMESPACE, key)
        if isinstance(found, dict):
            report.cached = True
        else:
            try:
                found = await self._search(terms, trace_id, deadline)
            except SearchUnavailable as exc:
                report.searched = False
                await progress({"stage": "unavailable", "reason": str(exc)})
                return done(f"answered from the store: {exc}")
            await self.cache.put(CACHE_NAMESPACE, key, found, self.settings.workflow.cache_ttl_s)
        report.query, report.queries_tried, report.found = found["query"], found["tried"], found["count"]
        ids = [document_id(PUBMED.name, p) for p in found["ids"]]
        unstored = await self.backend.unstored(ids) if ids else []
        new = unstored[: self.settings.ask_fetch.max_documents]
        report.already_stored = len(ids) - len(unstored)
        await progress({"stage": "found", "found": report.found, "query": report.query, "new": len(new)})
        if not new:
            return done("no new records to fetch" if ids else "PubMed found nothing")
        report.job_id = await self.backend.ingest_pmids([i.split(":", 1)[1] for i in new], trace_id)
        await self._wait(new, deadline, report, progress)
        return done()

    async def _search(self, terms: list[str], trace_id: str, deadline: float) -> dict[str, Any]:
        """The first relaxed query that finds records (the last one tried when none does)."""
        cap = self.settings.ask_fetch.max_documents * 2  # room for best matches already stored
        tried: list[str] = []
        count, ids = 0, list[str]()
        for q in relaxed_queries(terms):
            left = deadline - self.clock()
            if tried and left <= 0:
                break
            timeout = max(0.1, min(self.settings.ask_fetch.search_timeout_s, left))
            tried.append(q)
            count, ids = await self.backend.search_pubmed(q, cap, trace_id, timeout)
            if ids:
                break
        return {"query": tried[-1], "tried": tried, "count": count, "ids": ids}

    async def _wait(self, new: list[str], deadline: float, report: FetchReport, progress: Progress) -> None:
        last = -1
        stages: dict[str, str] = {}

        async def settled() -> bool:
            nonlocal last, stages
            stages = await self.backend.stages(new)
            embedded = sum(1 for d in new if stages.get(d) == "embedded")
            if embedded != last:
                await progress({"stage": "embedded", "embedded": embedded, "of": len(new), "job_id": report.job_id})
                last = embedded
            return all(stages.get(d) in TERMINAL for d in new)

        await poll_until(settled, deadline, clock=self.clock, sleep=self.sleep, interval_s=self.poll_s)
        report.ingested = [d for d in new if stages.get(d) == "embedded"]
        report.failed = [d for d in new if stages.get(d) in ("failed", "deleted")]
        report.pending = [d for d in new if stages.get(d) not in TERMINAL]
