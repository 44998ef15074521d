"""Administration: ``DELETE /v1/admin/documents/{id}`` and ``PATCH /v1/documents/{id}`` (a document's search
priority; both need the ``admin`` scope), and ``/v1/admin/dlq``, the dead letters of a topic over HTTP, the same
as ``evidentia dlq`` (shared/kafka/dlq.py).

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
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request

from services.gateway import security
from services.gateway.deps import KafkaDep, PoolDep, SettingsDep
from services.gateway.schemas.admin import DocumentPatch, DocumentPriority, ReplayRequest, ReplayResult
from services.gateway.store.documents import set_priority, stored_document
from shared.events import DocumentDeleted
from shared.kafka import dlq
from shared.kafka.topics import DOCUMENTS_FETCHED

router = APIRouter()


_admin_scope = security.require("admin")


async def require_admin(request: Request, settings: SettingsDep) -> None:
    if settings.gateway.key_hashes():
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


@router.delete(
    "/v1/admin/documents/{document_id}",
    status_code=202,
    tags=["administration"],
    summary="Remove a stored document with its chunks and vectors (needs the `admin` scope)",
    dependencies=[Depends(security.require("admin"))],
    responses={403: {"description": "The API key lacks the `admin` scope"}, 404: {"description": "Not stored"}},
)
async def delete_document(document_id: str, pool: PoolDep, kafka: KafkaDep) -> dict[str, str]:
    if "\x00" in document_id:
        raise HTTPException(422, "document ids may not contain NUL characters")
    row = await stored_document(pool, document_id)
    if row is None:
        raise HTTPException(404, f"no stored document {document_id}")
    event = DocumentDeleted(document_id=document_id, source=row["source"], source_id=row["source_id"])
    await kafka.publish(event, DOCUMENTS_FETCHED, document_id)
    return {"document_id": document_id, "origin": str(row["origin"]), "status": "deletion published"}


@router.patch(
    "/v1/documents/{document_id}",
    response_model=DocumentPriority,
    tags=["administration"],
    summary="Set a stored document's search priority: 0 never returned, 10 low, 50 normal, 100 high (`admin`)",
    dependencies=[Depends(security.require("admin"))],
    responses={403: {"description": "The API key lacks the `admin` scope"}, 404: {"description": "Not stored"}},
)
async def patch_document(document_id: str, body: DocumentPatch, pool: PoolDep) -> DocumentPriority:
    if "\x00" in document_id:
        raise HTTPException(422, "document ids may not contain NUL characters")
    if not await set_priority(pool, document_id, body.priority):
        raise HTTPException(404, f"no stored document {document_id}")
    return DocumentPriority(document_id=document_id, priority=body.priority)


DLQ = "/v1/admin/dlq"
Limit = Annotated[int, Query(ge=1, le=10_000)]


@router.get(DLQ + "/{topic}", tags=["admin"], dependencies=[Depends(require_admin)])
async def list_letters(settings: SettingsDep, pool: PoolDep, topic: str, limit: Limit = 100) -> dict[str, Any]:
    name = dlq.dlq_topic_of(topic)
    views = await dlq.read_letters(settings.kafka, name, limit=limit)
    views = await dlq.mark_replayed(pool, views)
    return {"topic": name, "count": len(views), "letters": [dlq.summary(v) for v in views]}


@router.get(DLQ + "/{topic}/{ref}", tags=["admin"], dependencies=[Depends(require_admin)])
async def show_letter(settings: SettingsDep, pool: PoolDep, topic: str, ref: str) -> dict[str, Any]:
    try:
        where = dlq.parse_ref(ref)
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc
    views = await dlq.read_letters(settings.kafka, dlq.dlq_topic_of(topic), refs=[where])
    if not views:
        raise HTTPException(404, f"no dead letter {ref} in {dlq.dlq_topic_of(topic)}")
    view = (await dlq.mark_replayed(pool, views))[0]
    return {"ref": view.ref, "replayed": view.replayed, **view.letter.model_dump(mode="json")}


@router.post(DLQ + "/{topic}/replay", tags=["admin"], dependencies=[Depends(require_admin)])
async def replay_letters(settings: SettingsDep, pool: PoolDep, topic: str, body: ReplayRequest) -> list[ReplayResult]:
    outcomes = dlq.replay_chosen(
        settings.kafka,
        dlq.dlq_topic_of(topic),
        pool=pool,
        refs=body.refs,
        every=body.all,
        error_type=body.error_type,
        force=body.force,
    )  # paged: the letters of a large topic are never all held at once
    try:
        return [ReplayResult(ref=o.ref, topic=o.topic, status=o.status, detail=o.detail) async for o in outcomes]
    except LookupError as exc:
        raise HTTPException(404, str(exc)) from exc
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc
