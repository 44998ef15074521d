"""``GET /v1/conversations/{id}``: a conversation's messages and its reference list; ``DELETE`` removes it.

A conversation belongs to the API key that started it: that key may read and delete it; a key with the
``admin`` scope may delete any conversation; any other key gets 404 (as for an unknown id). With
authentication off, conversations are ownerless and anyone who can reach the gateway may read or delete them.
"""

from __future__ import annotations

from fastapi import APIRouter, HTTPException, Response

from services.gateway.deps import ConversationStoreDep, DeletesAnyOwnerDep, OwnerDep
from services.gateway.schemas.conversations import ConversationView
from shared import metrics

router = APIRouter(tags=["answers"])


@router.get(
    "/v1/conversations/{conversation_id}",
    response_model=ConversationView,
    summary="A conversation: its messages, and its reference list numbered [1], [2]...",
)
async def conversation(conversation_id: str, store: ConversationStoreDep, owner: OwnerDep) -> ConversationView:
    view = await store.view(conversation_id, owner)
    if view is None:
        raise HTTPException(404, f"no conversation {conversation_id}")
    return view


@router.delete(
    "/v1/conversations/{conversation_id}",
    status_code=204,
    response_class=Response,
    summary="Delete a conversation with all its turns (the key that started it, or one with the `admin` scope)",
    responses={404: {"description": "No such conversation, or not the caller's"}},
)
async def delete_conversation(
    conversation_id: str, store: ConversationStoreDep, owner: OwnerDep, any_owner: DeletesAnyOwnerDep
) -> Response:
    if not await store.delete(conversation_id, owner, any_owner=any_owner):
        raise HTTPException(404, f"no conversation {conversation_id}")
    metrics.CONVERSATIONS_DELETED.labels("request").inc()
    return Response(status_code=204)
