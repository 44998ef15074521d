"""Request and response bodies of the clinical workflows (``/v1/evidence``, ``/v1/guidelines/recommend``,
``/v1/guidelines/consult``, ``/v1/query``); they make the OpenAPI schema."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from services.gateway.intelligence.expansion import DrugProfile
from services.gateway.schemas.common import check_query_form, check_query_terms
from shared.events import Citation, CitationCheck, EmergencyCheck, EvidenceSummary, LlmCall, TokenUsage
from shared.models import (
    DEFAULT_TOP_K,
    DEFAULT_TOP_N,
    MAX_QUERY_CHARS,
    AnswerTopN,
    ClinicalFindingType,
    QueryForm,
    SearchFilters,
    SearchHit,
    SearchMode,
    TopK,
    finding_text,
)


class WorkflowStep(BaseModel):
    """One step of a workflow, as it ran (also streamed as a ``step`` server-sent event)."""

    name: str
    status: Literal["running", "done", "skipped", "failed"]
    detail: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    ms: float | None = None


# --- 1. drug-disease evidence ------------------------------------------------------------------


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


class Metered(BaseModel):
    """What an answer cost in Claude calls (all 0 and no calls offline, where no model is called)."""

    tokens_used: TokenUsage = Field(
        default_factory=TokenUsage, description="Tokens of every Claude call made for this answer, added up."
    )
    llm_calls: list[LlmCall] = Field(
        default_factory=list, description="Each Claude call made for this answer: service, step, model, tokens."
    )


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
    steps: list[WorkflowStep]
    disclaimer: str
    timings_ms: dict[str, float] = Field(default_factory=dict)


# --- 2. guideline recommendation -------------------------------------------------------------


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
    disclaimer: str
    timings_ms: dict[str, float] = Field(default_factory=dict)


# --- 2b. guideline consultation: an interview in, findings and a diagnosis out, then the recommendation -----

MAX_INTERVIEW_CHARS = 50_000


class InterviewMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: Literal["user", "assistant"] = Field(
        description="user: the patient (or whoever answers for them); assistant: the interviewer."
    )
    content: str = Field(min_length=1, max_length=5000, description="What was said.")


class ConsultRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    messages: list[InterviewMessage] = Field(
        min_length=1,
        max_length=100,
        description=f"The interview so far, oldest first (at most {MAX_INTERVIEW_CHARS} characters in all).",
    )
    diagnosis: str | None = Field(
        None,
        min_length=1,
        max_length=300,
        description="The working diagnosis, if the caller has one: it is used as given. Required offline "
        "(no API key), where no model can state one.",
    )
    min_confidence: float = Field(
        0.6, ge=0, le=1, description="The model's working diagnosis is acted on only at this confidence (0-1) or above."
    )
    population: str | None = Field(None, max_length=200, description="e.g. 'adult', 'child under 5'.")
    top_k: TopK = DEFAULT_TOP_K
    top_n: AnswerTopN = DEFAULT_TOP_N
    mode: SearchMode = "hybrid"

    @model_validator(mode="after")
    def _sizes(self) -> ConsultRequest:
        if all(not m.content.strip() for m in self.messages):
            raise ValueError("the interview is blank")
        if sum(len(m.content) for m in self.messages) > MAX_INTERVIEW_CHARS:
            raise ValueError(f"the interview is longer than {MAX_INTERVIEW_CHARS} characters")
        if self.diagnosis is not None and not self.diagnosis.strip():
            raise ValueError("diagnosis is blank")
        return self


class ConsultFinding(BaseModel):
    type: ClinicalFindingType
    text: str = Field(description="The finding in a few words, e.g. 'fever for 3 days'.")
    value: str | None = Field(None, description="Its value, if it has one: '3 days', '38.9 C', '28'.")
    source: Literal["llm", "rules"] = Field(
        description="llm: Claude extracted it (extract_findings step); rules: the documented offline rules."
    )


class ConsultResponse(Metered):
    status: Literal["needs_findings", "recommended"] = Field(
        description="recommended: a diagnosis was known and the guideline recommendation ran; needs_findings: "
        "no diagnosis yet, nothing was retrieved, `missing` says what to ask."
    )
    findings: list[ConsultFinding]
    extraction: Literal["llm", "rules"] = Field(description="Who extracted the findings.")
    diagnosis: str | None = Field(description="The working diagnosis (the caller's, or the model's).")
    confidence: float | None = Field(
        None, description="The model's confidence in its working diagnosis, 0 to 1 (None when the caller gave it)."
    )
    diagnosis_source: Literal["llm", "caller"] | None = Field(
        None, description="caller (the request's `diagnosis`) or llm (stated by Claude at `min_confidence` or above)."
    )
    missing: list[str] = Field(default_factory=list, description="What to ask next: findings still needed.")
    notes: list[str] = Field(default_factory=list)
    recommendation: GuidelineResponse | None = Field(
        None, description="The guideline recommendation (as `/v1/guidelines/recommend` answers), when it ran."
    )
    disclaimer: str
    timings_ms: dict[str, float] = Field(default_factory=dict)


# --- 3. query intelligence -------------------------------------------------------------------


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

    @model_validator(mode="after")
    def _blank(self) -> QueryRequest:
        if not self.question.strip():
            raise ValueError("question is blank")
        check_query_terms(self.question, "question")
        return self


class ClassificationOut(BaseModel):
    category: str = Field(
        description="drug_information, disease_information, drug_interaction, guideline, emergency or other."
    )
    method: str
    signals: list[str] = Field(default_factory=list)


class LanguageOut(BaseModel):
    code: str
    name: str
    confidence: float
    method: str


class QueryIntelligence(BaseModel):
    classification: ClassificationOut
    language: LanguageOut
    english_question: str = Field(
        description="The question in English (as asked when it is English or could not be translated)."
    )
    searched_query: str = Field(description="What retrieval actually searched.")
    enhancement: str = Field(description="llm (Claude rewrite), mesh (stored MeSH headings), none, untranslated.")
    terms: list[str] = Field(default_factory=list, description="Terms or MeSH descriptors added.")
    translated: bool = False
    route: list[str] = Field(default_factory=list, description="How the question was routed, step by step.")
    notes: list[str] = Field(default_factory=list)


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


class InteractionOut(BaseModel):
    drugs: list[str]
    configured: bool
    text: str


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
