"""``GET /v1/conversations/{id}``: a conversation's messages and its reference list."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from services.gateway.deps import ConversationStoreDep, OwnerDep
from services.gateway.schemas.conversations import ConversationView

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
