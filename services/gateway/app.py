"""The gateway: Evidentia's HTTP API. It holds no data of its own; it asks the services over Kafka."""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from aiokafka.errors import KafkaError
from fastapi import Depends, FastAPI, HTTPException, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.gateway import admin, security, web, workflows
from services.gateway.answers import AnswerService
from services.gateway.conversations import PgConversationStore
from services.gateway.errors import public_error
from services.gateway.kafka import GatewayKafka
from services.gateway.schemas import (
    IngestAccepted,
    IngestRequest,
    SearchRequest,
    SearchResponse,
)
from shared import metrics, provenance, tracing
from shared.broker import RemoteError, RequestTimeout
from shared.claimcheck import oversized_reason
from shared.db import create_pool
from shared.db.jobs import JobStatus, create_job, job_status
from shared.events import (
    DocumentDeleted,
    DocumentFetched,
    IngestRequested,
    RetrievalRequest,
    TokenUsage,
)
from shared.safety import default_guard
from shared.settings import Settings, get_settings
from shared.topics import DOCUMENTS_FETCHED, INGEST_REQUESTS

log = logging.getLogger(__name__)


class Gateway:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.kafka = GatewayKafka(settings)
        self._pool: asyncpg.Pool | None = None
        self._warm: asyncio.Task[None] | None = None

    async def start(self) -> None:
        # No statement of the gateway outlives the request timeout its own callers are held to.
        self._pool = await create_pool(self.settings.database, caller_timeout_s=self.settings.kafka.request_timeout_s)
        await self.kafka.start()
        # The emergency guard's model loads now, in the background (start-up and readiness do not wait for it;
        # a question asked meanwhile waits for the model, it is never let through unchecked).
        self._warm = asyncio.create_task(asyncio.to_thread(default_guard().warm_up))

    async def stop(self) -> None:
        await self.kafka.stop()
        if self._pool is not None:
            await self._pool.close()

    @property
    def pool(self) -> asyncpg.Pool:
        assert self._pool is not None, "gateway not started"
        return self._pool


_ESCAPED_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


async def refuse_nul_characters(request: Request) -> None:
    """PostgreSQL text cannot hold NUL (U+0000): a JSON body carrying one is refused here, for every route at
    once, with a reason (422) instead of failing later in the database with a 500."""
    if request.method in ("POST", "PUT", "PATCH") and _ESCAPED_NUL.search(await request.body()):
        raise HTTPException(422, "text may not contain NUL (\\u0000) characters")


def _error_headers(body: dict[str, Any]) -> dict[str, str] | None:
    return {"X-Error-Id": body["error_id"]} if "error_id" in body else None


def _error_response(body: dict[str, Any], request: Request) -> JSONResponse:
    headers = _error_headers(body) or {}
    headers.update(tracing.response_headers())
    return JSONResponse({k: v for k, v in body.items() if k != "message"}, status_code=body["status"], headers=headers)


