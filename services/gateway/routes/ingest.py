"""Ingestion: start a job (``POST /v1/ingest``) and follow it (``GET /v1/ingest/{job_id}``)."""

from __future__ import annotations

import uuid
from typing import Any

import asyncpg
from fastapi import APIRouter, Depends, HTTPException

from services.gateway import security
from services.gateway.deps import KafkaDep, PoolDep, ScopesDep, SettingsDep
from services.gateway.schemas.ingest import IngestAccepted, IngestRequest
from shared import provenance
from shared.db.jobs import JobStatus, job_status
from shared.events import (
    FULL_TEXT_OPTION,
    IngestRequested,
    SourceRequest,
    named_source,
    ncbi_sources,
)
from shared.ingestion import document_event, submit_documents
from shared.sources import source_rule

router = APIRouter(tags=["ingestion"])


async def check_provenance(pool: asyncpg.Pool, body: IngestRequest) -> None:
    """Inline documents may not stand for an NCBI record (:mod:`shared.provenance`): 422 for ids that contradict
    each other, 409 when an id is stored as a record fetched from NCBI. Nothing of the request is accepted then."""
    problems = [f"{d.document_id}: {why}" for d in body.documents if (why := provenance.inconsistency(d))]
    if problems:
        raise HTTPException(422, "; ".join(problems[:20]))
    claimed = list(dict.fromkeys(i for d in body.documents for i in provenance.claimed_ids(d)))
    taken = await provenance.ncbi_records(pool, claimed)
    if taken:
        raise HTTPException(
            409,
            f"{', '.join(taken[:20])}{' ...' if len(taken) > 20 else ''} {provenance.CONFLICT_REASON}; "
            "nothing of this request was ingested",
        )


def request_sources(body: IngestRequest) -> list[SourceRequest]:
    """The source requests of a body: its NCBI-shaped fields as they always were, and its ``query`` and ``ids``
    at ``source``."""
    ncbi = body.source in ("pubmed", "pmc")
    ids = [source_rule(body.source).canonical(i) for i in body.ids]
    sources = ncbi_sources(
        query=body.query if ncbi else None,
        pmids=[p.strip() for p in body.pmids] + (ids if body.source == "pubmed" else []),
        database="pmc" if body.source == "pmc" else "pubmed",
        full_text=body.full_text,
        bookshelf_publisher=body.bookshelf_publisher,
    )
    if body.source == "pmc" and ids:
        text: dict[str, str | bool] = {FULL_TEXT_OPTION: True} if body.full_text else {}
        sources.append(SourceRequest(source="pmc", ids=ids, options=text))
    elif not ncbi and (body.query or ids or body.condition or body.intervention):
        sources.append(
            named_source(
                body.source, query=body.query, ids=ids, condition=body.condition, intervention=body.intervention
            )
        )
    return sources


def job_params(body: IngestRequest, scopes: frozenset[str]) -> dict[str, Any]:
    """The job's params as recorded. Its ``priority`` reaches documents already stored only for a key with the
    ``admin`` scope, as ``PATCH /v1/documents/{id}`` does (``priority_stored``, read by migration 230's rule in the
    database); for any other key it applies to the documents the job creates."""
    params = body.model_dump(mode="json", exclude={"documents"})
    if body.priority is not None and "admin" in scopes:
        params["priority_stored"] = True
    return params


@router.post(
    "/v1/ingest",
    status_code=202,
    response_model=IngestAccepted,
    summary="Start an ingestion job (query, PMIDs, Bookshelf publisher or inline documents); returns at once",
    dependencies=[Depends(security.require("ingest"))],
    responses={
        403: {"description": "The API key lacks the `ingest` scope"},
        409: {"description": "An inline document claims an id stored as a record fetched from NCBI"},
    },
)
async def ingest(
    body: IngestRequest, pool: PoolDep, kafka: KafkaDep, settings: SettingsDep, scopes: ScopesDep
) -> IngestAccepted:
    if body.documents:
        await check_provenance(pool, body)
    job_id = uuid.uuid4().hex
    kind = (
        "documents"
        if body.documents
        else "query"
        if body.query or body.condition or body.intervention
        else "ids"
        if body.ids
        else "pmids"
        if body.pmids
        else "bookshelf"
    )
    request = None
    if body.query or body.ids or body.condition or body.intervention or body.pmids or body.bookshelf_publisher:
        sources = request_sources(body)
        request = IngestRequested(job_id=job_id, sources=sources, max_results=body.max_results, refresh=body.refresh)
    documents = [document_event(doc, job_id=job_id) for doc in body.documents]
    await submit_documents(
        pool,
        kafka.publish,
        settings.kafka,
        job_id=job_id,
        kind=kind,
        params=job_params(body, scopes),
        request=request,
        documents=documents,
    )
    return IngestAccepted(job_id=job_id, status_url=f"/v1/ingest/{job_id}")


@router.get(
    "/v1/ingest/{job_id}",
    response_model=JobStatus,
    summary="Progress of an ingestion job: documents per stage, failures",
)
async def ingest_status(job_id: str, pool: PoolDep) -> JobStatus:
    status = await job_status(pool, job_id)
    if status is None:
        raise HTTPException(404, f"no ingestion job {job_id}")
    return status
