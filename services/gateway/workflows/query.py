"""The question workflow (``POST /v1/query``): a question understood (classified, its language detected,
enhanced: :mod:`services.gateway.understanding`), routed by its class, and answered; or, with
``mode: agent``, Claude with tools looping until it answers (:mod:`services.gateway.intelligence.agent`; offline
a rule-based plan over the same tools, :class:`QueryTools`).
"""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from services.gateway.intelligence.agent import Agent, ToolOutput
from services.gateway.intelligence.interactions import InteractionCheck, InteractionChecker
from services.gateway.livefetch.plan import FETCH_403
from services.gateway.schemas.common import FetchMode, InteractionOut, Metered, QueryIntelligence, check_query_terms
from services.gateway.understanding.analysis import QueryAnalyser
from services.gateway.understanding.classify import Classification
from services.gateway.understanding.enhance import Enhancement
from services.gateway.understanding.routing import check_interaction, interaction_out, routed_search, with_interaction
from services.gateway.workflows.base import ContextDep, Run, Workflow, WorkflowContext, metered, workflow_router
from shared.citations import INSUFFICIENT, CitationVerifier
from shared.events import (
    Agreement,
    Citation,
    CitationCheck,
    EmergencyCheck,
    EvidenceSummary,
    RetrievalReply,
    RetrievalRequest,
    SynthesisReply,
    SynthesisRequest,
    new_trace_id,
)
from shared.models import (
    DEFAULT_TOP_K,
    DEFAULT_TOP_N,
    MAX_QUERY_CHARS,
    AnswerTopN,
    QueryForm,
    SearchFilters,
    SearchHit,
    SearchMode,
    TopK,
    strongest_evidence_first,
)
from shared.safety import DISCLAIMER, acheck_emergency, emergency_reply
from shared.sources import guideline_sources

router = workflow_router()


class QueryRequest(BaseModel):
    """A question with query intelligence: classified, language detected, enhanced, routed; or agentic."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    question: str = Field(
        min_length=1,
        max_length=MAX_QUERY_CHARS,
        validation_alias=AliasChoices("question", "message"),
        description="The question (alias: `message`), in any language; at most 200 terms "
        "(`EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS`; longer: 422).",
    )
    mode: Literal["standard", "agent"] = Field(
        "standard", description="agent: Claude with tools, looping until it answers (offline: a rule-based plan)."
    )
    filters: SearchFilters = Field(default_factory=SearchFilters)
    search_mode: SearchMode = "hybrid"
    top_k: TopK = DEFAULT_TOP_K
    top_n: AnswerTopN = DEFAULT_TOP_N
    return_sources: bool = True
    summary: bool = Field(True, description="Include the structured evidence summary (standard mode).")
    fetch: FetchMode | None = Field(
        None,
        description="What the drug interaction check (asked directly or as the agent's tool) may fetch at question "
        "time, as on `/v1/ask`: `auto` or `always` (a key with the `ingest` scope; `always` without it: 403) "
        "fetch a missing FDA label and search PubMed for the pair; `never` reads the store only. Absent: the "
        "deployment's `EVIDENTIA_ASK_FETCH_DEFAULT` for a key with `ingest`, else `never`.",
    )

    @model_validator(mode="after")
    def _blank(self) -> QueryRequest:
        if not self.question.strip():
            raise ValueError("question is blank")
        check_query_terms(self.question, "question")
        return self


class AgentStepOut(BaseModel):
    step: int
    tool: str
    input: dict[str, Any]
    output: str
    source_ids: list[str] = Field(default_factory=list)
    error: str | None = None


class AgentTrace(BaseModel):
    planner: str = Field(description="llm (Claude chose the tools) or rules (offline plan).")
    steps: list[AgentStepOut]
    stop_reason: str


class QueryResponse(Metered):
    question: str
    answer: str
    numbered_answer: str
    mode: str = Field(description="llm, extractive, insufficient-evidence or emergency.")
    model: str | None
    answer_language: str = Field(description="Language code of the answer.")
    citations: list[Citation]
    citation_check: CitationCheck
    summary: EvidenceSummary | None
    agreement: Agreement | None = Field(
        None,
        description="Where the cited sources agree and disagree on the answer's main finding (as in `/v1/ask`); "
        "None where no answer was composed or checked by the synthesizer.",
    )
    emergency: EmergencyCheck | None = Field(
        None, description="Mode `emergency`: why the emergency guard answered instead of the literature."
    )
    disclaimer: str
    sources: list[SearchHit] = Field(
        description="The retrieved passages, strongest evidence first (equal evidence in retrieval order); each "
        "keeps its retrieval `rank`."
    )
    intelligence: QueryIntelligence
    interaction: InteractionOut | None = None
    agent: AgentTrace | None = None
    timings_ms: dict[str, float] = Field(default_factory=dict)


class QueryTools:
    """The agent's tools over the backend."""

    def __init__(self, ctx: WorkflowContext, body: QueryRequest, trace_id: str):
        self.ctx = ctx
        self.body = body
        self.trace_id = trace_id
        self.interaction: InteractionCheck | None = None

    async def search_literature(self, query: str) -> ToolOutput:
        reply = await self.ctx.backend.retrieve(
            RetrievalRequest(
                trace_id=self.trace_id,
                query=query[:10_000],
                top_k=self.body.top_k,
                top_n=self.body.top_n,
                mode=self.body.search_mode,
                filters=self.body.filters,
            )
        )
        return ToolOutput("", reply.hits)

    async def get_guideline(self, condition: str, findings: list[str]) -> ToolOutput:
        form = QueryForm.condition_findings(condition, findings)
        filters = self.body.filters.model_copy(update={"sources": guideline_sources()})
        reply = await self.ctx.backend.retrieve(
            RetrievalRequest(
                trace_id=self.trace_id,
                top_k=self.body.top_k,
                top_n=self.body.top_n,
                mode=self.body.search_mode,
                filters=filters,
                query_form=form,
            )
        )
        return ToolOutput("" if reply.hits else "No guideline section matched.", reply.hits)

    def checker(self) -> InteractionChecker:
        """The drug interaction check over this request's retrieval."""
        return InteractionChecker(
            self.ctx.rxnav,
            self.ctx.backend.retrieve,
            trace_id=self.trace_id,
            passages=self.ctx.settings.workflow.interaction_passages,
            min_score=self.ctx.settings.relevance_floor,
            fetch=self.ctx.fetch,
        )

    async def check_drug_interaction(self, drugs: list[str]) -> ToolOutput:
        check = await self.checker().check(drugs)
        self.interaction = check
        return ToolOutput(check.text(), check.sources(), {"status": check.status, "configured": check.configured})