async def check_provenance(pool: asyncpg.Pool, body: IngestRequest) -> None:
    """Inline documents may not stand for an NCBI record (:mod:`shared.provenance`): 422 for ids that contradict
    each other, 409 when an id is stored as a record fetched from NCBI. Nothing of the request is accepted then."""
    problems = [f"{d.document_id}: {why}" for d in body.documents if (why := provenance.inconsistency(d))]
    if problems:
        raise HTTPException(422, "; ".join(problems[:20]))
    claimed = list(dict.fromkeys(i for d in body.documents for i in provenance.claimed_ids(d)))
    taken = await provenance.ncbi_records(pool, claimed)
    if taken:
        raise HTTPException(
            409,
            f"{', '.join(taken[:20])}{' ...' if len(taken) > 20 else ''} {provenance.CONFLICT_REASON}; "
            "nothing of this request was ingested",
        )


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    gateway = Gateway(settings)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await gateway.start()
        try:
            yield
        finally:
            await gateway.stop()

    app = FastAPI(
        title="Evidentia",
        version="0.1.0",
        description="Answers to medical questions from the literature; every claim cites the paper it rests on.",
        lifespan=lifespan,
        dependencies=[Depends(refuse_nul_characters)],
    )
    app.state.gateway = gateway
    answers = AnswerService(settings, lambda: gateway.kafka, PgConversationStore(lambda: gateway.pool))
    app.state.answers = answers
    app.include_router(answers.router)
    app.include_router(web.router)
    app.include_router(admin.router)
    app.include_router(workflows.install(app, settings).router)
    security.install(app, settings.gateway)
    if tracing.enabled():  # set up by the gateway's broker (shared.broker.make_broker) when configured
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(
            app, tracer_provider=tracing.provider(), excluded_urls="/healthz,/readyz,/metrics"
        )

    @app.middleware("http")
    async def observe(request: Request, call_next: Callable[[Request], Awaitable[Response]]) -> Response:
        start = time.perf_counter()
        response = await call_next(request)
        response.headers.update(tracing.response_headers())
        route = request.scope.get("route")
        path = getattr(route, "path", "unmatched")
        metrics.HTTP_REQUESTS.labels(path, request.method, str(response.status_code)).inc()
        metrics.HTTP_LATENCY.labels(path, request.method).observe(time.perf_counter() - start)
        return response

    # Clients get a reason for a 4xx and an error id for a 5xx; the internal detail is logged with that id.
    @app.exception_handler(RequestTimeout)
    async def on_timeout(request: Request, exc: RequestTimeout) -> JSONResponse:
        return _error_response(public_error(504, "RequestTimeout", str(exc)), request)

    @app.exception_handler(RemoteError)
    async def on_remote(request: Request, exc: RemoteError) -> JSONResponse:
        return _error_response(public_error(exc.error.status, exc.error.type, exc.error.message), request)

    @app.exception_handler(KafkaError)
    async def on_kafka(request: Request, exc: KafkaError) -> JSONResponse:
        return _error_response(public_error(503, "BrokerUnavailable", repr(exc)), request)

    @app.exception_handler(asyncpg.PostgresError)
    async def on_postgres(request: Request, exc: asyncpg.PostgresError) -> JSONResponse:
        return _error_response(public_error(503, "DatabaseError", repr(exc), exc=exc), request)

    @app.exception_handler(Exception)
    async def on_unexpected(request: Request, exc: Exception) -> JSONResponse:
        return _error_response(public_error(500, "InternalError", repr(exc), exc=exc), request)

    @app.get("/healthz", tags=["operations"], summary="Liveness")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["operations"], summary="Readiness: Kafka and PostgreSQL reachable")
    async def readyz() -> JSONResponse:
        checks: dict[str, bool] = {}
        try:
            checks["kafka"] = gateway.kafka.started and await gateway.kafka.broker.ping(timeout=3.0)
        except Exception:
            checks["kafka"] = False
        try:
            checks["postgres"] = bool(await gateway.pool.fetchval("SELECT 1"))
        except Exception:
            checks["postgres"] = False
        ok = all(checks.values())
        return JSONResponse({"ready": ok, "checks": checks}, status_code=200 if ok else 503)

    @app.get("/metrics", tags=["operations"], summary="Prometheus metrics", response_class=Response)
    async def prometheus() -> Response:
        return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)

    @app.post(
        "/v1/ingest",
        status_code=202,
        response_model=IngestAccepted,
        tags=["ingestion"],
        summary="Start an ingestion job (query, PMIDs, Bookshelf publisher or inline documents); returns at once",
        dependencies=[Depends(security.require("ingest"))],
        responses={
            403: {"description": "The API key lacks the `ingest` scope"},
            409: {"description": "An inline document claims an id stored as a record fetched from NCBI"},
        },
    )
    async def ingest(body: IngestRequest) -> IngestAccepted:
        if body.documents:
            await check_provenance(gateway.pool, body)
        job_id = uuid.uuid4().hex
        kind = "documents" if body.documents else "query" if body.query else "pmids" if body.pmids else "bookshelf"
        await create_job(gateway.pool, job_id, kind, body.model_dump(mode="json", exclude={"documents"}))
        if body.query or body.pmids or body.bookshelf_publisher:
            event = IngestRequested(
                job_id=job_id,
                query=body.query,
                pmids=[p.strip() for p in body.pmids],
                max_results=body.max_results,
                refresh=body.refresh,
                full_text=body.full_text,
                bookshelf_publisher=body.bookshelf_publisher,
            )
            await gateway.kafka.publish(event, INGEST_REQUESTS, job_id)
        if body.documents:
            from shared.db.jobs import add_job_documents, mark_job, set_stage

            ids = [d.document_id for d in body.documents]
            await add_job_documents(gateway.pool, job_id, ids)
            await set_stage(gateway.pool, ids, "fetched")
            for doc in body.documents:
                fetched = DocumentFetched(
                    document_id=doc.document_id,
                    source=doc.source,
                    source_id=doc.source_id,
                    format="document-json",
                    document=doc,
                    job_id=job_id,
                )
                reason = oversized_reason(len(fetched.model_dump_json().encode()), settings.kafka.max_request_size)
                if reason is not None:  # cannot travel: failed with the reason, the job still completes
                    await set_stage(gateway.pool, [doc.document_id], "failed", reason, force=True)
                    continue
                await gateway.kafka.publish(fetched, DOCUMENTS_FETCHED, doc.document_id)
            if not (body.query or body.pmids or body.bookshelf_publisher):
                await mark_job(gateway.pool, job_id, "discovered")
        return IngestAccepted(job_id=job_id, status_url=f"/v1/ingest/{job_id}")

    @app.delete(
        "/v1/admin/documents/{document_id}",
        status_code=202,
        tags=["administration"],
        summary="Remove a stored document with its chunks and vectors (needs the `admin` scope)",
        dependencies=[Depends(security.require("admin"))],
        responses={403: {"description": "The API key lacks the `admin` scope"}, 404: {"description": "Not stored"}},
    )
    async def delete_document(document_id: str) -> dict[str, str]:
        if "\x00" in document_id:
            raise HTTPException(422, "document ids may not contain NUL characters")
        row = await gateway.pool.fetchrow(
            "SELECT source, source_id, origin FROM documents WHERE document_id = $1", document_id
        )
        if row is None:
            raise HTTPException(404, f"no stored document {document_id}")
        event = DocumentDeleted(document_id=document_id, source=row["source"], source_id=row["source_id"])
        await gateway.kafka.publish(event, DOCUMENTS_FETCHED, document_id)
        return {"document_id": document_id, "origin": str(row["origin"]), "status": "deletion published"}

    @app.get(
        "/v1/ingest/{job_id}",
        response_model=JobStatus,
        tags=["ingestion"],
        summary="Progress of an ingestion job: documents per stage, failures",
    )
    async def ingest_status(job_id: str) -> JobStatus:
        status = await job_status(gateway.pool, job_id)
        if status is None:
            raise HTTPException(404, f"no ingestion job {job_id}")
        return status

    @app.post(
        "/v1/search",
        response_model=SearchResponse,
        tags=["search"],
        summary="Search the literature (dense, lexical or hybrid) with clinical filters",
    )
    async def search(body: SearchRequest) -> SearchResponse:
        reply = await gateway.kafka.retrieve(
            RetrievalRequest(
                query=body.query_text,
                query_form=body.query_form,
                top_k=body.top_k,
                top_n=body.top_n,
                mode=body.mode,
                filters=body.filters,
                ef_search=body.ef_search,
                reranker=body.reranker,
                mmr=body.mmr,
                mmr_lambda=body.mmr_lambda,
            )
        )
        if reply.error is not None:
            error = public_error(reply.error.status or 500, reply.error.type, reply.error.message)
            raise HTTPException(error["status"], error["detail"], headers=_error_headers(error))
        return SearchResponse(
            query=body.query_text,
            hits=reply.hits,
            model=reply.model,
            took_ms=reply.took_ms,
            tokens_used=TokenUsage.total(reply.llm_calls),
            llm_calls=reply.llm_calls,
        )

    return app
