"""``POST /v1/ask`` and ``POST /v1/ask/stream``: one conversation turn, answered whole or streamed
(:mod:`services.gateway.answers` holds the turn)."""

from __future__ import annotations

import time

from fastapi import APIRouter
from fastapi.responses import StreamingResponse
from sse_starlette import EventSourceResponse

from services.gateway.deps import AnswersDep, OwnerDep, ScopesDep, SettingsDep
from services.gateway.livefetch.plan import FETCH_403, FetchPlan, plan_for
from services.gateway.schemas.ask import AskRequest, AskResponse
from services.gateway.sse import STREAM_RESPONSES, event_stream
from shared.settings import Settings

router = APIRouter(tags=["answers"])


def fetch_plan(body: AskRequest, scopes: frozenset[str], settings: Settings) -> FetchPlan:
    """The PubMed fetch the caller may have (403 for ``always`` without the ``ingest`` scope)."""
    return plan_for(body.fetch, scopes, settings.ask_fetch.default)


@router.post(
    "/v1/ask",
    response_model=AskResponse,
    summary="Answer a question from the literature, every claim cited (one conversation turn)",
    responses={
        404: {"description": "Unknown conversation"},
        409: {"description": "Another turn of the conversation was stored meanwhile"},
        **FETCH_403,
    },
)
async def ask(
    body: AskRequest, answers: AnswersDep, owner: OwnerDep, scopes: ScopesDep, settings: SettingsDep
) -> AskResponse:
    return await answers.ask(body, owner, time.perf_counter(), fetch_plan(body, scopes, settings))


@router.post(
    "/v1/ask/stream",
    response_class=StreamingResponse,
    summary="The same answer as server-sent events: fetch... (PubMed searched at question time), retrieval_done, "
    "token..., citations, summary, metrics, done (or error)",
    responses={**STREAM_RESPONSES, **FETCH_403},
)
async def ask_stream(
    body: AskRequest, answers: AnswersDep, owner: OwnerDep, scopes: ScopesDep, settings: SettingsDep
) -> EventSourceResponse:
    start = time.perf_counter()
    plan = fetch_plan(body, scopes, settings)  # 403 as a status, before the stream starts
    await answers.context(body, owner)  # 404 as a status, before the stream starts
    return event_stream(answers.stream(body, owner, start, plan))
