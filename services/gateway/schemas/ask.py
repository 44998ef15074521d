"""Bodies of ``/v1/ask`` and ``/v1/ask/stream``: one turn of a conversation."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from services.gateway.schemas.common import (
    MIN_QUESTION_CHARS,
    FetchMode,
    FetchReport,
    InteractionOut,
    QueryIntelligence,
    check_query_terms,
    check_question_length,
)
from shared.events import (
    Agreement,
    Citation,
    CitationCheck,
    EmergencyCheck,
    EvidenceSummary,
    LlmCall,
    TokenUsage,
)
from shared.models import (
    DEFAULT_TOP_K,
    DEFAULT_TOP_N,
    AnswerTopN,
    SearchFilters,
    SearchHit,
    SearchMode,
    Source,
    TopK,
    evidence_level_weight,
)

#: ``source_types`` as the medical assistant's ``QueryInput`` names them -> the stored sources they search.
SOURCE_TYPES: dict[str, Source] = {
    "pubmed": "pubmed",
    "pmc": "pmc",
    "bookshelf": "bookshelf",
    "guidelines": "bookshelf",
    "clinicaltrials": "clinicaltrials",
    "fda_label": "fda_label",
}
SourceType = Literal["pubmed", "pmc", "bookshelf", "guidelines", "clinicaltrials", "fda_label"]


class AskRequest(BaseModel):
    """A question (the medical assistant's ``QueryInput``: ``message`` is accepted for ``question``, and
    ``language``, ``source_types`` and ``min_evidence_level`` with their documented meaning)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    question: str = Field(
        min_length=1,
        max_length=10_000,
        validation_alias=AliasChoices("question", "message"),
        description=f"The question (alias: `message`), {MIN_QUESTION_CHARS}..10,000 characters with at least one "
        "letter, and at most 200 terms (`EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS`); shorter or longer: 422 with the "
        "reason.",
    )
    conversation_id: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Continue this conversation (from an earlier answer); absent: start a new one.",
    )
    filters: SearchFilters = Field(default_factory=SearchFilters)
    top_k: TopK = DEFAULT_TOP_K
    top_n: AnswerTopN = DEFAULT_TOP_N
    mode: SearchMode = "hybrid"
    return_sources: bool = Field(True, description="Include the retrieved passages in the response.")
    summary: bool = Field(True, description="Include the structured evidence summary.")
    language: str | None = Field(
        None,
        pattern=r"^[A-Za-z]{2}$",
        description="The asker's language, an ISO 639-1 code (`fr`, `de`...): with an API key the answer is written "
        "in it. Absent: the question's detected language (`query_intelligence.language`).",
    )
    source_types: list[SourceType] | None = Field(
        None,
        min_length=1,
        description="Which sources to search: `pubmed`, `pmc`, `bookshelf` or its alias `guidelines` (NCBI Bookshelf "
        "guidelines). Sets `filters.sources`; absent: every source (or `filters.sources`).",
    )
    fetch: FetchMode | None = Field(
        None,
        description="Search PubMed at question time: `auto` (the default for a key with the `ingest` scope) when "
        "fewer than 3 retrieved sources clear the relevance floor, `always`, or `never` (the default without "
        "`ingest`; `always` without it: 403). New records (at most `EVIDENTIA_ASK_FETCH_MAX_DOCUMENTS`) are "
        "ingested as a job and waited for up to `EVIDENTIA_ASK_FETCH_BUDGET_S`; the response's `fetch` says what "
        "happened.",
    )
    min_evidence_level: int | None = Field(
        None,
        ge=1,
        le=5,
        description="Only sources of at least this evidence level, 1 (strongest: systematic review, meta-analysis) .. "
        "5 (everything): mapped onto the stored evidence weights by `shared.models.evidence_level_weight` (1: 1.0, "
        "2: 0.9 RCT, 3: 0.7, 4: 0.5, 5: 0) and sets `filters.min_evidence_level`.",
    )

    @model_validator(mode="after")
    def _valid(self) -> AskRequest:
        if not self.question.strip():
            raise ValueError("question is blank")
        if "\x00" in self.question:
            raise ValueError("question may not contain NUL (\\u0000) characters")
        check_question_length(self.question, "question")
        check_query_terms(self.question, "question")
        f = self.filters
        if f.year_from is not None and f.year_to is not None and f.year_from > f.year_to:
            raise ValueError(f"filters.year_from ({f.year_from}) is after filters.year_to ({f.year_to})")
        update: dict[str, object] = {}
        if self.source_types is not None:
            sources = list(dict.fromkeys(SOURCE_TYPES[t] for t in self.source_types))
            if f.sources and set(f.sources) != set(sources):
                raise ValueError(
                    f"source_types {self.source_types} and filters.sources {f.sources} disagree: give one of them"
                )
            update["sources"] = sources
        if self.min_evidence_level is not None:
            weight = evidence_level_weight(self.min_evidence_level)
            if f.min_evidence_level is not None and abs(f.min_evidence_level - weight) > 1e-9:
                raise ValueError(
                    f"min_evidence_level {self.min_evidence_level} (weight {weight}) and filters.min_evidence_level "
                    f"{f.min_evidence_level} disagree: give one of them"
                )
            update["min_evidence_level"] = weight
        if self.language is not None:
            self.language = self.language.lower()
        if update:
            self.filters = f.model_copy(update=update)
        return self


