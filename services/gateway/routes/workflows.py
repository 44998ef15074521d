"""The clinical workflows over HTTP: ``/v1/evidence`` (and its stream), ``/v1/guidelines/recommend``,
``/v1/guidelines/consult`` and ``/v1/query`` (:mod:`services.gateway.workflows` runs them)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import StreamingResponse

from services.gateway.deps import ScopesDep, SettingsDep, WorkflowsDep
from services.gateway.schemas.common import check_query_form
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
from shared.settings import Settings

router = APIRouter(tags=["workflows"])


EVIDENCE_RESPONSES: dict[int | str, dict[str, Any]] = {
    403: {"description": "`ingest: true` from an API key without the `ingest` scope"},
    422: {"description": "A malformed request, or `max_per_query` over EVIDENTIA_WORKFLOW_EVIDENCE_MAX_PER_QUERY"},
}


def evidence_allowed(body: EvidenceRequest, scopes: frozenset[str], settings: Settings) -> EvidenceRequest:
    """What the caller may ask of the evidence workflow. Fetching from NCBI is ingestion, so it needs the
    ``ingest`` scope: left out, it is on for a key with the scope and off for a ``read`` key (which searches
    what is stored); asked for without the scope, 403. ``max_per_query`` is capped by the operator's
    ``EVIDENTIA_WORKFLOW_EVIDENCE_MAX_PER_QUERY`` (over it, 422). Returns the request with ``ingest`` decided."""
    may_ingest = "ingest" in scopes
    if body.ingest and not may_ingest:
        raise HTTPException(
            403,
            f"this API key lacks the `ingest` scope (it has: {', '.join(sorted(scopes)) or 'none'}), which "
            "fetching from NCBI needs: leave `ingest` out or false to search what is stored",
        )
    cap = settings.workflow.evidence_max_per_query
    if body.max_per_query is not None and body.max_per_query > cap:
        raise HTTPException(
            422,
            f"max_per_query {body.max_per_query} is over this gateway's limit of {cap} PMIDs a search "
            "(EVIDENTIA_WORKFLOW_EVIDENCE_MAX_PER_QUERY)",
        )
    return body.model_copy(update={"ingest": may_ingest if body.ingest is None else body.ingest})


@router.post(
    "/v1/evidence",
    response_model=EvidenceResponse,
    summary="Drug-disease evidence: normalise the disease, expand searches, fetch, search, summarise",
    responses=EVIDENCE_RESPONSES,
)
async def evidence(
    body: EvidenceRequest, workflows: WorkflowsDep, scopes: ScopesDep, settings: SettingsDep
) -> EvidenceResponse:
    return await workflows.evidence(evidence_allowed(body, scopes, settings))


@router.post(
    "/v1/evidence/stream",
    response_class=StreamingResponse,
    summary="The same as server-sent events: `step` per step as it runs, then `result` (or `error`)",
    responses={**STREAM_RESPONSES, **EVIDENCE_RESPONSES},
)
async def evidence_stream(
    body: EvidenceRequest, workflows: WorkflowsDep, scopes: ScopesDep, settings: SettingsDep
) -> StreamingResponse:
    return event_stream(workflows.evidence_events(evidence_allowed(body, scopes, settings)))


@router.post(
    "/v1/guidelines/recommend",
    response_model=GuidelineResponse,
    summary="Guideline recommendation: condition + clinical findings -> Assessment & Plan citing guideline sections",
    responses={422: {"description": "A malformed request, or condition + findings longer than a query may be"}},
)
async def recommend(body: GuidelineRequest, workflows: WorkflowsDep) -> GuidelineResponse:
    # Checked here, not in the body's schema: a consultation builds the same body from what a model extracted,
    # which the retriever cuts to the limits instead.
    try:
        check_query_form(body.query_form(), "condition, findings and population")
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc
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
