"""The guideline recommendation workflow (``POST /v1/guidelines/recommend``): a condition and clinical findings
in, the guideline sections they match out, with an Assessment & Plan citing them
(:mod:`services.gateway.intelligence.guidelines`). Only guideline chunks (Bookshelf sources) are searched for
the plan; with ``include_trials`` the stored ClinicalTrials.gov studies matching the same query are listed beside
it (searched, never fetched, and not cited by the plan). The consultation (:mod:`.consult`) runs this same flow
once it knows a diagnosis.
"""

from __future__ import annotations

import time
from typing import Literal

from fastapi import HTTPException
from pydantic import BaseModel, ConfigDict, Field

from services.gateway.intelligence.guidelines import attribute, plan_question, write_assessment
from services.gateway.schemas.common import Metered, check_query_form
from services.gateway.workflows.base import ContextDep, Run, Workflow, metered, workflow_router
from shared.events import Citation, CitationCheck, RetrievalRequest, SynthesisRequest, new_trace_id
from shared.models import (
    DEFAULT_TOP_K,
    DEFAULT_TOP_N,
    AnswerTopN,
    QueryForm,
    SearchFilters,
    SearchHit,
    SearchMode,
    TopK,
    finding_text,
)
from shared.safety import DISCLAIMER
from shared.sources import guideline_sources

router = workflow_router()


