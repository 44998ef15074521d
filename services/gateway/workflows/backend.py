"""What the workflows need from the running system (:class:`WorkflowBackend`) and the running gateway's
implementation of it (:class:`GatewayBackend`): retrieval and synthesis over Kafka request/reply, PubMed hit
counts through the fetcher (``ncbi.requests``: the gateway never calls NCBI), ingestion jobs (PubMed
searches, or a source's own request) through ``ingest.requests``, job states and MeSH headings in PostgreSQL
(:mod:`services.gateway.store`); and for ``/v1/ask``'s live fetch (:mod:`services.gateway.livefetch`) PubMed's
best matches, which of them are not stored yet, an ingestion job of PMIDs and the documents' pipeline stages;
and for the drug interaction check's question-time fetch an ingestion job of FDA labels by drug name.

:class:`MeteredBackend` adds the Claude calls the retriever and synthesizer made (they come back in their
replies) to the current answer's ledger, so a workflow's ``llm_calls`` counts them.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import asyncpg

from services.gateway.kafka import GatewayKafka
from services.gateway.livefetch.runner import SearchUnavailable
from services.gateway.store import documents as documents_store
from shared.db import jobs as jobs_store
from shared.db.jobs import JobStatus, job_status
from shared.events import (
    IngestRequested,
    NcbiCountReply,
    NcbiCountRequest,
    RetrievalReply,
    RetrievalRequest,
    SourceRequest,
    SynthesisReply,
    SynthesisRequest,
    ncbi_sources,
)
from shared.ingestion import submit_documents
from shared.kafka.reply_client import RemoteError, RequestTimeout
from shared.kafka.topics import NCBI_REQUESTS
from shared.llm import absorb

log = logging.getLogger(__name__)


class WorkflowBackend(Protocol):
    """What the workflows need from the running system."""

    async def retrieve(self, request: RetrievalRequest) -> RetrievalReply: ...

    async def synthesize(self, request: SynthesisRequest) -> SynthesisReply: ...

    async def count(self, term: str, trace_id: str) -> int | None: ...

    async def ingest(self, query: str, max_results: int, trace_id: str) -> str: ...

    async def ingest_source(self, source: SourceRequest, max_results: int, trace_id: str) -> str: ...

    async def job(self, job_id: str) -> JobStatus | None: ...

    async def mesh_vocabulary(self) -> dict[str, int]: ...


class MeteredBackend:
    """A backend whose replies' Claude calls (``llm_calls``) go to the current usage ledger."""

    def __init__(self, inner: WorkflowBackend):
        self.inner = inner

    async def retrieve(self, request: RetrievalRequest) -> RetrievalReply:
        reply = await self.inner.retrieve(request)
        absorb(reply.llm_calls)
        return reply

    async def synthesize(self, request: SynthesisRequest) -> SynthesisReply:
        reply = await self.inner.synthesize(request)
        absorb(reply.llm_calls)
        return reply

    async def count(self, term: str, trace_id: str) -> int | None:
        return await self.inner.count(term, trace_id)

    async def ingest(self, query: str, max_results: int, trace_id: str) -> str:
        return await self.inner.ingest(query, max_results, trace_id)

    async def ingest_source(self, source: SourceRequest, max_results: int, trace_id: str) -> str:
        return await self.inner.ingest_source(source, max_results, trace_id)

    async def job(self, job_id: str) -> JobStatus | None:
        return await self.inner.job(job_id)

    async def mesh_vocabulary(self) -> dict[str, int]:
        return await self.inner.mesh_vocabulary()


