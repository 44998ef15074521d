"""The gateway: Evidentia's HTTP API. It holds no data of its own; it asks the services over Kafka.

:func:`create_app` builds the process's state (:class:`~services.gateway.runtime.Gateway`), includes one
router per concern (:mod:`services.gateway.routes`; each takes its state through
:mod:`services.gateway.deps`) and adds the middleware and the exception handlers.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from aiokafka.errors import KafkaError
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from services.gateway import security
from services.gateway.errors import error_headers, public_error
from services.gateway.routes import admin, ask, conversations, ingest, ops, search, web, workflows
from services.gateway.runtime import Gateway
from shared import metrics, tracing
from shared.kafka.errors import is_transient
from shared.kafka.reply_client import RemoteError, RequestTimeout
from shared.settings import Settings, get_settings

log = logging.getLogger(__name__)

ROUTERS = (ask, conversations, web, admin, workflows, ops, ingest, search)


_ESCAPED_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")


async def refuse_nul_characters(request: Request) -> None:
    """PostgreSQL text cannot hold NUL (U+0000): a JSON body carrying one is refused here, for every route at
    once, with a reason (422) instead of failing later in the database with a 500."""
    if request.method in ("POST", "PUT", "PATCH") and _ESCAPED_NUL.search(await request.body()):
        raise HTTPException(422, "text may not contain NUL (\\u0000) characters")


class Observe:
    """Every HTTP response counted and timed by route (to its first byte, as a client waits for a stream's
    head), with the trace headers added. Plain ASGI: a ``@app.middleware("http")`` function runs the app in a
    task of its own, with memory streams between, on every request."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()

        async def observed(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message).update(tracing.response_headers())
                path = getattr(scope.get("route"), "path", "unmatched")
                metrics.HTTP_REQUESTS.labels(path, scope["method"], str(message["status"])).inc()
                metrics.HTTP_LATENCY.labels(path, scope["method"]).observe(time.perf_counter() - start)
            await send(message)

        await self.app(scope, receive, observed)


def _error_response(body: dict[str, Any], request: Request) -> JSONResponse:
    headers = error_headers(body) or {}
    headers.update(tracing.response_headers())
    return JSONResponse({k: v for k, v in body.items() if k != "message"}, status_code=body["status"], headers=headers)


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
    app.state.gateway = gateway  # read by services.gateway.deps
    for module in ROUTERS:
        app.include_router(module.router)
    security.install(app, settings.gateway, gateway.rate_limit)
    if tracing.enabled():  # set up by the gateway's broker (shared.kafka.broker.make_broker) when configured
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor

        FastAPIInstrumentor.instrument_app(
            app, tracer_provider=tracing.provider(), excluded_urls="/healthz,/readyz,/metrics"
        )

    app.add_middleware(Observe)

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
        if is_transient(exc):  # an outage (a closed database connection, no primary mid-switchover): try again
            return _error_response(public_error(503, "BackingServiceUnavailable", repr(exc), exc=exc), request)
        return _error_response(public_error(500, "InternalError", repr(exc), exc=exc), request)

    return app