class Finding(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kind: str = Field(min_length=1, max_length=60, description="e.g. symptom, medical_history, lab, sign, location.")
    value: str = Field(min_length=1, max_length=500, description="e.g. 'fever 3 days', 'pregnant first trimester'.")


class GuidelineRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    condition: str = Field(min_length=1, max_length=300, description="The diagnosed condition, e.g. malaria.")
    findings: list[Finding] = Field(default_factory=list, max_length=50, description="The patient's clinical findings.")
    population: str | None = Field(None, max_length=200, description="e.g. 'adult', 'child under 5'.")
    top_k: TopK = DEFAULT_TOP_K
    top_n: AnswerTopN = DEFAULT_TOP_N
    mode: SearchMode = "hybrid"
    include_trials: bool = Field(
        False,
        description="Also list the stored ClinicalTrials.gov studies matching the condition and findings, in "
        "`trials` (searched only: nothing is fetched; the plan does not cite them).",
    )

    def query_form(self) -> QueryForm:
        """The condition-findings query searched: the condition, each finding as ``kind: value``, the population."""
        findings = [finding_text(f.kind, f.value) for f in self.findings]
        return QueryForm.condition_findings(self.condition, findings, self.population)


class GuidelineSection(BaseModel):
    rank: int
    title_path: str = Field(description='The section\'s place in its guideline: "Book > Chapter > Section".')
    citation_id: str
    document_id: str
    title: str
    score: float
    excerpt: str
    url: str | None = None


class PlanItem(BaseModel):
    text: str
    citation_ids: list[str] = Field(default_factory=list)
    sections: list[str] = Field(default_factory=list, description="Title paths of the guideline sections cited.")


class GuidelineResponse(Metered):
    condition: str
    findings: list[str]
    population: str | None
    query: str = Field(description="The search query: condition + findings.")
    top_section: str | None = Field(description="Title path of the best-matching guideline section.")
    assessment: str = Field(
        description="The Assessment: written by Claude from the retrieved sections (citing them) when a key is "
        "set; otherwise a template, labelled as one."
    )
    assessment_mode: Literal["llm", "template"] = Field(
        "template", description="llm (Claude wrote it from the sections) or template (no model, or it failed)."
    )
    assessment_model: str | None = Field(None, description="The model that wrote the assessment, if one did.")
    assessment_citation_check: CitationCheck = Field(
        default_factory=CitationCheck, description="The assessment's citations checked against the sections."
    )
    plan: list[PlanItem] = Field(description="The recommendations, each citing the guideline sections it rests on.")
    sections: list[GuidelineSection]
    answer: str
    numbered_answer: str
    mode: str
    model: str | None
    citations: list[Citation]
    citation_check: CitationCheck
    trials: list[SearchHit] = Field(
        default_factory=list,
        description="With `include_trials`: passages of the stored ClinicalTrials.gov studies matching the query, "
        "in retrieval order, cited `[NCT:...]`.",
    )
    disclaimer: str
    timings_ms: dict[str, float] = Field(default_factory=dict)


class RecommendWorkflow(Workflow):
    @metered
    async def run(self, body: GuidelineRequest) -> GuidelineResponse:
        return await self.recommend(body)

    async def recommend(self, body: GuidelineRequest) -> GuidelineResponse:
        """The recommendation; its Claude calls go to the caller's ledger (the consultation's, or :meth:`run`'s)."""
        trace_id = new_trace_id()
        run = Run()
        findings = [finding_text(f.kind, f.value) for f in body.findings]
        form = body.query_form()
        t0 = time.perf_counter()
        reply = await self.backend.retrieve(  # the retriever renders the form and sends its text back
            RetrievalRequest(
                trace_id=trace_id,
                top_k=body.top_k,
                top_n=body.top_n,
                mode=body.mode,
                filters=SearchFilters().model_copy(update={"sources": guideline_sources()}),
                query_form=form,
            )
        )
        hits = reply.hits
        query = reply.rendered_query or form.keywords()
        run.lap("retrieval", t0)
        sections = [
            GuidelineSection(
                rank=i,
                title_path=h.section or h.title,
                citation_id=h.citation_id,
                document_id=h.document_id,
                title=h.title,
                score=h.score,
                excerpt=h.text[:400],
                url=h.url,
            )
            for i, h in enumerate(hits, 1)
        ]
        t0 = time.perf_counter()
        synth = await self.backend.synthesize(
            SynthesisRequest(
                trace_id=trace_id,
                question=plan_question(body.condition, findings, body.population),
                passages=hits,
                summarize=False,
            )
        )
        run.lap("synthesis", t0)
        plan = [
            PlanItem(text=p.text, citation_ids=p.citation_ids, sections=p.sections)
            for p in attribute(synth.answer, hits)
        ]
        plan = [p for p in plan if p.citation_ids] or plan
        top = sections[0].title_path if sections else None
        t0 = time.perf_counter()
        assessment = await write_assessment(self.llm, body.condition, findings, body.population, hits)
        run.lap("assessment", t0)
        trials = await self._trials(body, trace_id, run) if body.include_trials else []
        check = synth.citation_check
        if assessment.check.removed:  # what the assessment cited and may not is reported with the rest
            removed = list(dict.fromkeys([*check.removed, *assessment.check.removed]))
            check = check.model_copy(update={"removed": removed})
        return GuidelineResponse(
            condition=body.condition.strip(),
            findings=findings,
            population=body.population,
            query=query,
            top_section=top,
            assessment=assessment.text,
            assessment_mode=assessment.mode,
            assessment_model=assessment.model,
            assessment_citation_check=assessment.check,
            plan=plan,
            sections=sections,
            answer=synth.answer,
            numbered_answer=synth.numbered_answer or synth.answer,
            mode=synth.mode,
            model=synth.model,
            citations=synth.citations,
            citation_check=check,
            trials=trials,
            disclaimer=synth.disclaimer or DISCLAIMER,
            timings_ms=run.total(),
        )

    async def _trials(self, body: GuidelineRequest, trace_id: str, run: Run) -> list[SearchHit]:
        """The stored ClinicalTrials.gov studies matching the condition and findings (searched, never fetched)."""
        t0 = time.perf_counter()
        reply = await self.backend.retrieve(
            RetrievalRequest(
                trace_id=trace_id,
                top_k=body.top_k,
                top_n=body.top_n,
                mode=body.mode,
                filters=SearchFilters(sources=["clinicaltrials"]),
                query_form=body.query_form(),
            )
        )
        run.lap("trials", t0)
        return reply.hits


@router.post(
    "/v1/guidelines/recommend",
    response_model=GuidelineResponse,
    summary="Guideline recommendation: condition + clinical findings -> Assessment & Plan citing guideline sections",
    responses={422: {"description": "A malformed request, or condition + findings longer than a query may be"}},
)
async def recommend(body: GuidelineRequest, ctx: ContextDep) -> GuidelineResponse:
    # Checked here, not in the body's schema: a consultation builds the same body from what a model extracted,
    # which the retriever cuts to the limits instead.
    try:
        check_query_form(body.query_form(), "condition, findings and population")
    except ValueError as exc:
        raise HTTPException(422, str(exc)) from exc
    return await RecommendWorkflow(ctx).run(body)
