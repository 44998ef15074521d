"""The gateway's HTTP request and response bodies (they make the OpenAPI schema)."""

from __future__ import annotations

from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from shared.events import Citation, CitationCheck, EmergencyCheck, EvidenceSummary, LlmCall, TokenUsage
from shared.models import ParsedDocument, QueryForm, SearchFilters, SearchHit, SearchMode, query_terms
from shared.settings import get_settings


def check_query_terms(text: str, what: str) -> None:
    """Refuse a query longer than the longest useful one (``EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS``)."""
    cap = get_settings().retrieval.max_query_terms
    n = len(query_terms(text))
    if n > cap:
        raise ValueError(
            f"{what} has {n} terms; at most {cap} are searched (EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS): "
            "shorten it to the question or the key terms"
        )


class IngestRequest(BaseModel):
    """Start an ingestion job: a PubMed query, a list of PMIDs, a Bookshelf publisher, or documents given
    inline (JSON import)."""

    model_config = ConfigDict(extra="forbid")

    query: str | None = Field(None, min_length=1, max_length=4000, description="A PubMed query (esearch).")
    pmids: list[str] = Field(default_factory=list, max_length=10_000, description="PubMed ids.")
    documents: list[ParsedDocument] = Field(
        default_factory=list, max_length=1000, description="Documents in the JSON-lines import format."
    )
    max_results: int = Field(500, ge=1, le=100_000, description="Most PMIDs taken from the query.")
    refresh: bool = Field(False, description="Fetch again documents already stored.")
    full_text: bool = Field(False, description="Also fetch the open-access PMC full text (JATS) of the PMIDs found.")
    bookshelf_publisher: str | None = Field(
        None,
        min_length=1,
        max_length=300,
        description="Ingest the NCBI Bookshelf Open Access books of this publisher, e.g. 'World Health Organization'.",
    )

    @model_validator(mode="after")
    def _something(self) -> IngestRequest:
        if not (self.query or self.pmids or self.documents or self.bookshelf_publisher):
            raise ValueError("give a query, pmids, bookshelf_publisher or documents")
        if "\\u0000" in self.model_dump_json():
            raise ValueError("text may not contain NUL (\\u0000) characters")
        bad = [p for p in self.pmids if not p.strip().isdigit()]
        if bad:
            raise ValueError(f"PMIDs are digits only; not: {bad[:5]}")
        return self


class IngestAccepted(BaseModel):
    job_id: str
    status_url: str


class SearchRequest(BaseModel):
    """A search: a free question, or a structured query form (therapeutic intent; condition + findings)."""

    model_config = ConfigDict(extra="forbid")

    query: str | None = Field(
        None,
        min_length=1,
        max_length=10_000,
        description="A question or search terms, at most 200 terms (`EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS`; "
        "longer: 422). May be left out when `query_form` is given.",
    )
    query_form: QueryForm | None = Field(
        None,
        description=(
            'A structured query. `therapeutic` (drug + disease) embeds "Evidence for {drug} as a treatment '
            'for {disease}, including clinical trials, efficacy data, and mechanism of action"; '
            '`condition-findings` embeds "{condition}. {finding}. ...". Lexical search matches their terms.'
        ),
    )
    top_k: int = Field(20, ge=1, le=200, description="Candidates kept after fusion and handed to the reranker.")
    top_n: int = Field(5, ge=1, le=100, description="Passages returned (after reranking).")
    mode: SearchMode = Field(
        "hybrid",
        description=(
            "dense (pgvector HNSW, cosine), lexical (BM25 in PostgreSQL), hybrid (reciprocal rank fusion of "
            "both) or hybrid+rerank (hybrid, then the top_k reranked by a cross-encoder or Claude)."
        ),
    )
    reranker: Literal["auto", "none", "cross-encoder", "llm"] | None = Field(
        None, description="Reranker of hybrid+rerank; default: the retriever's `EVIDENTIA_RETRIEVAL_RERANKER`."
    )
    mmr: bool = Field(False, description="Diversify the returned passages with maximal marginal relevance.")
    mmr_lambda: float | None = Field(
        None, ge=0, le=1, description="MMR trade-off (1 = relevance only); default: the retriever's setting."
    )
    filters: SearchFilters = Field(
        default_factory=SearchFilters,
        description=(
            "Year range, journals, study types, minimum evidence level, MeSH descriptors (with descendants), "
            "sources; retracted papers are excluded unless asked for; max passages per paper."
        ),
    )
    ef_search: int | None = Field(None, ge=1, le=1000, description="HNSW ef_search for this query.")

    @model_validator(mode="after")
    def _has_query(self) -> SearchRequest:
        if self.query is None and self.query_form is None:
            raise ValueError("give a query or a query_form")
        if "\\u0000" in self.model_dump_json():
            raise ValueError("text may not contain NUL (\\u0000) characters")
        if self.query is not None and not self.query.strip():
            raise ValueError("query is blank")
        if self.query is not None:
            check_query_terms(self.query, "query")
        return self

    @property
    def query_text(self) -> str:
        """The display text of the query (the form's terms when no query was given)."""
        if self.query is not None:
            return self.query
        assert self.query_form is not None
        return self.query_form.keywords()


class SearchResponse(BaseModel):
    query: str
    hits: list[SearchHit]
    model: str | None
    took_ms: float
    tokens_used: TokenUsage = Field(
        default_factory=TokenUsage, description="Tokens of the LLM reranker's Claude calls (0 without one)."
    )
    llm_calls: list[LlmCall] = Field(default_factory=list, description="The LLM reranker's Claude calls, if any.")


class AskRequest(BaseModel):
    """A question (``QueryInput``: 1..10,000 characters; ``message`` is accepted for ``question``)."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    question: str = Field(
        min_length=1,
        max_length=10_000,
        validation_alias=AliasChoices("question", "message"),
        description="The question (alias: `message`), 1..10,000 characters and at most 200 terms "
        "(`EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS`; longer: 422).",
    )
    conversation_id: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Continue this conversation (from an earlier answer); absent: start a new one.",
    )
    filters: SearchFilters = Field(default_factory=SearchFilters)
    top_k: int = Field(20, ge=1, le=200)
    top_n: int = Field(5, ge=1, le=20)
    mode: SearchMode = "hybrid"
    return_sources: bool = Field(True, description="Include the retrieved passages in the response.")
    summary: bool = Field(True, description="Include the structured evidence summary.")

    @model_validator(mode="after")
    def _valid(self) -> AskRequest:
        if not self.question.strip():
            raise ValueError("question is blank")
        if "\x00" in self.question:
            raise ValueError("question may not contain NUL (\\u0000) characters")
        check_query_terms(self.question, "question")
        f = self.filters
        if f.year_from is not None and f.year_to is not None and f.year_from > f.year_to:
            raise ValueError(f"filters.year_from ({f.year_from}) is after filters.year_to ({f.year_to})")
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
    emergency: EmergencyCheck | None = Field(
        None, description="Mode `emergency`: why the emergency guard answered instead of the literature."
    )
    disclaimer: str
    sources: list[SearchHit] = Field(default_factory=list)
    timings_ms: dict[str, float] = Field(default_factory=dict)
    tokens_used: TokenUsage = Field(
        default_factory=TokenUsage,
        description="Tokens of every Claude call made for this answer, added up (all 0 offline: no call is made).",
    )
    llm_calls: list[LlmCall] = Field(
        default_factory=list, description="Each Claude call made for this answer: service, step, model, tokens."
    )
