"""What more than one request or response body shares: the checks of a question's size, the pieces of the
answering routes' responses (``/v1/ask`` and the workflows) and the workflows' step and cost fields."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from shared.events import LlmCall, TokenUsage
from shared.models import QueryForm, check_query_length
from shared.settings import get_settings

#: The shortest question answered: at least this many characters (surrounding blanks not counted), one of them a
#: letter (the medical assistant's ``QueryInput`` rule: "Query too short" below 3). Shorter: 422 with the reason.
MIN_QUESTION_CHARS = 3


def check_question_length(text: str, what: str) -> None:
    """Refuse a question too short to search: under :data:`MIN_QUESTION_CHARS` characters or without a letter."""
    stripped = text.strip()
    if len(stripped) < MIN_QUESTION_CHARS:
        raise ValueError(
            f"{what} is too short ({len(stripped)} characters): ask at least {MIN_QUESTION_CHARS} characters, "
            "e.g. a drug or condition name"
        )
    if not any(c.isalpha() for c in stripped):
        raise ValueError(f"{what} has no letter: ask in words, e.g. a drug or condition name")


def check_query_terms(text: str, what: str) -> None:
    """Refuse a query longer than the longest useful one (``EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS``)."""
    check_query_length(text, what, get_settings().retrieval.max_query_terms)


def check_query_form(form: QueryForm, what: str) -> None:
    """Refuse a query form whose rendered text is longer than a query may be (as :func:`check_query_terms`)."""
    form.check_length(get_settings().retrieval.max_query_terms, what)


# --- the workflows' steps and cost -------------------------------------------------------------


class WorkflowStep(BaseModel):
    """One step of a workflow, as it ran (also streamed as a ``step`` server-sent event)."""

    name: str
    status: Literal["running", "done", "skipped", "failed"]
    detail: str = ""
    data: dict[str, Any] = Field(default_factory=dict)
    ms: float | None = None


class Metered(BaseModel):
    """What an answer cost in Claude calls (all 0 and no calls offline, where no model is called)."""

    tokens_used: TokenUsage = Field(
        default_factory=TokenUsage, description="Tokens of every Claude call made for this answer, added up."
    )
    llm_calls: list[LlmCall] = Field(
        default_factory=list, description="Each Claude call made for this answer: service, step, model, tokens."
    )


# --- query understanding, as the answering routes report it ---------------------------------------


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


class InteractionOut(BaseModel):
    drugs: list[str]
    configured: bool
    text: str