class GatewayBackend:
    """The backend of the running gateway: its Kafka client and its PostgreSQL pool (``pool`` gives the pool
    of the started gateway). The MeSH vocabulary is read again after ``mesh_ttl_s``."""

    def __init__(self, kafka: GatewayKafka, pool: Callable[[], asyncpg.Pool], mesh_ttl_s: float = 600.0):
        self.kafka = kafka
        self._pool = pool
        self._mesh: tuple[float, dict[str, int]] | None = None
        self.mesh_ttl_s = mesh_ttl_s

    @property
    def pool(self) -> asyncpg.Pool:
        return self._pool()

    async def retrieve(self, request: RetrievalRequest) -> RetrievalReply:
        return await self.kafka.retrieve(request)

    async def synthesize(self, request: SynthesisRequest) -> SynthesisReply:
        return await self.kafka.synthesize(request)

    async def count(self, term: str, trace_id: str) -> int | None:
        try:
            reply: NcbiCountReply = await self.kafka.replies.request(
                NCBI_REQUESTS,
                NcbiCountRequest(trace_id=trace_id, term=term),
                NcbiCountReply,
                self.kafka.settings.kafka.request_timeout_s,
            )
        except (RemoteError, RequestTimeout) as exc:
            log.warning("PubMed count unavailable", extra={"term": term, "error": str(exc)[:300]})
            return None
        return reply.count

    async def _submit(
        self, kind: str, params: dict[str, Any], sources: list[SourceRequest], max_results: int, trace_id: str
    ) -> str:
        """One ingestion job of ``sources`` (recorded with ``kind`` and ``params``, as ``POST /v1/ingest`` records
        its jobs); its id."""
        job_id = uuid.uuid4().hex
        await submit_documents(
            self.pool,
            self.kafka.publish,
            self.kafka.settings.kafka,
            job_id=job_id,
            kind=kind,
            params=params,
            request=IngestRequested(trace_id=trace_id, job_id=job_id, sources=sources, max_results=max_results),
        )
        return job_id

    async def ingest(self, query: str, max_results: int, trace_id: str) -> str:
        params = {"query": query, "max_results": max_results, "workflow": "evidence"}
        return await self._submit("query", params, ncbi_sources(query=query), max_results, trace_id)

    async def ingest_source(self, source: SourceRequest, max_results: int, trace_id: str) -> str:
        """One ingestion job at a source other than PubMed (the source-neutral request ``POST /v1/ingest`` sends
        for it), e.g. ClinicalTrials.gov by condition and intervention."""
        params = {
            "source": source.source,
            "query": source.query,
            **source.options,
            "max_results": max_results,
            "workflow": "evidence",
        }
        return await self._submit("query", params, [source], max_results, trace_id)

    async def job(self, job_id: str) -> JobStatus | None:
        return await job_status(self.pool, job_id)

    async def search_pubmed(self, term: str, max_ids: int, trace_id: str, timeout_s: float) -> tuple[int, list[str]]:
        """(count, best PMIDs in relevance order) of ``term``; a term NCBI refuses finds nothing; no reply within
        ``timeout_s`` or an NCBI failure raises :class:`SearchUnavailable` with the reason."""
        try:
            reply: NcbiCountReply = await self.kafka.replies.request(
                NCBI_REQUESTS,
                NcbiCountRequest(trace_id=trace_id, term=term, max_ids=max_ids),
                NcbiCountReply,
                timeout_s,
            )
        except RequestTimeout as exc:
            raise SearchUnavailable(
                f"PubMed did not answer within {timeout_s:g} s (NCBI unreachable or down, or the cluster's NCBI rate "
                "budget spent)"
            ) from exc
        except RemoteError as exc:
            if exc.error.status == 422:
                return 0, []
            raise SearchUnavailable(f"PubMed could not be searched: {exc.error.message[:300]}") from exc
        if reply.error is not None:
            if reply.error.status == 422:
                return 0, []
            raise SearchUnavailable(f"PubMed could not be searched: {reply.error.message[:300]}")
        return reply.count, reply.ids

    async def unstored(self, document_ids: Sequence[str]) -> list[str]:
        return await documents_store.unknown_documents(self.pool, document_ids)

    async def ingest_pmids(self, pmids: Sequence[str], trace_id: str) -> str:
        params = {"pmids": list(pmids), "workflow": "ask"}
        return await self._submit("pmids", params, ncbi_sources(pmids=pmids), max(1, len(pmids)), trace_id)

    async def stages(self, document_ids: Sequence[str]) -> dict[str, str]:
        return await jobs_store.stages(self.pool, document_ids)

    async def ingest_labels(self, drugs: Sequence[str], per_drug: int, trace_id: str) -> str:
        """One ingestion job of the FDA labels of ``drugs`` (by name, ``per_drug`` labels each) for the drug
        interaction check (:mod:`services.gateway.livefetch.labels`)."""
        sources = [SourceRequest(source="fda_label", query=d) for d in drugs]
        params = {"source": "fda_label", "drugs": list(drugs), "max_results": per_drug, "workflow": "interaction"}
        return await self._submit("query", params, sources, per_drug, trace_id)

    async def mesh_vocabulary(self) -> dict[str, int]:
        now = time.monotonic()
        if self._mesh is not None and now - self._mesh[0] < self.mesh_ttl_s:
            return self._mesh[1]
        vocab = await documents_store.mesh_vocabulary(self.pool)
        self._mesh = (now, vocab)
        return vocab
