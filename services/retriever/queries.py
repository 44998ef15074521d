"""Query forms: what is embedded and what is matched lexically for each kind of query.

* a free question: embedded and matched as written;
* ``therapeutic``: the intent is embedded, "Evidence for {drug} as a treatment for {disease},
  including clinical trials, efficacy data, and mechanism of action", while BM25 matches drug and disease;
* ``condition-findings``: "{condition}. {finding}. {finding}." is embedded (e.g. "Malaria.
  symptom: fever 3 days. medical_history: pregnant first trimester."), BM25 matches the condition and the
  findings' values.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.models import QueryForm

THERAPEUTIC_TEMPLATE = (
    "Evidence for {drug} as a treatment for {disease}, including clinical trials, efficacy data, "
    "and mechanism of action"
)


@dataclass(frozen=True)
class RenderedQuery:
    dense: str
    """Text the embedder encodes (with the model's query prefix added there)."""
    lexical: str
    """Text BM25 matches."""
    rerank: str
    """What a reranker is told the query is."""


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "?", "!")) else f"{text}."


def render(query: str, form: QueryForm | None = None) -> RenderedQuery:
    """What each leg searches with: a free question as written, or the query form (therapeutic,
    condition-findings) rendered into its dense text, its lexical keywords and the reranker's text."""
    if form is None:
        return RenderedQuery(query, query, query)
    if form.kind == "therapeutic":
        dense = THERAPEUTIC_TEMPLATE.format(drug=(form.drug or "").strip(), disease=(form.disease or "").strip())
        return RenderedQuery(dense, form.keywords(), dense)
    parts = [_sentence(form.condition or "")] + [_sentence(f) for f in form.findings if f.strip()]
    dense = " ".join(parts)
    return RenderedQuery(dense, form.keywords(), dense)
