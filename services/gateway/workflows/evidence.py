"""The drug-disease evidence workflow (``POST /v1/evidence`` and ``/v1/evidence/stream``): the disease
normalised for PubMed (:mod:`services.gateway.understanding.disease`), the pair expanded into PubMed searches
(:mod:`services.gateway.understanding.expansion`), their PMIDs fetched (with the ``ingest`` scope), the
therapeutic-intent query searched over the literature, and the evidence summarised, every finding naming its
PMIDs. With ``include_trials``, ClinicalTrials.gov is searched for the pair too (fetched with ``ingest``) and its
studies returned beside the summary, not in it. Each step is reported as it runs (the stream's ``step`` events).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import HTTPException
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, model_validator
from sse_starlette import EventSourceResponse

from services.gateway.deps import ScopesDep, SettingsDep
from services.gateway.schemas.common import Metered, WorkflowStep, check_query_form
from services.gateway.sse import STREAM_RESPONSES, event_stream
from services.gateway.understanding.disease import DiseaseNormalizer, NormalisedDisease
from services.gateway.understanding.expansion import DrugProfile, Expansion, SearchTermExpander
from services.gateway.workflows.base import (
    ContextDep,
    Progress,
    Run,
    Workflow,
    metered,
    no_progress,
    progress_events,
    workflow_router,
)
from shared.citations import INSUFFICIENT
from shared.events import (
    Citation,
    CitationCheck,
    EvidenceSummary,
    RetrievalRequest,
    SynthesisReply,
    SynthesisRequest,
    named_source,
    new_trace_id,
)
from shared.models import (
    DEFAULT_TOP_K,
    DEFAULT_TOP_N,
    AnswerTopN,
    QueryForm,
    SearchFilters,
    SearchHit,
    SearchMode,
    TopK,
    strongest_evidence_first,
)
from shared.safety import DISCLAIMER
from shared.settings import Settings

router = workflow_router()


class EvidenceRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    drug: str = Field(min_length=1, max_length=200, description="The drug, e.g. bupropion.")
    disease: str = Field(
        min_length=1,
        max_length=300,
        description="The disease as named anywhere, e.g. 'narcolepsy-cataplexy syndrome'; it is normalised for PubMed.",
    )
    drug_profile: DrugProfile | None = Field(None, description="What is known of the drug, for search-term expansion.")
    ingest: bool | None = Field(
        None,
        description="Fetch the PMIDs the searches find that are not stored yet; needs the `ingest` scope. Left "
        "out: on for a key with that scope, off (search what is stored) for a `read` key; `true` without the "
        "scope: 403.",
    )
    max_per_query: int | None = Field(
        None,
        ge=1,
        le=10_000,
        description="PMIDs taken from each search, at most the operator's EVIDENTIA_WORKFLOW_EVIDENCE_MAX_PER_QUERY "
        "(its default; more: 422).",
    )
    wait_s: float | None = Field(
        None,
        ge=0,
        le=1800,
        description="Longest wait for the ingestion jobs (default: EVIDENTIA_WORKFLOW_INGEST_WAIT_S).",
    )
    top_k: TopK = Field(DEFAULT_TOP_K, description="Candidates retrieved before the rerank.")
    top_n: AnswerTopN = Field(DEFAULT_TOP_N, description="Passages kept for the synthesis.")
    mode: SearchMode = Field("hybrid+rerank", description="Search method.")
    include_trials: bool = Field(
        False,
        description="Also search ClinicalTrials.gov studies of the pair (condition: the normalised disease, "
        "intervention: the drug), fetched first with `ingest`; returned in `trials`, apart from the summary.",
    )

    @model_validator(mode="after")
    def _blank(self) -> EvidenceRequest:
        if not self.drug.strip() or not self.disease.strip():
            raise ValueError("drug and disease must not be blank")
        check_query_form(QueryForm(kind="therapeutic", drug=self.drug, disease=self.disease), "drug and disease")
        return self


class DiseaseTerm(BaseModel):
    original: str
    normalised: str
    synonym: str | None
    search_term: str = Field(description="What was searched: the normalised name OR its synonym, or the broader term.")
    count: int | None = Field(None, description="PubMed hits of `drug AND term` (esearch count through the fetcher).")
    broader: str | None = None
    broader_count: int | None = None
    broadened: bool = False
    method: str = Field(description="llm, rules or cache.")
    notes: list[str] = Field(default_factory=list)


class ExpandedQuery(BaseModel):
    axis: str = Field(description="drug, class_organ, mechanism_organ, target_gene or synonym.")
    query: str
    job_id: str | None = Field(None, description="The ingestion job that ran it.")


class IngestionSummary(BaseModel):
    jobs: list[str] = Field(default_factory=list)
    documents: int = Field(0, description="Documents the searches found (stored before or now).")
    finished: bool = Field(description="Every job finished within the wait.")
    failed: int = 0


class EvidenceResponse(Metered):
    drug: str
    disease: DiseaseTerm
    organ: str | None
    queries: list[ExpandedQuery]
    expansion_method: str
    ingestion: IngestionSummary
    therapeutic_query: str = Field(description="The semantic query (the therapeutic-intent form).")
    summary: EvidenceSummary = Field(description="The structured evidence summary; every finding names its PMIDs.")
    answer: str
    numbered_answer: str
    mode: str = Field(description="llm, extractive or insufficient-evidence.")
    model: str | None
    citations: list[Citation]
    citation_check: CitationCheck
    sources: list[SearchHit] = Field(
        description="The retrieved passages, strongest evidence first (equal evidence in retrieval order); each "
        "keeps its retrieval `rank`."
    )
    trials: list[SearchHit] = Field(
        default_factory=list,
        description="With `include_trials`: passages of ClinicalTrials.gov studies of the pair, in retrieval "
        "order, cited `[NCT:...]`; not part of the summary or the answer.",
    )
    steps: list[WorkflowStep]
    disclaimer: str
    timings_ms: dict[str, float] = Field(default_factory=dict)


class EvidenceWorkflow(Workflow):
    """Five steps, each reported as it runs: normalise, expand, fetch, search, synthesize; with
    ``include_trials`` a sixth, trials, after the search."""

    @metered
    async def run(self, body: EvidenceRequest, progress: Progress = no_progress) -> EvidenceResponse:
        trace_id = new_trace_id()
        run = Run(progress)
        drug = body.drug.strip()
        disease = await self._normalise(run, body, drug, trace_id)
        expansion, queries = await self._expand(run, drug, disease.search_term, body.drug_profile or DrugProfile())
        ingestion = await self._fetch(run, body, queries, disease.normalised, trace_id)
        hits, therapeutic = await self._search(run, body, drug, disease.normalised, trace_id)
        trials = await self._trials(run, body, drug, disease.normalised, trace_id) if body.include_trials else []
        synth, summary = await self._synthesize(run, hits, therapeutic, trace_id)
        return EvidenceResponse(
            drug=drug,
            disease=DiseaseTerm(
                original=disease.original,
                normalised=disease.normalised,
                synonym=disease.synonym,
                search_term=disease.search_term,
                count=disease.count,
                broader=disease.broader,
                broader_count=disease.broader_count,
                broadened=disease.broadened,
                method=disease.method,
                notes=disease.notes,
            ),
            organ=expansion.organ,
            queries=queries,
            expansion_method=expansion.method,
            ingestion=ingestion,
            therapeutic_query=therapeutic,
            summary=summary,
            answer=synth.answer,
            numbered_answer=synth.numbered_answer or synth.answer,
            mode=synth.mode,
            model=synth.model,
            citations=synth.citations,
            citation_check=synth.citation_check,
            sources=strongest_evidence_first(hits),
            trials=trials,
            steps=run.steps,
            disclaimer=synth.disclaimer or DISCLAIMER,
            timings_ms=run.total(),
        )

    async def _normalise(self, run: Run, body: EvidenceRequest, drug: str, trace_id: str) -> NormalisedDisease:
        """The disease as PubMed is searched for it, its hit count with the drug checked through the fetcher."""
        w = self.settings.workflow

        async def count(term: str) -> int | None:
            return await self.backend.count(term, trace_id)

        t0 = await run.start("normalise", f"normalising {body.disease!r}")
        normaliser = DiseaseNormalizer(self.llm, self.ctx.cache, count, min_results=w.min_results, ttl_s=w.cache_ttl_s)
        disease = await normaliser.normalise(body.disease.strip(), drug)
        await run.end(
            "normalise",
            "done",
            f"{body.disease!r} -> {disease.search_term!r}"
            + (f" ({disease.count} PubMed hits)" if disease.count is not None else ""),
            t0,
            method=disease.method,
            notes=disease.notes,
        )
        return disease

    async def _expand(
        self, run: Run, drug: str, disease_term: str, profile: DrugProfile
    ) -> tuple[Expansion, list[ExpandedQuery]]:
        """The PubMed searches of the drug-disease pair (at most ``evidence_max_queries``)."""
        w = self.settings.workflow
        t0 = await run.start("expand", "writing PubMed searches")
        expander = SearchTermExpander(self.llm, self.ctx.cache, ttl_s=w.cache_ttl_s)
        expansion = await expander.expand(drug, disease_term, profile)
        queries = [ExpandedQuery(axis=q.axis, query=q.query) for q in expansion.queries[: w.evidence_max_queries]]
        await run.end(
            "expand",
            "done",
            f"{len(queries)} searches over {len({q.axis for q in queries})} axes; organ: {expansion.organ or 'none'}",
            t0,
            method=expansion.method,
            organ=expansion.organ,
            queries=[q.model_dump() for q in queries],
        )
        return expansion, queries

    async def _fetch(
        self, run: Run, body: EvidenceRequest, queries: list[ExpandedQuery], disease: str, trace_id: str
    ) -> IngestionSummary:
        """One ingestion job per search (with ``ingest``), and with ``include_trials`` one at ClinicalTrials.gov
        for the pair, all waited for; each query gets its job's id."""
        w = self.settings.workflow
        if not body.ingest:
            await run.end("fetch", "skipped", "ingest=false: searching what is stored", time.perf_counter())
            return IngestionSummary(finished=True)
        t0 = await run.start("fetch", f"{len(queries) + body.include_trials} ingestion jobs")
        ingestion = IngestionSummary(finished=True)
        per_query = body.max_per_query or w.evidence_max_per_query
        for q in queries:
            q.job_id = await self.backend.ingest(q.query, per_query, trace_id)
            ingestion.jobs.append(q.job_id)
        if body.include_trials:
            trials = named_source("clinicaltrials", condition=disease, intervention=body.drug.strip())
            ingestion.jobs.append(await self.backend.ingest_source(trials, per_query, trace_id))
        ingestion = await self._wait_jobs(
            ingestion, body.wait_s if body.wait_s is not None else w.ingest_wait_s, run.progress
        )
        await run.end(
            "fetch",
            "done" if ingestion.finished else "failed",
            f"{ingestion.documents} documents found ({ingestion.failed} failed); stored ones are not "
            "fetched again" + ("" if ingestion.finished else "; not all jobs finished in time"),
            t0,
            jobs=ingestion.jobs,
        )
        return ingestion

    async def _search(
        self, run: Run, body: EvidenceRequest, drug: str, disease: str, trace_id: str
    ) -> tuple[list[SearchHit], str]:
        """The therapeutic-intent search over the literature: the passages and the query text searched."""
        form = QueryForm(kind="therapeutic", drug=drug, disease=disease)
        t0 = await run.start("search", f"therapeutic intent: {drug} for {disease}")
        reply = await self.backend.retrieve(  # the retriever renders the form and sends its text back
            RetrievalRequest(
                trace_id=trace_id,
                top_k=body.top_k,
                top_n=body.top_n,
                mode=body.mode,
                filters=SearchFilters(sources=["pubmed", "pmc"]),  # the literature: what the searches fetched
                query_form=form,
            )
        )
        hits = reply.hits
        await run.end(
            "search",
            "done",
            f"{len(hits)} passages (top {body.top_k} -> {body.top_n}, {body.mode})",
            t0,
            pmids=[h.pmid for h in hits if h.pmid],
        )
        return hits, reply.rendered_query or form.keywords()

    async def _trials(self, run: Run, body: EvidenceRequest, drug: str, disease: str, trace_id: str) -> list[SearchHit]:
        """The ClinicalTrials.gov studies of the pair as stored (fetched by the fetch step with ``ingest``)."""
        form = QueryForm(kind="therapeutic", drug=drug, disease=disease)
        t0 = await run.start("trials", f"ClinicalTrials.gov: {drug} for {disease}")
        reply = await self.backend.retrieve(
            RetrievalRequest(
                trace_id=trace_id,
                top_k=body.top_k,
                top_n=body.top_n,
                mode=body.mode,
                filters=SearchFilters(sources=["clinicaltrials"]),
                query_form=form,
            )
        )
        await run.end(
            "trials",
            "done",
            f"{len(reply.hits)} trial passages from {len({h.document_id for h in reply.hits})} studies",
            t0,
            nct_ids=list(dict.fromkeys(h.source_id for h in reply.hits)),
        )
        return reply.hits

    async def _synthesize(
        self, run: Run, hits: list[SearchHit], therapeutic: str, trace_id: str
    ) -> tuple[SynthesisReply, EvidenceSummary]:
        """The answer and its evidence summary, keeping only the findings that name their PMIDs."""
        t0 = await run.start("synthesize", "evidence summary")
        synth = await self.backend.synthesize(
            SynthesisRequest(
                trace_id=trace_id,
                question=therapeutic,
                passages=hits,
                summarize=True,
            )
        )
        summary = _sourced(synth.summary) or EvidenceSummary(
            summary=INSUFFICIENT,
            study_count=0,
            strength="insufficient",
            method="llm" if synth.mode == "llm" else "extractive",
        )
        await run.end(
            "synthesize", "done", f"{synth.mode}: strength {summary.strength}, {len(summary.key_findings)} findings", t0
        )
        return synth, summary

    def events(self, body: EvidenceRequest) -> AsyncIterator[str]:
        """The workflow as server-sent events: ``step`` per step as it runs, then ``result`` (or ``error``)."""
        return progress_events(lambda progress: self.run(body, progress))

    async def _wait_jobs(self, ingestion: IngestionSummary, wait_s: float, progress: Progress) -> IngestionSummary:
        deadline = time.monotonic() + wait_s
        last = ""
        while True:
            statuses = [await self.backend.job(j) for j in ingestion.jobs]
            done = [s for s in statuses if s is not None and s.done]
            documents = sum(s.total for s in statuses if s is not None)
            failed = sum(len(s.failures) for s in statuses if s is not None)
            embedded = sum(s.counts.get("embedded", 0) for s in statuses if s is not None)
            line = f"{len(done)}/{len(ingestion.jobs)} jobs done, {embedded}/{documents} documents embedded"
            if line != last:
                await progress(WorkflowStep(name="fetch", status="running", detail=line))
                last = line
            finished = len(done) == len(ingestion.jobs)
            if finished or time.monotonic() >= deadline:
                return IngestionSummary(jobs=ingestion.jobs, documents=documents, finished=finished, failed=failed)
            await asyncio.sleep(0.5)


def _sourced(summary: EvidenceSummary | None) -> EvidenceSummary | None:
    """The summary with only the findings that name their sources (PMIDs on every claim)."""
    if summary is None:
        return None
    findings = [f for f in summary.key_findings if f.supporting_pmids]
    return summary.model_copy(update={"key_findings": findings})


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
    body: EvidenceRequest, ctx: ContextDep, scopes: ScopesDep, settings: SettingsDep
) -> EvidenceResponse:
    return await EvidenceWorkflow(ctx).run(evidence_allowed(body, scopes, settings))


@router.post(
    "/v1/evidence/stream",
    response_class=StreamingResponse,
    summary="The same as server-sent events: `step` per step as it runs, then `result` (or `error`)",
    responses={**STREAM_RESPONSES, **EVIDENCE_RESPONSES},
)
async def evidence_stream(
    body: EvidenceRequest, ctx: ContextDep, scopes: ScopesDep, settings: SettingsDep
) -> EventSourceResponse:
    return event_stream(EvidenceWorkflow(ctx).events(evidence_allowed(body, scopes, settings)))