class AskResponse(BaseModel):
    question: str
    conversation_id: str = Field(description="Send it back with the next question to continue the conversation.")
    turn: int = Field(description="This answer's turn in the conversation, from 1.")
    standalone_question: str = Field(description="The question as searched: follow-ups are rewritten to stand alone.")
    answer: str = Field(description="The answer citing sources inline as [PMID:...] (or PMCID:/NBK: ids).")
    numbered_answer: str = Field(description="The same answer citing conversation-wide display numbers [1], [2]...")
    mode: str = Field(description="llm, extractive (no API key), insufficient-evidence or emergency.")
    model: str | None
    citations: list[Citation] = Field(description="The sources this answer cites, with their display numbers.")
    references: list[Citation] = Field(
        default_factory=list, description="The conversation's reference list so far: every source cited, by number."
    )
    citation_check: CitationCheck
    summary: EvidenceSummary | None = Field(None, description="The structured evidence summary.")
    agreement: Agreement | None = Field(
        None,
        description="Where the cited sources agree and disagree on the answer's main finding: a label and the counts "
        "per source (Claude only; offline none, and `reason` says why). None for emergencies and no answer.",
    )
    emergency: EmergencyCheck | None = Field(
        None, description="Mode `emergency`: why the emergency guard answered instead of the literature."
    )
    disclaimer: str
    sources: list[SearchHit] = Field(
        default_factory=list,
        description=(
            "The retrieved passages, strongest evidence first (`evidence_level`, unknown counting as 0.5), equal "
            "evidence in retrieval order; each keeps its retrieval `rank`."
        ),
    )
    timings_ms: dict[str, float] = Field(default_factory=dict)
    tokens_used: TokenUsage = Field(
        default_factory=TokenUsage,
        description="Tokens of every Claude call made for this answer, added up (all 0 offline: no call is made).",
    )
    llm_calls: list[LlmCall] = Field(
        default_factory=list, description="Each Claude call made for this answer: service, step, model, tokens."
    )
    query_intelligence: QueryIntelligence | None = Field(
        None,
        description=(
            "The query-intelligence steps as they ran (shared with `/v1/query`): the class (`classification`), the "
            "detected `language`, the question in English and what was searched (`translated`: Claude translated "
            "it, API key only; `enhancement` `translation`, `none` or `untranslated`: MeSH enhancement is not run "
            "here) and the `route` taken."
        ),
    )
    answer_language: str | None = Field(
        None,
        description="The language the answer is written in (ISO 639-1): the asker's (`language`, else detected) when "
        "Claude wrote it, `en` otherwise.",
    )
    interaction: InteractionOut | None = Field(
        None, description="A drug-interaction question: the interaction service's check, also said first in the answer."
    )
    fetch: FetchReport | None = Field(
        None, description="The question's PubMed search at question time (request `fetch`); null for an emergency."
    )
