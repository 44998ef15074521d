"""Operations: liveness, readiness (Kafka and PostgreSQL reachable, the emergency guard loaded) and Prometheus
metrics."""

from __future__ import annotations

from fastapi import APIRouter, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from services.gateway.deps import GatewayDep
from services.gateway.store.documents import database_ready
from shared import metrics

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: Kafka and PostgreSQL reachable, the emergency guard loaded")
async def readyz(gateway: GatewayDep) -> JSONResponse:
    # The guard's model loads after start-up (~15 CPU-s on a laptop): until it has, questions would wait for it
    # and a first ingest would share the cores with it, so the gateway is not ready yet.
    checks: dict[str, bool] = {"guard": gateway.warmed_up}
    try:
        checks["kafka"] = gateway.kafka.started and await gateway.kafka.broker.ping(timeout=3.0)
    except Exception:
        checks["kafka"] = False
    try:
        checks["postgres"] = await database_ready(gateway.pool)
    except Exception:
        checks["postgres"] = False
    ok = all(checks.values())
    return JSONResponse({"ready": ok, "checks": checks}, status_code=200 if ok else 503)


@router.get("/metrics", summary="Prometheus metrics", response_class=Response)
async def prometheus() -> Response:
    return Response(generate_latest(metrics.registry), media_type=CONTENT_TYPE_LATEST)
