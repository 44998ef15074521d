"""``/v1/admin/dlq``: the dead letters of a topic over HTTP, the same as ``evidentia dlq`` (shared/dlq.py).

- ``GET /v1/admin/dlq/{topic}``: the letters (summaries, oldest first; ``?limit=``);
- ``GET /v1/admin/dlq/{topic}/{ref}``: one whole letter (``ref`` = ``PARTITION:OFFSET`` or ``OFFSET``);
- ``POST /v1/admin/dlq/{topic}/replay``: send chosen letters (``refs``, or ``all`` with an optional
  ``error_type``) back to their topic; ``force`` replays letters replayed before.

Access: a key with the ``admin`` scope when keys are configured (403 naming the scope otherwise); with
authentication off (no keys), only clients on this host (loopback), because replaying events is not
something an anonymous network client may do.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from pydantic import BaseModel, Field

from services.gateway import security
from shared import dlq

router = APIRouter(prefix="/v1/admin/dlq", tags=["admin"])


_admin_scope = security.require("admin")


async def require_admin(request: Request) -> None:
    gateway = request.app.state.gateway
    if gateway.settings.gateway.key_hashes():
        await _admin_scope(request)  # the API guard has checked the key; it must carry the admin scope
        return
    host = request.client.host if request.client else ""
    try:
        local = ipaddress.ip_address(host).is_loopback
    except ValueError:
        local = host in ("localhost", "testclient")
    if not local:
        raise HTTPException(
            403, "admin routes need API keys configured (EVIDENTIA_GATEWAY_API_KEY_HASHES), or a local client"
        )


class ReplayRequest(BaseModel):
    refs: list[str] = Field(default_factory=list, description="Letters to replay: PARTITION:OFFSET or OFFSET.")
    all: bool = Field(False, description="Every letter not replayed yet (or, with force, every letter).")
    error_type: str | None = Field(None, description="With all: only letters of this error type.")
    force: bool = Field(False, description="Replay letters that were replayed before, too.")


class ReplayResult(BaseModel):
    ref: str
    topic: str
    status: str
    detail: str = ""


@router.get("/{topic}", dependencies=[Depends(require_admin)])
async def list_letters(request: Request, topic: str, limit: int = Query(100, ge=1, le=10_000)) -> dict[str, Any]:
    gateway = request.app.state.gateway
    name = dlq.dlq_topic_of(topic)
    views = await dlq.read_letters(gateway.settings.kafka.bootstrap, name, limit=limit)
    views = await dlq.mark_replayed(gateway.pool, views)
    return {"topic": name, "count": len(views), "letters": [dlq.summary(v) for v in views]}


@router.get("/{topic}/{ref}", dependencies=[Depends(require_admin)])
async def show_letter(request: Request, topic: str, ref: str) -> dict[str, Any]:
    gateway = request.app.state.gateway
    try:
        where = dlq.parse_ref(ref)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc
    views = await dlq.read_letters(gateway.settings.kafka.bootstrap, dlq.dlq_topic_of(topic), refs=[where])
    if not views:
        raise HTTPException(404, f"no dead letter {ref} in {dlq.dlq_topic_of(topic)}")
    view = (await dlq.mark_replayed(gateway.pool, views))[0]
    return {"ref": view.ref, "replayed": view.replayed, **view.letter.model_dump(mode="json")}


@router.post("/{topic}/replay", dependencies=[Depends(require_admin)])
async def replay_letters(request: Request, topic: str, body: ReplayRequest) -> list[ReplayResult]:
    gateway = request.app.state.gateway
    kafka = gateway.settings.kafka
    views = await dlq.read_letters(kafka.bootstrap, dlq.dlq_topic_of(topic), limit=1_000_000)
    views = await dlq.mark_replayed(gateway.pool, views)
    try:
        chosen = dlq.select(
            views, refs=body.refs, every=body.all, error_type=body.error_type, include_replayed=body.force
        )
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from exc
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc
    outcomes = await dlq.replay(
        kafka.bootstrap, chosen, pool=gateway.pool, force=body.force, max_request_size=kafka.max_request_size
    )
    return [ReplayResult(ref=o.ref, topic=o.topic, status=o.status, detail=o.detail) for o in outcomes]
