"""Clinical workflows over the running services: ``/v1/evidence`` (drug-disease evidence),
``/v1/guidelines/recommend`` (condition + findings -> Assessment & Plan), ``/v1/guidelines/consult`` (an
interview -> findings and a working diagnosis -> the recommendation, once a diagnosis is known) and ``/v1/query``
(classification, language, enhancement, routing and agentic mode).

The workflow logic lives in :mod:`services.gateway.intelligence` (pure, tested without Kafka); this module
wires it to the services through a :class:`WorkflowBackend`: retrieval and synthesis over Kafka
request/reply, PubMed hit counts through the fetcher (``ncbi.requests``: the gateway never calls NCBI),
ingestion jobs through ``ingest.requests``, caches and MeSH headings in PostgreSQL
(:mod:`services.gateway.store`). Its routes are :mod:`services.gateway.routes.workflows`.

Each workflow answer reports what it cost (``tokens_used``, ``llm_calls``): the calls made here (on the fast
model, but the agent's and the guideline assessment's) and those the retriever and synthesizer made for it,
which come back in their replies.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ParamSpec, Protocol, TypeVar

import asyncpg

from services.gateway.intelligence.agent import Agent, ToolOutput
from services.gateway.intelligence.cache import Cache
from services.gateway.intelligence.classify import Classification
from services.gateway.intelligence.consult import (
    ClinicalFinding,
    llm_findings,
    recommend_kind,
    rule_findings,
    rule_questions,
)
from services.gateway.intelligence.disease import DiseaseNormalizer, drug_disease_query, search_clause
from services.gateway.intelligence.enhance import Enhancement
from services.gateway.intelligence.expansion import DrugProfile, SearchTermExpander
from services.gateway.intelligence.guidelines import attribute, plan_question, write_assessment
from services.gateway.intelligence.language import Language
from services.gateway.intelligence.llm import WorkflowLlm
from services.gateway.intelligence.rxnav import InteractionCheck, RxNavClient
from services.gateway.kafka import GatewayKafka
from services.gateway.schemas.workflows import (
    AgentStepOut,
    AgentTrace,
    ConsultFinding,
    ConsultRequest,
    ConsultResponse,
    DiseaseTerm,
    EvidenceRequest,
    EvidenceResponse,
    ExpandedQuery,
    Finding,
    GuidelineRequest,
    GuidelineResponse,
    GuidelineSection,
    IngestionSummary,
    InteractionOut,
    Metered,
    PlanItem,
    QueryIntelligence,
    QueryRequest,
    QueryResponse,
    WorkflowStep,
)
from services.gateway.sse import error_event, sse
from services.gateway.store import documents as documents_store
from services.gateway.understanding import QueryAnalyser, check_interaction, routed_search, with_interaction
from shared.citations import INSUFFICIENT, CitationVerifier
from shared.db.jobs import JobStatus, job_status
from shared.events import (
    CitationCheck,
    EvidenceSummary,
    IngestRequested,
    NcbiCountReply,
    NcbiCountRequest,
    RetrievalReply,
    RetrievalRequest,
    SynthesisReply,
    SynthesisRequest,
    new_trace_id,
)
from shared.ingestion import submit_documents
from shared.kafka.reply_client import RemoteError, RequestTimeout
from shared.kafka.topics import NCBI_REQUESTS
from shared.llm import absorb, usage_scope
from shared.models import QueryForm, SearchFilters, finding_text, strongest_evidence_first
from shared.safety import DISCLAIMER, acheck_emergency, emergency_reply
from shared.settings import Settings

log = logging.getLogger(__name__)

Progress = Callable[[WorkflowStep], Awaitable[None]]


class ConsultNeedsDiagnosis(ValueError):
    """A consultation that cannot go on: offline, no diagnosis given (HTTP 422 with this reason)."""


class WorkflowBackend(Protocol):
    """What the workflows need from the running system."""

    async def retrieve(self, request: RetrievalRequest) -> RetrievalReply: ...

    async def synthesize(self, request: SynthesisRequest) -> SynthesisReply: ...

    async def count(self, term: str, trace_id: str) -> int | None: ...

    async def ingest(self, query: str, max_results: int, trace_id: str) -> str: ...

    async def job(self, job_id: str) -> JobStatus | None: ...

    async def mesh_vocabulary(self) -> dict[str, int]: ...


class MeteredBackend:
    """A backend whose replies' Claude calls (``llm_calls``) go to the current usage ledger."""

    def __init__(self, inner: WorkflowBackend):
        self.inner = inner

    async def retrieve(self, request: RetrievalRequest) -> RetrievalReply:
        reply = await self.inner.retrieve(request)
        absorb(reply.llm_calls)
        return reply

    async def synthesize(self, request: SynthesisRequest) -> SynthesisReply:
        reply = await self.inner.synthesize(request)
        absorb(reply.llm_calls)
        return reply

    async def count(self, term: str, trace_id: str) -> int | None:
        return await self.inner.count(term, trace_id)

    async def ingest(self, query: str, max_results: int, trace_id: str) -> str:
        return await self.inner.ingest(query, max_results, trace_id)

    async def job(self, job_id: str) -> JobStatus | None:
        return await self.inner.job(job_id)

    async def mesh_vocabulary(self) -> dict[str, int]:
        return await self.inner.mesh_vocabulary()