class QueryWorkflow(Workflow):
    def analyser(self) -> QueryAnalyser:
        """The query understanding shared with ``/v1/ask``, here with MeSH headings for the offline enhancement."""
        return QueryAnalyser(
            self.llm, self.ctx.cache, ttl_s=self.settings.workflow.cache_ttl_s, vocabulary=self.backend.mesh_vocabulary
        )

    @metered
    async def run(self, body: QueryRequest) -> QueryResponse:
        run = Run()
        trace_id = new_trace_id()
        question = body.question.strip()
        t0 = time.perf_counter()
        analysis = await self.analyser().analyse(question)
        classification, enh = analysis.classification, analysis.enhancement
        run.lap("analysis", t0)
        intelligence = analysis.intelligence()
        answer_language = analysis.answer_language
        if analysis.emergency:
            intelligence.route.append("emergency: answered at once, no retrieval and no model")
            emergency = emergency_reply(await acheck_emergency(question), trace_id)
            return QueryResponse(
                question=question,
                answer=emergency.answer,
                numbered_answer=emergency.answer,
                mode="emergency",
                model=None,
                answer_language="en",
                citations=[],
                citation_check=CitationCheck(),
                summary=None,
                emergency=emergency.emergency,
                disclaimer=emergency.disclaimer,
                sources=[],
                intelligence=intelligence,
                timings_ms=run.total(),
            )
        instruction = analysis.instruction
        if body.mode == "agent":
            return await self._agent(
                body,
                question,
                classification,
                enh,
                intelligence,
                instruction,
                answer_language,
                trace_id,
                run,
            )
        checked = await check_interaction(
            QueryTools(self.ctx, body, trace_id).checker(), analysis, question, intelligence
        )
        interaction = interaction_out(checked) if checked is not None else None
        t0 = time.perf_counter()

        async def retrieve(filters: SearchFilters) -> RetrievalReply:
            return await self.backend.retrieve(
                RetrievalRequest(
                    trace_id=trace_id,
                    query=enh.search_query[:10_000],
                    top_k=body.top_k,
                    top_n=body.top_n,
                    mode=body.search_mode,
                    filters=filters,
                )
            )

        hits = await routed_search(
            retrieve, classification.category, body.filters, self.settings.relevance_floor, intelligence
        )
        if checked is not None:  # the label passages the check quotes are the answer's to cite too
            found = {h.chunk_id for h in hits}
            hits = [h for h in checked.sources() if h.chunk_id not in found] + hits
        run.lap("retrieval", t0)
        t0 = time.perf_counter()
        synth = await self.backend.synthesize(
            SynthesisRequest(
                trace_id=trace_id,
                question=analysis.question_for_synthesis(enh.english_question),
                passages=hits,
                summarize=body.summary,
            )
        )
        run.lap("synthesis", t0)
        return QueryResponse(
            question=question,
            answer=with_interaction(synth.answer, interaction),
            numbered_answer=with_interaction(synth.numbered_answer or synth.answer, interaction),
            mode=synth.mode,
            model=synth.model,
            answer_language=answer_language if synth.mode == "llm" else "en",
            citations=synth.citations,
            citation_check=synth.citation_check,
            summary=synth.summary,
            agreement=synth.agreement,
            disclaimer=synth.disclaimer or DISCLAIMER,
            sources=strongest_evidence_first(hits) if body.return_sources else [],
            intelligence=intelligence,
            interaction=interaction,
            timings_ms=run.total(),
        )

    async def _checked_answer(
        self, draft: str, sources: list[SearchHit], question: str, trace_id: str
    ) -> SynthesisReply:
        """The agent's answer checked by the synthesizer as one it composed: its citations verified and numbered,
        its claims' support checked, and each citation tied to the source's sentences the claims rest on (a
        claim no sentence supports marked so)."""
        return await self.backend.synthesize(
            SynthesisRequest(
                trace_id=trace_id, question=question[:10_000], passages=sources, draft=draft, summarize=False
            )
        )

    async def _agent(
        self,
        body: QueryRequest,
        question: str,
        classification: Classification,
        enh: Enhancement,
        intelligence: QueryIntelligence,
        instruction: str,
        answer_language: str,
        trace_id: str,
        run: Run,
    ) -> QueryResponse:
        tools = QueryTools(self.ctx, body, trace_id)
        agent = Agent(self.llm, tools, max_steps=self.settings.workflow.agent_max_steps)
        t0 = time.perf_counter()
        interaction: InteractionOut | None = None
        if self.llm.available:
            intelligence.route.append("agent: Claude chose the tools")
            agent_run = await agent.run(question, instruction=instruction)
            run.lap("agent", t0)
            raw = agent_run.answer or ""
            verified = CitationVerifier(agent_run.sources).verify(raw)
            numbered = CitationVerifier(agent_run.sources).verify(raw, renumber=True)
            mode = "llm" if verified.citations or not agent_run.sources else "insufficient-evidence"
            answer, numbered_text = verified.text or INSUFFICIENT, numbered.text or INSUFFICIENT
            citations, check, summary = verified.citations, verified.check, None
            agreement: Agreement | None = None
            model: str | None = self.llm.model
            if verified.citations:
                t1 = time.perf_counter()
                spanned = await self._checked_answer(raw, agent_run.sources, enh.english_question, trace_id)
                run.lap("synthesis", t1)
                answer, numbered_text = spanned.answer, spanned.numbered_answer or spanned.answer
                citations, check, agreement = spanned.citations, spanned.citation_check, spanned.agreement
        else:
            intelligence.route.append(
                "agent: no model configured, so the tools were chosen by rules from the "
                f"question's class ({classification.category})"
            )
            agent_run = await agent.run_rules(question, classification.category, enh.search_query)
            run.lap("agent", t0)
            t1 = time.perf_counter()
            synth = await self.backend.synthesize(
                SynthesisRequest(
                    trace_id=trace_id,
                    question=enh.english_question[:10_000],
                    passages=agent_run.sources,
                    summarize=body.summary,
                )
            )
            run.lap("synthesis", t1)
            answer, numbered_text = synth.answer, synth.numbered_answer or synth.answer
            citations, check, model, summary, mode, agreement = (
                synth.citations,
                synth.citation_check,
                synth.model,
                synth.summary,
                synth.mode,
                synth.agreement,
            )
            answer_language = "en"
            checked = next((s for s in agent_run.steps if s.tool == "check_drug_interaction"), None)
            if checked is not None:
                answer = f"Drug interaction check: {checked.output}\n\n{answer}"
                numbered_text = f"Drug interaction check: {checked.output}\n\n{numbered_text}"
        last = tools.interaction
        if last is not None:
            interaction = interaction_out(last)
        return QueryResponse(
            question=question,
            answer=answer,
            numbered_answer=numbered_text,
            mode=mode,
            model=model,
            answer_language=answer_language,
            citations=citations,
            citation_check=check,
            summary=summary,
            agreement=agreement,
            disclaimer=DISCLAIMER,
            sources=strongest_evidence_first(agent_run.sources) if body.return_sources else [],
            intelligence=intelligence,
            interaction=interaction,
            agent=AgentTrace(
                planner=agent_run.planner,
                stop_reason=agent_run.stop_reason,
                steps=[
                    AgentStepOut(
                        step=s.step, tool=s.tool, input=s.input, output=s.output, source_ids=s.source_ids, error=s.error
                    )
                    for s in agent_run.steps
                ],
            ),
            timings_ms=run.total(),
        )


@router.post(
    "/v1/query",
    response_model=QueryResponse,
    summary="A question with query intelligence: classified, language detected, enhanced and "
    "routed; `mode: agent` for Claude with tools",
    responses={**FETCH_403},
)
async def query(body: QueryRequest, ctx: ContextDep) -> QueryResponse:
    ctx.request_fetch(body.fetch)
    return await QueryWorkflow(ctx).run(body)
