"""Bodies of ``/v1/ask`` and ``/v1/ask/stream``: one turn of a conversation."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, model_validator

from services.gateway.schemas.common import check_query_terms
from shared.events import Citation, CitationCheck, EmergencyCheck, EvidenceSummary, LlmCall, TokenUsage
from shared.models import SearchFilters, SearchHit, SearchMode


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