P = ParamSpec("P")
M = TypeVar("M", bound=Metered)


def metered(fn: Callable[P, Awaitable[M]]) -> Callable[P, Awaitable[M]]:
    """The workflow's answer with ``tokens_used`` and ``llm_calls``: every Claude call made while it ran."""

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> M:
        with usage_scope() as ledger:
            result = await fn(*args, **kwargs)
        return result.model_copy(update={"tokens_used": ledger.total, "llm_calls": ledger.calls})

    return run


class GatewayBackend:
    """The backend of the running gateway: its Kafka client and its PostgreSQL pool (``pool`` gives the pool
    of the started gateway). The MeSH vocabulary is read again after ``mesh_ttl_s``."""

    def __init__(self, kafka: GatewayKafka, pool: Callable[[], asyncpg.Pool], mesh_ttl_s: float = 600.0):
        self.kafka = kafka
        self._pool = pool
        self._mesh: tuple[float, dict[str, int]] | None = None
        self.mesh_ttl_s = mesh_ttl_s

    @property
    def pool(self) -> asyncpg.Pool:
        return self._pool()

    async def retrieve(self, request: RetrievalRequest) -> RetrievalReply:
        return await self.kafka.retrieve(request)

    async def synthesize(self, request: SynthesisRequest) -> SynthesisReply:
        return await self.kafka.synthesize(request)

    async def count(self, term: str, trace_id: str) -> int | None:
        try:
            reply: NcbiCountReply = await self.kafka.replies.request(
                NCBI_REQUESTS,
                NcbiCountRequest(trace_id=trace_id, term=term),
                NcbiCountReply,
                self.kafka.settings.kafka.request_timeout_s,
            )
        except (RemoteError, RequestTimeout) as exc:
            log.warning("PubMed count unavailable", extra={"term": term, "error": str(exc)[:300]})
            return None
        return reply.count

    async def ingest(self, query: str, max_results: int, trace_id: str) -> str:
        job_id = uuid.uuid4().hex
        await submit_documents(
            self.pool,
            self.kafka.publish,
            self.kafka.settings.kafka,
            job_id=job_id,
            kind="query",
            params={"query": query, "max_results": max_results, "workflow": "evidence"},
            request=IngestRequested(trace_id=trace_id, job_id=job_id, query=query, max_results=max_results),
        )
        return job_id

    async def job(self, job_id: str) -> JobStatus | None:
        return await job_status(self.pool, job_id)

    async def mesh_vocabulary(self) -> dict[str, int]:
        now = time.monotonic()
        if self._mesh is not None and now - self._mesh[0] < self.mesh_ttl_s:
            return self._mesh[1]
        vocab = await documents_store.mesh_vocabulary(self.pool)
        self._mesh = (now, vocab)
        return vocab


def _ms(start: float) -> float:
    return round((time.perf_counter() - start) * 1000, 1)


async def _no_progress(step: WorkflowStep) -> None:
    return None


