"""How every consumer service is built and run: one FastStream app with /metrics, /healthz, /readyz.

``make_app`` wraps a broker in ``AsgiFastStream`` so the same process serves Prometheus metrics and
Kubernetes probes next to its consumers; ``run_app`` runs it under uvicorn. ``/healthz`` (liveness)
answers while the process's event loop is alive (and the service's own ``live()`` check, if it has one,
passes); ``/readyz`` answers 204 only when the broker is connected and the service's own readiness check
(database, model) passes; ``/health`` is for people: JSON with the service's name and what it reports of
itself (the embedder: its model, device, provider and precision). A service whose start hook fails exits
with uvicorn's start-up failure status (3).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import uvicorn
from faststream.asgi import AsgiFastStream, AsgiResponse, get
from faststream.asgi.factories import make_ping_asgi
from faststream.kafka import KafkaBroker
from prometheus_client import make_asgi_app

from shared import metrics
from shared.kafka.broker import make_broker
from shared.logs import configure_logging
from shared.registry import DEFAULT_PORTS as DEFAULT_PORTS
from shared.settings import Settings, get_settings

log = logging.getLogger(__name__)


Hook = Callable[[], Awaitable[Any]]
ReadyCheck = Callable[[], Awaitable[bool]]
Details = Callable[[], Mapping[str, Any]]


class ServiceState(Protocol):
    """What a consumer service keeps between events: started and stopped with the app, asked by /readyz."""

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    async def ready(self) -> bool: ...


S = TypeVar("S", bound=ServiceState)


def service_app(
    name: str,
    state_class: Callable[[Settings], S],
    register: Callable[[KafkaBroker, S], None],
    description: str,
    details: Callable[[S], Mapping[str, Any]] | None = None,
) -> AsgiFastStream:
    """The one way a consumer service is wired: settings -> broker -> state -> handlers -> app with probes.

    Takes the service's name, its state class (built from the settings), the function that subscribes its
    handlers, the description shown in its AsyncAPI document, and optionally what ``/health`` reports of
    the state; returns the ASGI app ``run_app`` serves.
    """
    settings = get_settings()
    broker = make_broker(name, settings)
    state = state_class(settings)
    register(broker, state)
    return make_app(
        name,
        broker,
        on_startup=[state.start],
        on_shutdown=[state.stop],
        ready=state.ready,
        live=getattr(state, "live", None),
        description=description,
        details=(lambda: details(state)) if details is not None else None,
    )


def make_app(
    name: str,
    broker: KafkaBroker,
    *,
    on_startup: Sequence[Hook] = (),
    after_startup: Sequence[Hook] = (),
    on_shutdown: Sequence[Hook] = (),
    ready: ReadyCheck | None = None,
    live: ReadyCheck | None = None,
    description: str = "",
    details: Details | None = None,
) -> AsgiFastStream:
    @get(include_in_schema=False)
    async def healthz(scope: Any) -> AsgiResponse:
        if live is not None and not await live():  # e.g. the embedder's model broken for minutes: restart me
            return AsgiResponse(b"not live", 503)
        return AsgiResponse(b"ok", 200)

    @get(include_in_schema=False)
    async def health(scope: Any) -> AsgiResponse:
        body = {"service": name, "status": "ok", **(details() if details is not None else {})}
        return AsgiResponse(json.dumps(body).encode(), 200, headers={"content-type": "application/json"})

    broker_ping = make_ping_asgi(broker, timeout=5.0, include_in_schema=False)

    @get(include_in_schema=False)
    async def readyz(scope: Any) -> AsgiResponse:
        try:
            ok = await broker.ping(timeout=5.0) and (ready is None or await ready())
        except Exception:  # any failure of a dependency means "not ready", never a crash
            log.warning("readiness check failed", exc_info=True)
            ok = False
        # A 204 has no body: sending one made uvicorn fail every successful probe
        # ("Too much data for declared Content-Length").
        return AsgiResponse(b"", 204) if ok else AsgiResponse(b"not ready", 503)

    from faststream.specification import AsyncAPI

    return AsgiFastStream(
        broker,
        asgi_routes=[
            ("/metrics", make_asgi_app(metrics.registry)),
            ("/healthz", healthz),
            ("/health", health),
            ("/readyz", readyz),
            ("/ping", broker_ping),
        ],
        on_startup=list(on_startup),
        after_startup=list(after_startup),
        on_shutdown=list(on_shutdown),
        specification=AsyncAPI(title=f"Evidentia {name}", version="1.0.0", description=description),
        asyncapi_path="/docs/asyncapi",
    )


def run_app(name: str, app: AsgiFastStream) -> None:
    """Run a service until SIGTERM/SIGINT: consumers, metrics and probes in one process."""
    settings = get_settings()
    configure_logging(name, settings.service.log_level, settings.service.log_format)
    port = settings.service.metrics_port or DEFAULT_PORTS.get(name, 9100)
    host = settings.service.probe_host
    config = uvicorn.Config(app, host=host, port=port, log_config=None, access_log=False, lifespan="on")
    log.info("starting service", extra={"host": host, "port": port})
    asyncio.run(uvicorn.Server(config).serve())
