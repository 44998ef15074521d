"""``POST /v1/ask`` and ``POST /v1/ask/stream``: one conversation turn, answered whole or streamed
(:mod:`services.gateway.answers` holds the turn)."""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from sse_starlette import EventSourceResponse

from services.gateway.deps import AnswersDep, OwnerDep
from services.gateway.schemas.ask import AskRequest, AskResponse
from services.gateway.sse import STREAM_RESPONSES, event_stream

router = APIRouter(tags=["answers"])


@router.post(
    "/v1/ask",
    response_model=AskResponse,
    summary="Answer a question from the literature, every claim cited (one conversation turn)",
    responses={
        404: {"description": "Unknown conversation"},
        409: {"description": "Another turn of the conversation was stored meanwhile"},
    },
)
async def ask(body: AskRequest, answers: AnswersDep, owner: OwnerDep) -> AskResponse:
    return await answers.ask(body, owner, time.perf_counter())


@router.post(
    "/v1/ask/stream",
    response_class=StreamingResponse,
    summary="The same answer as server-sent events: retrieval_done, token..., citations, summary, "
    "metrics, done (or error)",
    responses=STREAM_RESPONSES,
)
async def ask_stream(body: AskRequest, answers: AnswersDep, owner: OwnerDep) -> EventSourceResponse:
    start = time.perf_counter()
    await answers.context(body, owner)  # 404 as a status, before the stream starts
    return event_stream(answers.stream(body, owner, start))