class _Tools:
    """The agent's tools over the backend."""

    def __init__(self, service: WorkflowService, body: QueryRequest, trace_id: str):
        self.service = service
        self.body = body
        self.trace_id = trace_id
        self.interaction: InteractionCheck | None = None

    async def search_literature(self, query: str) -> ToolOutput:
        reply = await self.service.backend.retrieve(
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
        filters = self.body.filters.model_copy(update={"sources": ["bookshelf"]})
        reply = await self.service.backend.retrieve(
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

    async def check_drug_interaction(self, drugs: list[str]) -> ToolOutput:
        check = await self.service.rxnav.check(drugs)
        self.interaction = check
        return ToolOutput(check.text(), [], {"configured": check.configured})


class WorkflowService:
    def __init__(
        self,
        settings: Settings,
        backend: WorkflowBackend,
        cache: Cache,
        llm: WorkflowLlm | None = None,
        rxnav: RxNavClient | None = None,
    ):
        self.settings = settings
        self.backend = backend  # the setter wraps it (MeteredBackend)
        self.cache = cache
        self.llm = llm or WorkflowLlm(settings.llm)
        w = settings.workflow
        self.rxnav = rxnav or RxNavClient(w.rxnav_url, timeout_s=w.rxnav_timeout_s)

    @property
    def backend(self) -> WorkflowBackend:
        return self._backend

    @backend.setter
    def backend(self, backend: WorkflowBackend) -> None:
        self._backend = backend if isinstance(backend, MeteredBackend) else MeteredBackend(backend)

    # --- 1. drug-disease evidence -------------------------------------------------------------------

    @metered
    async def evidence(self, body: EvidenceRequest, progress: Progress = _no_progress) -> EvidenceResponse:
        w = self.settings.workflow
        trace_id = new_trace_id()
        start = time.perf_counter()
        steps: list[WorkflowStep] = []
        timings: dict[str, float] = {}
        drug = body.drug.strip()

        async def step(name: str, status: str, detail: str, t0: float, **data: Any) -> None:
            s = WorkflowStep(
                name=name,
                status=status,
                detail=detail,
                data=data,  # type: ignore[arg-type]
                ms=_ms(t0),
            )
            steps.append(s)
            timings[name] = s.ms or 0.0
            await progress(s)

        async def count(term: str) -> int | None:
            return await self.backend.count(term, trace_id)

        t0 = time.perf_counter()
        await progress(WorkflowStep(name="normalise", status="running", detail=f"normalising {body.disease!r}"))
        normaliser = DiseaseNormalizer(self.llm, self.cache, count, min_results=w.min_results, ttl_s=w.cache_ttl_s)
        disease = await normaliser.normalise(body.disease.strip(), drug)
        await step(
            "normalise",
            "done",
            f"{body.disease!r} -> {disease.search_term!r}"
            + (f" ({disease.count} PubMed hits)" if disease.count is not None else ""),
            t0,
            method=disease.method,
            notes=disease.notes,
        )

        t0 = time.perf_counter()
        await progress(WorkflowStep(name="expand", status="running", detail="writing PubMed searches"))
        profile = body.drug_profile or DrugProfile()
        expander = SearchTermExpander(self.llm, self.cache, ttl_s=w.cache_ttl_s)
        expansion = await expander.expand(drug, disease.search_term, profile)
        queries = [ExpandedQuery(axis=q.axis, query=q.query) for q in expansion.queries[: w.evidence_max_queries]]
        await step(
            "expand",
            "done",
            f"{len(queries)} searches over {len({q.axis for q in queries})} axes; organ: {expansion.organ or 'none'}",
            t0,
            method=expansion.method,
            organ=expansion.organ,
            queries=[q.model_dump() for q in queries],
        )

        t0 = time.perf_counter()
        ingestion = IngestionSummary(finished=True)
        if body.ingest:
            await progress(WorkflowStep(name="fetch", status="running", detail=f"{len(queries)} ingestion jobs"))
            per_query = body.max_per_query or w.evidence_max_per_query
            for q in queries:
                q.job_id = await self.backend.ingest(q.query, per_query, trace_id)
                ingestion.jobs.append(q.job_id)
            ingestion = await self._wait_jobs(
                ingestion, body.wait_s if body.wait_s is not None else w.ingest_wait_s, progress
            )
            await step(
                "fetch",
                "done" if ingestion.finished else "failed",
                f"{ingestion.documents} documents found ({ingestion.failed} failed); stored ones are not "
                "fetched again" + ("" if ingestion.finished else "; not all jobs finished in time"),
                t0,
                jobs=ingestion.jobs,
            )
        else:
            await step("fetch", "skipped", "ingest=false: searching what is stored", t0)

        t0 = time.perf_counter()
        form = QueryForm(kind="therapeutic", drug=drug, disease=disease.normalised)
        await progress(
            WorkflowStep(name="search", status="running", detail=f"therapeutic intent: {drug} for {disease.normalised}")
        )
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
        therapeutic = reply.rendered_query or form.keywords()
        await step(
            "search",
            "done",
            f"{len(hits)} passages (top {body.top_k} -> {body.top_n}, {body.mode})",
            t0,
            pmids=[h.pmid for h in hits if h.pmid],
        )

        t0 = time.perf_counter()
        await progress(WorkflowStep(name="synthesize", status="running", detail="evidence summary"))
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
        await step(
            "synthesize", "done", f"{synth.mode}: strength {summary.strength}, {len(summary.key_findings)} findings", t0
        )
        timings["total"] = _ms(start)
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
            steps=steps,
            disclaimer=synth.disclaimer or DISCLAIMER,
            timings_ms=timings,
        )

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

    # --- 2. guideline recommendation ------------------------------------------------------------------

    @metered
    async def recommend(self, body: GuidelineRequest) -> GuidelineResponse:
        return await self._recommend(body)

    async def _recommend(self, body: GuidelineRequest) -> GuidelineResponse:
        trace_id = new_trace_id()
        start = time.perf_counter()
        findings = [finding_text(f.kind, f.value) for f in body.findings]
        form = body.query_form()
        t0 = time.perf_counter()
        reply = await self.backend.retrieve(  # the retriever renders the form and sends its text back
            RetrievalRequest(
                trace_id=trace_id,
                top_k=body.top_k,
                top_n=body.top_n,
                mode=body.mode,
                filters=SearchFilters(sources=["bookshelf"]),
                query_form=form,
            )
        )
        hits = reply.hits
        query = reply.rendered_query or form.keywords()
        timings = {"retrieval": _ms(t0)}
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
        timings["synthesis"] = _ms(t0)
        plan = [
            PlanItem(text=p.text, citation_ids=p.citation_ids, sections=p.sections)
            for p in attribute(synth.answer, hits)
        ]
        plan = [p for p in plan if p.citation_ids] or plan
        top = sections[0].title_path if sections else None
        t0 = time.perf_counter()
        assessment = await write_assessment(self.llm, body.condition, findings, body.population, hits)
        timings["assessment"] = _ms(t0)
        check = synth.citation_check
        if assessment.check.removed:  # what the assessment cited and may not is reported with the rest
            removed = list(dict.fromkeys([*check.removed, *assessment.check.removed]))
            check = check.model_copy(update={"removed": removed})
        timings["total"] = _ms(start)
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
            disclaimer=synth.disclaimer or DISCLAIMER,
            timings_ms=timings,
        )

    # --- 2b. guideline consultation --------------------------------------------------------------------

    @metered
    async def consult(self, body: ConsultRequest) -> ConsultResponse:
        """Findings and the working diagnosis from the interview (Claude's ``extract_findings`` step, or the
        documented rules); the recommend flow only once a diagnosis is known: the caller's, or the model's at
        ``min_confidence`` or above. Otherwise ``needs_findings``, with what to ask, and nothing retrieved.

        Raises :class:`ConsultNeedsDiagnosis` offline (no model) when the caller gave no diagnosis."""
        start = time.perf_counter()
        if body.diagnosis is None and not self.llm.available:
            raise ConsultNeedsDiagnosis(
                "offline (no ANTHROPIC_API_KEY), no model can state a diagnosis: give `diagnosis`; "
                "the findings are then extracted by the documented rules"
            )
        messages = [m.model_dump() for m in body.messages]
        notes: list[str] = []
        t0 = time.perf_counter()
        output = await self.llm.step("extract_findings", {"messages": messages}) if self.llm.available else None
        timings = {"extraction": _ms(t0)} if self.llm.available else {}
        findings: list[ClinicalFinding]
        if output is not None:
            findings, extraction = llm_findings(output), "llm"
            stated = str(output.get("diagnosis") or "").strip() or None
            confidence: float | None = float(output.get("confidence") or 0.0)
            missing = [str(q) for q in output.get("missing") or []]
        else:
            findings, extraction, stated, confidence = rule_findings(messages), "rules", None, None
            missing = rule_questions(findings)
            if self.llm.available:
                notes.append("the model's extraction failed: the findings are the documented rules'")
        diagnosis, source = stated, "llm" if stated else None
        if body.diagnosis is not None:
            if stated and stated.lower() != body.diagnosis.strip().lower():
                notes.append(f"the model's working diagnosis was {stated} ({confidence:.2f}); the caller's is used")
            diagnosis, source, confidence = body.diagnosis.strip(), "caller", None
        elif stated and (confidence or 0.0) < body.min_confidence:
            notes.append(f"working diagnosis {stated} at confidence {confidence:.2f}, below {body.min_confidence}")
            missing = missing or [f"What findings would confirm or rule out {stated}?"]
            source = None
        out = [ConsultFinding(type=f.type, text=f.text, value=f.value, source=f.source) for f in findings]
        disclaimer = DISCLAIMER
        if source is None:  # no diagnosis: nothing is retrieved
            timings["total"] = _ms(start)
            return ConsultResponse(
                status="needs_findings",
                findings=out,
                extraction=extraction,  # type: ignore[arg-type]
                diagnosis=stated,
                confidence=confidence,
                missing=missing or ["What is the working diagnosis?"],
                notes=notes,
                disclaimer=disclaimer,
                timings_ms=timings,
            )
        assert diagnosis is not None
        guideline = GuidelineRequest(
            condition=diagnosis,
            findings=[Finding(kind=recommend_kind(f.type), value=f.text) for f in findings][:50],
            population=body.population,
            top_k=body.top_k,
            top_n=body.top_n,
            mode=body.mode,
        )
        recommendation = await self._recommend(guideline)
        timings["recommendation"] = recommendation.timings_ms.get("total", 0.0)
        timings["total"] = _ms(start)
        return ConsultResponse(
            status="recommended",
            findings=out,
            extraction=extraction,  # type: ignore[arg-type]
            diagnosis=diagnosis,
            confidence=confidence,
            diagnosis_source=source,  # type: ignore[arg-type]
            missing=missing,
            notes=notes,
            recommendation=recommendation,
            disclaimer=recommendation.disclaimer,
            timings_ms=timings,
        )

    # --- 3. query intelligence ------------------------------------------------------------------------

    def analyser(self) -> QueryAnalyser:
        """The query intelligence shared with ``/v1/ask`` (:mod:`services.gateway.understanding`)."""
        return QueryAnalyser(
            self.llm, self.cache, ttl_s=self.settings.workflow.cache_ttl_s, vocabulary=self.backend.mesh_vocabulary
        )

    async def analyse(self, question: str) -> tuple[Classification, Language, Enhancement]:
        """Classification, language and enhancement of a question (usable by any answering route)."""
        a = await self.analyser().analyse(question)
        return a.classification, a.language, a.enhancement

    @metered
    async def query(self, body: QueryRequest) -> QueryResponse:
        start = time.perf_counter()
        trace_id = new_trace_id()
        question = body.question.strip()
        t0 = time.perf_counter()
        analysis = await self.analyser().analyse(question)
        classification, enh = analysis.classification, analysis.enhancement
        timings = {"analysis": _ms(t0)}
        intelligence = analysis.intelligence()
        answer_language = analysis.answer_language
        if analysis.emergency:
            intelligence.route.append("emergency: answered at once, no retrieval and no model")
            emergency = emergency_reply(await acheck_emergency(question), trace_id)
            timings["total"] = _ms(start)
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
                timings_ms=timings,
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
                start,
                timings,
            )
        interaction = await check_interaction(self.rxnav, analysis, question, intelligence)
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
        timings["retrieval"] = _ms(t0)
        t0 = time.perf_counter()
        synth = await self.backend.synthesize(
            SynthesisRequest(
                trace_id=trace_id,
                question=analysis.question_for_synthesis(enh.english_question),
                passages=hits,
                summarize=body.summary,
            )
        )
        timings["synthesis"] = _ms(t0)
        timings["total"] = _ms(start)
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
            disclaimer=synth.disclaimer or DISCLAIMER,
            sources=strongest_evidence_first(hits) if body.return_sources else [],
            intelligence=intelligence,
            interaction=interaction,
            timings_ms=timings,
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
        start: float,
        timings: dict[str, float],
    ) -> QueryResponse:
        tools = _Tools(self, body, trace_id)
        agent = Agent(self.llm, tools, max_steps=self.settings.workflow.agent_max_steps)
        t0 = time.perf_counter()
        interaction: InteractionOut | None = None
        if self.llm.available:
            intelligence.route.append("agent: Claude chose the tools")
            run = await agent.run(question, instruction=instruction)
            timings["agent"] = _ms(t0)
            raw = run.answer or ""
            verified = CitationVerifier(run.sources).verify(raw)
            numbered = CitationVerifier(run.sources).verify(raw, renumber=True)
            mode = "llm" if verified.citations or not run.sources else "insufficient-evidence"
            answer, numbered_text = verified.text or INSUFFICIENT, numbered.text or INSUFFICIENT
            citations, check, summary = verified.citations, verified.check, None
            model: str | None = self.llm.model
        else:
            intelligence.route.append(
                "agent: no model configured, so the tools were chosen by rules from the "
                f"question's class ({classification.category})"
            )
            run = await agent.run_rules(question, classification.category, enh.search_query)
            timings["agent"] = _ms(t0)
            t1 = time.perf_counter()
            synth = await self.backend.synthesize(
                SynthesisRequest(
                    trace_id=trace_id,
                    question=enh.english_question[:10_000],
                    passages=run.sources,
                    summarize=body.summary,
                )
            )
            timings["synthesis"] = _ms(t1)
            answer, numbered_text = synth.answer, synth.numbered_answer or synth.answer
            citations, check, model, summary, mode = (
                synth.citations,
                synth.citation_check,
                synth.model,
                synth.summary,
                synth.mode,
            )
            answer_language = "en"
            checked = next((s for s in run.steps if s.tool == "check_drug_interaction"), None)
            if checked is not None:
                answer = f"Drug interaction check: {checked.output}\n\n{answer}"
                numbered_text = f"Drug interaction check: {checked.output}\n\n{numbered_text}"
        last = tools.interaction
        if last is not None:
            interaction = InteractionOut(drugs=last.drugs, configured=last.configured, text=last.text())
        timings["total"] = _ms(start)
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
            disclaimer=DISCLAIMER,
            sources=strongest_evidence_first(run.sources) if body.return_sources else [],
            intelligence=intelligence,
            interaction=interaction,
            agent=AgentTrace(
                planner=run.planner,
                stop_reason=run.stop_reason,
                steps=[
                    AgentStepOut(
                        step=s.step, tool=s.tool, input=s.input, output=s.output, source_ids=s.source_ids, error=s.error
                    )
                    for s in run.steps
                ],
            ),
            timings_ms=timings,
        )

    async def evidence_events(self, body: EvidenceRequest) -> AsyncIterator[str]:
        """The evidence workflow as server-sent events: ``step`` per step as it runs, then ``result`` (or
        ``error``)."""
        queue: asyncio.Queue[str | None] = asyncio.Queue()

        async def progress(step: WorkflowStep) -> None:
            await queue.put(sse("step", step.model_dump()))

        async def run() -> None:
            try:
                result = await self.evidence(body, progress)
                await queue.put(sse("result", result.model_dump(mode="json")))
            except Exception as exc:  # the stream has started: an error event is the only way left
                await queue.put(error_event(exc))
            finally:
                await queue.put(None)

        task = asyncio.create_task(run())
        try:
            while (item := await queue.get()) is not None:
                yield item
        finally:
            if not task.done():
                task.cancel()


def _sourced(summary: EvidenceSummary | None) -> EvidenceSummary | None:
    """The summary with only the findings that name their sources (PMIDs on every claim)."""
    if summary is None:
        return None
    findings = [f for f in summary.key_findings if f.supporting_pmids]
    return summary.model_copy(update={"key_findings": findings})


__all__ = ["GatewayBackend", "WorkflowBackend", "WorkflowService", "drug_disease_query", "search_clause"]
