"""The clinical workflows over HTTP: ``/v1/evidence`` (and its stream), ``/v1/guidelines/recommend``,
``/v1/guidelines/consult`` and ``/v1/query`` (:mod:`services.gateway.workflows` runs them)."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException
from fastapi.responses import StreamingResponse

from services.gateway.deps import WorkflowsDep
from services.gateway.schemas.workflows import (
    ConsultRequest,
    ConsultResponse,
    EvidenceRequest,
    EvidenceResponse,
    GuidelineRequest,
    GuidelineResponse,
    QueryRequest,
    QueryResponse,
)
from services.gateway.sse import STREAM_RESPONSES, event_stream
from services.gateway.workflows import ConsultNeedsDiagnosis

router = APIRouter(tags=["workflows"])


@router.post(
    "/v1/evidence",
    response_model=EvidenceResponse,
    summary="Drug-disease evidence: normalise the disease, expand searches, fetch, search, summarise",
)
async def evidence(body: EvidenceRequest, workflows: WorkflowsDep) -> EvidenceResponse:
    return await workflows.evidence(body)


@router.post(
    "/v1/evidence/stream",
    response_class=StreamingResponse,
    summary="The same as server-sent events: `step` per step as it runs, then `result` (or `error`)",
    responses=STREAM_RESPONSES,
)
async def evidence_stream(body: EvidenceRequest, workflows: WorkflowsDep) -> StreamingResponse:
    return event_stream(workflows.evidence_events(body))


@router.post(
    "/v1/guidelines/recommend",
    response_model=GuidelineResponse,
    summary="Guideline recommendation: condition + clinical findings -> Assessment & Plan citing guideline sections",
)
async def recommend(body: GuidelineRequest, workflows: WorkflowsDep) -> GuidelineResponse:
    return await workflows.recommend(body)


@router.post(
    "/v1/guidelines/consult",
    response_model=ConsultResponse,
    summary="Guideline consultation: an interview -> typed findings and a working diagnosis -> the guideline "
    "recommendation once a diagnosis is known (else what to ask)",
    responses={422: {"description": "A malformed interview, or offline without `diagnosis`."}},
)
async def consult(body: ConsultRequest, workflows: WorkflowsDep) -> ConsultResponse:
    try:
        return await workflows.consult(body)
    except ConsultNeedsDiagnosis as exc:
        raise HTTPException(422, str(exc)) from exc


@router.post(
    "/v1/query",
    response_model=QueryResponse,
    summary="A question with query intelligence: classified, language detected, enhanced and "
    "routed; `mode: agent` for Claude with tools",
)
async def query(body: QueryRequest, workflows: WorkflowsDep) -> QueryResponse:
    return await workflows.query(body)
