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


FetchMode = Literal["auto", "always", "never"]


class FetchReport(BaseModel):
    """What the question's PubMed search did (``fetch``): the query, what it found, the records ingested for it
    and how long the answer waited for them."""

    mode: FetchMode = Field(description="The mode in force (`auto` acts as `never` without the `ingest` scope).")
    requested: FetchMode | None = Field(None, description="The mode asked for; null: the default.")
    searched: bool = Field(False, description="Whether PubMed was searched (or its cached search used).")
    query: str | None = Field(None, description="The PubMed query that found the records (the last tried if none).")
    queries_tried: list[str] = Field(default_factory=list, description="Each query tried, relaxed in order.")
    found: int = Field(0, description="PubMed records matching `query` (NCBI's count).")
    cached: bool = Field(False, description="The search came from the 5-day cache of this normalised question.")
    already_stored: int = Field(0, description="Best matches already in the store (not fetched again).")
    ingested: list[str] = Field(
        default_factory=list, description="Document ids fetched for this question and searchable before the answer."
    )
    pending: list[str] = Field(
        default_factory=list,
        description="Document ids fetched for this question not yet searchable when the wait ended: they serve "
        "the next question.",
    )
    failed: list[str] = Field(default_factory=list, description="Document ids whose ingestion failed.")
    waited_ms: float = Field(0.0, description="Time spent searching PubMed and waiting for the new records.")
    job_id: str | None = Field(None, description="The ingestion job (`GET /v1/ingest/{job_id}`).")
    reason: str | None = Field(
        None,
        description="Why PubMed was or was not searched, or why the answer came from the store without the "
        "fetched records (NCBI unreachable, nothing found...).",
    )


class LabelFetchOut(BaseModel):
    """The FDA labels the drug interaction check fetched from openFDA at question time."""

    drugs: list[str] = Field(description="The drugs whose labels were fetched (none was stored).")
    job_id: str | None = Field(None, description="The ingestion job (`GET /v1/ingest/{job_id}`).")
    state: str | None = Field(None, description="The job's state when the wait ended.")
    done: bool = Field(False, description="Whether the job ended within the wait.")
    error: str | None = Field(None, description="Why the job failed or was not started.")
    waited_ms: float = Field(0.0, description="How long the check waited for the labels.")


class InteractionFindingOut(BaseModel):
    """One FDA label passage that names another of the drugs."""

    label_of: str = Field(description="The drug whose label it is.")
    other: str = Field(description="The drug the passage names.")
    term: str = Field(description="What the passage names it as: a name, a brand name or its class.")
    section: str | None = Field(None, description="The label section (`Drug interactions`, `Contraindications`...).")
    excerpt: str = Field(description="The label's words around the name.")
    citation_id: str = Field(description="The label's citation id (`FDA:<set id>`).")
    url: str | None = Field(None, description="The label's page (DailyMed, current version).")


class InteractionOut(BaseModel):
    drugs: list[str]
    configured: bool = Field(description="Whether RxNav is configured (drugs are named as RxNorm concepts).")
    text: str
    status: Literal["found", "none_found", "not_checked"] = Field(
        "not_checked",
        description=(
            "`found`: a current FDA label of one drug names another; `none_found`: labels were read and name none "
            "of the others (not proof of safety); `not_checked`: the check could not be made (see `text`)."
        ),
    )
    rxcuis: dict[str, str] = Field(
        default_factory=dict, description="Drug -> its RxNorm concept, where RxNorm knew it."
    )
    findings: list[InteractionFindingOut] = Field(default_factory=list)
    labels_read: dict[str, list[str]] = Field(
        default_factory=dict, description="Drug -> the citation ids of its labels that were read."
    )
    missing_labels: list[str] = Field(
        default_factory=list, description="Drugs with no FDA label that could be read (stored, or fetched in time)."
    )
    missing_reasons: dict[str, str] = Field(
        default_factory=dict,
        description="Drug in `missing_labels` -> why its label was not read (not stored; not fetched within the "
        "wait; openFDA unreachable or without a label for it).",
    )
    label_fetch: LabelFetchOut | None = Field(
        None, description="The labels fetched from openFDA at question time (null: none were)."
    )
    literature_fetch: FetchReport | None = Field(
        None, description="PubMed searched for the pair at question time (null: not searched)."
    )
    literature: list[str] = Field(
        default_factory=list, description="Citation ids of the strongest literature passages on the pair."
    )
