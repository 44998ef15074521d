"""Bodies of ``/v1/search``."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator

from services.gateway.schemas.common import check_query_form, check_query_terms
from shared.events import LlmCall, TokenUsage
from shared.models import THERAPEUTIC_TEMPLATE, SearchHit, SearchParameters, described


class SearchRequest(SearchParameters):
    """A search: a free question, or a structured query form (therapeutic intent; condition + findings)."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=described(
            {
                "query": "A question or search terms, at most 200 terms (`EVIDENTIA_RETRIEVAL_MAX_QUERY_TERMS`; "
                "longer: 422). May be left out when `query_form` is given.",
                "query_form": (
                    f'A structured query. `therapeutic` (drug + disease) embeds "{THERAPEUTIC_TEMPLATE}"; '
                    '`condition-findings` embeds "{condition}. {finding}. ...". Lexical search matches their terms. '
                    "The text it renders to has the limits of `query` (longer: 422)."
                ),
                "top_k": "Candidates kept after fusion and handed to the reranker.",
                "top_n": "Passages returned (after reranking).",
                "mode": (
                    "dense (pgvector HNSW, cosine), lexical (BM25 in PostgreSQL), hybrid (reciprocal rank fusion of "
                    "both) or hybrid+rerank (hybrid, then the top_k reranked by a cross-encoder or Claude)."
                ),
                "reranker": "Reranker of hybrid+rerank; default: the retriever's `EVIDENTIA_RETRIEVAL_RERANKER`.",
                "mmr": "Diversify the returned passages with maximal marginal relevance.",
                "mmr_lambda": "MMR trade-off (1 = relevance only); default: the retriever's setting.",
                "filters": (
                    "Year range, journals, study types, minimum evidence level, MeSH descriptors (with descendants), "
                    "sources, sections, minimum priority, minimum citation count and NIH percentile (iCite); retracted "
                    "papers are excluded unless asked for; max passages per paper."
                ),
                "ef_search": "HNSW ef_search for this query.",
            }
        ),
    )

    @model_validator(mode="after")
    def _checked(self) -> SearchRequest:
        if "\\u0000" in self.model_dump_json():
            raise ValueError("text may not contain NUL (\\u0000) characters")
        if self.query is not None and not self.query.strip():
            raise ValueError("query is blank")
        if self.query is not None:
            check_query_terms(self.query, "query")
        if self.query_form is not None:
            check_query_form(self.query_form, "query_form")
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
